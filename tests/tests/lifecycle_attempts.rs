//! How an attempt ends, against a real server: the attempt history (ordered, bounded,
//! fenced, with reclaimed leases, pruned with its job), snoozes and their bound, a cancel
//! from inside the job, typed outputs and their size limit, and `Queue::wait`.

use std::time::Duration;

use jobqueue::admin::AttemptOutcome;
use jobqueue::limits::MAX_ATTEMPT_HISTORY;
use jobqueue::{job, EnqueueOptions, Error, JobError, JobStatus, Queue};
use jobqueue_runtime::__store::Finish;
use serde::{Deserialize, Serialize};
use tests::{
    fresh_database, fresh_queue, fresh_queue_on, migrated_queue, on_every_backend, quick_worker,
    row, sql_exec, sql_i64, sql_text, start, stop, Arg, Backend,
};

const LONG: Duration = Duration::from_secs(60);

/// Makes job `id`'s lease look expired, as after its worker died.
async fn expire_lease(queue: &Queue, id: u64) {
    let sql = match queue.backend() {
        Backend::Postgres => {
            "UPDATE job_queue SET lease_until = job_queue_now() - INTERVAL '1 second' WHERE id = ?"
        }
        _ => "UPDATE job_queue SET lease_until = UTC_TIMESTAMP(6) - INTERVAL 1 SECOND WHERE id = ?",
    };
    sql_exec(queue, sql, &[Arg::Int(id as i64)]).await;
}

// ---------------------------------------------------------------------------------------
// 1. History
// ---------------------------------------------------------------------------------------

#[job(name = "lifecycle_flaky", backoff = "constant(10ms)")]
async fn flaky(ctx: jobqueue::JobContext, n: u32) -> Result<(), JobError> {
    let _ = n;
    if ctx.attempt() < 3 {
        return Err(JobError::retryable(format!("boom {}", ctx.attempt())));
    }
    Ok(())
}

async fn a_job_retried_twice_then_done_has_three_attempts_in_order(backend: Backend) {
    let queue = fresh_queue_on(backend, "attempts_history").await;
    let id = queue.enqueue(Flaky { n: 1 }).await.expect("enqueue").id();
    let (handle, task) = start(quick_worker(&queue).owner("hist-worker").build().unwrap());
    let job = queue.wait(id, LONG).await.expect("wait");
    stop(&handle, task).await;
    assert_eq!((job.status, job.attempts), (JobStatus::Done, 3));

    let attempts = queue.attempts(id).await.expect("attempts");
    let summary: Vec<(u32, AttemptOutcome, Option<&str>, Option<&str>)> = attempts
        .iter()
        .map(|a| {
            (
                a.attempt,
                a.outcome,
                a.worker.as_deref(),
                a.error.as_deref(),
            )
        })
        .collect();
    assert_eq!(
        summary,
        [
            (
                1,
                AttemptOutcome::Retry,
                Some("hist-worker"),
                Some("boom 1")
            ),
            (
                2,
                AttemptOutcome::Retry,
                Some("hist-worker"),
                Some("boom 2")
            ),
            (3, AttemptOutcome::Done, Some("hist-worker"), None),
        ]
    );
    // Each attempt starts (its claim) before it ends, and after the previous one ended.
    for a in &attempts {
        assert!(a.started_at.expect("claim time") <= a.ended_at, "{a:?}");
    }
    for pair in attempts.windows(2) {
        assert!(pair[0].ended_at <= pair[1].started_at.unwrap(), "{pair:?}");
    }
}

/// A lease that expired is in the history as such, with its worker; the late outcome of
/// that worker adds nothing.
async fn a_reclaimed_lease_is_recorded_and_a_stale_worker_adds_nothing(backend: Backend) {
    let queue = fresh_queue_on(backend, "attempts_reclaim").await;
    let store = queue.store();
    let id = queue.enqueue(Flaky { n: 2 }).await.expect("enqueue").id();

    store.claim("default", "worker-a", 1).await.expect("claim");
    expire_lease(&queue, id).await;
    let reclaimed = store.reclaim(10).await.expect("reclaim");
    assert_eq!(reclaimed.ready, vec![(id, 1, "worker-a".to_owned())]);
    store.claim("default", "worker-b", 1).await.expect("claim");

    // Worker A comes back and reports, too late, each way an attempt can end.
    assert_eq!(store.complete("worker-a", &[(id, 1)]).await.unwrap(), [id]);
    for how in [
        Finish::Fail {
            error: "A gave up".into(),
        },
        Finish::Retry {
            delay: Duration::ZERO,
            error: "A wants a retry".into(),
        },
        Finish::Snooze {
            delay: Duration::ZERO,
            max_snoozes: 5,
            exhausted: "no".into(),
        },
    ] {
        assert_eq!(store.finish("worker-a", id, 1, &how).await.unwrap(), None);
    }
    assert!(!store
        .complete_with_output("worker-a", id, 1, "42")
        .await
        .unwrap());
    assert!(store
        .complete("worker-b", &[(id, 2)])
        .await
        .unwrap()
        .is_empty());

    let attempts = queue.attempts(id).await.expect("attempts");
    assert_eq!(attempts.len(), 2, "{attempts:#?}");
    assert_eq!(
        (
            attempts[0].attempt,
            attempts[0].outcome,
            attempts[0].worker.as_deref(),
            attempts[0].error.as_deref()
        ),
        (
            1,
            AttemptOutcome::LeaseExpired,
            Some("worker-a"),
            Some("the lease expired: its worker crashed, was stopped or stalled")
        )
    );
    assert_eq!(
        (
            attempts[1].attempt,
            attempts[1].outcome,
            attempts[1].worker.as_deref()
        ),
        (2, AttemptOutcome::Done, Some("worker-b"))
    );
}

async fn the_history_keeps_the_last_twenty_attempts_and_is_pruned_with_its_job(backend: Backend) {
    let queue = fresh_queue_on(backend, "attempts_bound").await;
    let store = queue.store();
    let id = queue
        .enqueue_with(Flaky { n: 3 }, EnqueueOptions::default().max_attempts(100))
        .await
        .expect("enqueue")
        .id();
    for attempt in 1..=25 {
        let claimed = store.claim("default", "w", 1).await.expect("claim");
        assert_eq!(claimed[0].attempt, attempt);
        let written = store.finish("w", id, attempt, &Finish::HandBack).await;
        assert_eq!(written.unwrap(), Some(JobStatus::Ready));
    }
    let attempts = queue.attempts(id).await.expect("attempts");
    assert_eq!(attempts.len(), MAX_ATTEMPT_HISTORY);
    let numbers: Vec<u32> = attempts.iter().map(|a| a.attempt).collect();
    assert_eq!(
        numbers,
        (6..=25).collect::<Vec<_>>(),
        "the latest, oldest first"
    );
    assert!(attempts
        .iter()
        .all(|a| a.outcome == AttemptOutcome::HandedBack));

    store.claim("default", "w", 1).await.expect("claim");
    assert!(store.complete("w", &[(id, 26)]).await.unwrap().is_empty());
    assert_eq!(queue.attempts(id).await.unwrap().len(), MAX_ATTEMPT_HISTORY);
    assert_eq!(
        queue.prune(JobStatus::Done, Duration::ZERO).await.unwrap(),
        1
    );
    let gone = queue.attempts(id).await.unwrap_err();
    assert_eq!(gone.to_string(), format!("no job with id {id}"));
    let left = sql_i64(&queue, "SELECT COUNT(*) FROM job_queue", &[]).await;
    assert_eq!(left, 0, "nothing of the job is left");
}

// ---------------------------------------------------------------------------------------
// 2. Snooze
// ---------------------------------------------------------------------------------------

/// Snoozes three times, then succeeds: on a budget of one attempt.
#[job(name = "lifecycle_snoozer", max_attempts = 1)]
async fn snoozer(ctx: jobqueue::JobContext, n: u32) -> Result<(), JobError> {
    let _ = n;
    if ctx.attempt() <= 3 {
        return Err(JobError::snooze(Duration::from_millis(10)));
    }
    Ok(())
}

#[job(name = "lifecycle_always_snoozes", max_snoozes = 2)]
async fn always_snoozes(n: u32) -> Result<(), JobError> {
    let _ = n;
    Err(JobError::snooze(Duration::from_millis(10)))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_snooze_spends_no_attempt_and_its_bound_fails_the_job_saying_so() {
    // MySQL only until an operator's retry runs on PostgreSQL.
    let queue = fresh_queue("attempts_snooze").await;
    let snoozing = queue.enqueue(Snoozer { n: 1 }).await.unwrap().id();
    let bounded = queue.enqueue(AlwaysSnoozes { n: 1 }).await.unwrap().id();
    let (handle, task) = start(quick_worker(&queue).build().unwrap());
    let done = queue.wait(snoozing, LONG).await.expect("wait");
    let failed = queue.wait(bounded, LONG).await.expect("wait");
    stop(&handle, task).await;

    assert_eq!(done.status, JobStatus::Done, "{:?}", done.last_error);
    assert_eq!((done.attempts, done.max_attempts, done.snoozes), (4, 4, 3));
    assert_eq!(done.last_error, None);
    let outcomes: Vec<AttemptOutcome> = queue
        .attempts(snoozing)
        .await
        .unwrap()
        .iter()
        .map(|a| a.outcome)
        .collect();
    use AttemptOutcome::{Done, Failed, Snoozed};
    assert_eq!(outcomes, [Snoozed, Snoozed, Snoozed, Done]);

    assert_eq!(failed.status, JobStatus::Failed);
    assert_eq!((failed.attempts, failed.snoozes), (3, 2));
    let message = "job `lifecycle_always_snoozes` snoozed 2 times, the most its kind allows; \
                   raise the bound with `#[job(max_snoozes = ...)]`, or return an error instead of snoozing";
    assert_eq!(failed.last_error.as_deref(), Some(message));
    let attempts = queue.attempts(bounded).await.unwrap();
    let outcomes: Vec<AttemptOutcome> = attempts.iter().map(|a| a.outcome).collect();
    assert_eq!(outcomes, [Snoozed, Snoozed, Failed]);
    assert_eq!(attempts[0].error.as_deref(), Some("snoozed for 10ms"));
    assert_eq!(attempts[2].error.as_deref(), Some(message));

    // An operator's retry starts the count afresh.
    assert!(queue.retry(bounded).await.unwrap());
    assert_eq!(row(&queue, bounded).await.snoozes, 0);
}

// ---------------------------------------------------------------------------------------
// 3. Cancel from inside
// ---------------------------------------------------------------------------------------

#[job(name = "lifecycle_withdrawn", max_attempts = 5)]
async fn withdrawn(order_id: u64) -> Result<(), JobError> {
    Err(JobError::cancel(format!("order {order_id} was withdrawn")))
}

async fn a_job_that_cancels_itself_ends_cancelled_with_its_reason_and_no_retry(backend: Backend) {
    let queue = fresh_queue_on(backend, "attempts_cancel").await;
    let id = queue.enqueue(Withdrawn { order_id: 7 }).await.unwrap().id();
    let (handle, task) = start(quick_worker(&queue).owner("cw").build().unwrap());
    let job = queue.wait(id, LONG).await.expect("wait");
    stop(&handle, task).await;

    assert_eq!((job.status, job.attempts), (JobStatus::Cancelled, 1));
    let reason = "cancelled by the job: order 7 was withdrawn";
    assert_eq!(job.last_error.as_deref(), Some(reason));
    let attempts = queue.attempts(id).await.unwrap();
    assert_eq!(attempts.len(), 1);
    assert_eq!(attempts[0].outcome, AttemptOutcome::Cancelled);
    assert_eq!(attempts[0].error.as_deref(), Some(reason));
}

// ---------------------------------------------------------------------------------------
// 4. Outputs and wait
// ---------------------------------------------------------------------------------------

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct Sum {
    sum: u64,
    label: String,
}

#[job(name = "lifecycle_totals", queue = "outputs")]
async fn totals(values: Vec<u64>) -> Result<Sum, JobError> {
    Ok(Sum {
        sum: values.iter().sum(),
        label: format!("{} values", values.len()),
    })
}

#[job(name = "lifecycle_huge", queue = "outputs", max_attempts = 3)]
async fn huge(len: usize) -> Result<String, JobError> {
    Ok("x".repeat(len))
}

#[job(name = "lifecycle_nothing", queue = "outputs")]
async fn nothing(n: u32) {
    let _ = n;
}

async fn outputs_round_trip_typed_and_an_oversized_one_fails_the_job(backend: Backend) {
    let queue = fresh_queue_on(backend, "attempts_outputs").await;
    let sum = queue
        .enqueue(Totals {
            values: vec![1, 2, 39],
        })
        .await
        .unwrap()
        .id();
    let big = queue.enqueue(Huge { len: 70_000 }).await.unwrap().id();
    let unit = queue.enqueue(Nothing { n: 1 }).await.unwrap().id();
    assert_eq!(
        queue.output::<Totals>(sum).await.unwrap(),
        None,
        "not run yet"
    );

    let (handle, task) = start(quick_worker(&queue).queues(["outputs"]).build().unwrap());
    let totals = queue
        .wait_output::<Totals>(sum, LONG)
        .await
        .expect("output");
    assert_eq!(
        totals,
        Sum {
            sum: 42,
            label: "3 values".into()
        }
    );
    assert_eq!(queue.wait_output::<Nothing>(unit, LONG).await.unwrap(), ());
    let failed = queue.wait(big, LONG).await.unwrap();
    stop(&handle, task).await;

    assert_eq!(
        queue.output::<Totals>(sum).await.unwrap(),
        Some(totals.clone())
    );
    let stored = sql_text(
        &queue,
        "SELECT output FROM job_queue WHERE id = ?",
        &[Arg::Int(unit as i64)],
    )
    .await;
    assert_eq!(stored, None, "`()` stores nothing");

    assert_eq!((failed.status, failed.attempts), (JobStatus::Failed, 1));
    assert_eq!(
        failed.last_error.as_deref(),
        Some(
            "the output of job `lifecycle_huge` is 70002 bytes of JSON, over the limit of 65536 bytes; \
             store large results elsewhere (a table, a file) and return a reference to them (not retried)"
        )
    );
    let e = queue.wait_output::<Huge>(big, LONG).await.unwrap_err();
    assert!(
        e.to_string().starts_with(&format!(
            "cannot read the output of job {big}: it ended failed"
        )),
        "{e}"
    );
    let e = queue.output::<Huge>(sum).await.unwrap_err();
    assert_eq!(
        e.to_string(),
        format!(
            "cannot read the output of job {sum}: it is a job of kind `lifecycle_totals`, not `lifecycle_huge`; read it as its own kind"
        )
    );
}

/// A job finished by a worker of another `Queue` (another pool: another process, as far
/// as this one can tell) is seen by the waiter's polling; a job nobody runs times out.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wait_sees_a_job_finished_elsewhere_and_times_out_with_its_error() {
    let url = fresh_database("attempts_wait").await;
    let workers_queue = migrated_queue(&url).await;
    let waiter = Queue::connect(&url).await.expect("connect");
    let id = waiter
        .enqueue(Totals { values: vec![5] })
        .await
        .unwrap()
        .id();
    let stuck = waiter
        .enqueue_with(Nothing { n: 2 }, EnqueueOptions::default().queue("nobody"))
        .await
        .unwrap()
        .id();

    let e = waiter
        .wait(stuck, Duration::from_millis(100))
        .await
        .unwrap_err();
    assert!(matches!(e, Error::WaitTimedOut { id, .. } if id == stuck));
    assert_eq!(
        e.to_string(),
        format!(
            "job {stuck} did not end within 100ms: it is ready; wait longer, or look at it with `jobqueue show {stuck}`"
        )
    );

    let (handle, task) = start(
        quick_worker(&workers_queue)
            .queues(["outputs"])
            .build()
            .unwrap(),
    );
    let output = waiter.wait_output::<Totals>(id, LONG).await.expect("wait");
    stop(&handle, task).await;
    assert_eq!(output.sum, 5);
    assert_eq!(
        waiter.wait(id, Duration::ZERO).await.unwrap().status,
        JobStatus::Done,
        "a job that has ended is returned at once"
    );
    let e = waiter.wait(999_999, LONG).await.unwrap_err();
    assert_eq!(e.to_string(), "no job with id 999999");
}

on_every_backend!(
    a_job_retried_twice_then_done_has_three_attempts_in_order,
    a_reclaimed_lease_is_recorded_and_a_stale_worker_adds_nothing,
    the_history_keeps_the_last_twenty_attempts_and_is_pruned_with_its_job,
    a_job_that_cancels_itself_ends_cancelled_with_its_reason_and_no_retry,
    outputs_round_trip_typed_and_an_oversized_one_fails_the_job,
);
