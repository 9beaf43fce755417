//! Pruning of finished jobs past their retention, by the workers' maintenance: one worker
//! works off a backlog larger than one minute's quota within seconds, and a recent job
//! stays. It failed before the change it guards.

use std::time::{Duration, Instant};

use jobqueue::{job, JobStatus};
use tests::{fresh_queue, init_tracing, quick_worker, row, start, stop, wait_for, wait_status};

/// A job that does nothing; the test looks at rows, not at effects.
#[job(name = "hardening_conn_noop", queue = "conn")]
async fn noop(n: u64) {
    let _ = n;
}

// ---------------------------------------------------------------------------------------
// Pruning keeps up with a large backlog
// ---------------------------------------------------------------------------------------

/// One worker's maintenance deletes a backlog of 30,000 finished jobs past their retention
/// within seconds, rather than 10,000 a minute.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pruning_works_off_a_backlog_larger_than_one_minutes_quota() {
    init_tracing();
    let queue = fresh_queue("conn_prune").await;
    sqlx::query(
        "INSERT INTO job_queue (queue, kind, task_key, payload, status, priority, run_at, attempts, \
           max_attempts, lease_ms, created_at, updated_at, finished_at) \
         SELECT 'conn', 'hardening_conn_noop', CONCAT('old-', n), '{\"n\":0}', 'done', 0, \
           UTC_TIMESTAMP(6) - INTERVAL 9 DAY, 1, 25, 30000, UTC_TIMESTAMP(6) - INTERVAL 9 DAY, \
           UTC_TIMESTAMP(6) - INTERVAL 8 DAY, UTC_TIMESTAMP(6) - INTERVAL 8 DAY \
         FROM (SELECT a.d + 10 * b.d + 100 * c.d + 1000 * e.d + 10000 * f.d AS n \
               FROM (SELECT 0 d UNION ALL SELECT 1 UNION ALL SELECT 2 UNION ALL SELECT 3 UNION ALL SELECT 4 \
                     UNION ALL SELECT 5 UNION ALL SELECT 6 UNION ALL SELECT 7 UNION ALL SELECT 8 UNION ALL SELECT 9) a, \
                    (SELECT 0 d UNION ALL SELECT 1 UNION ALL SELECT 2 UNION ALL SELECT 3 UNION ALL SELECT 4 \
                     UNION ALL SELECT 5 UNION ALL SELECT 6 UNION ALL SELECT 7 UNION ALL SELECT 8 UNION ALL SELECT 9) b, \
                    (SELECT 0 d UNION ALL SELECT 1 UNION ALL SELECT 2 UNION ALL SELECT 3 UNION ALL SELECT 4 \
                     UNION ALL SELECT 5 UNION ALL SELECT 6 UNION ALL SELECT 7 UNION ALL SELECT 8 UNION ALL SELECT 9) c, \
                    (SELECT 0 d UNION ALL SELECT 1 UNION ALL SELECT 2 UNION ALL SELECT 3 UNION ALL SELECT 4 \
                     UNION ALL SELECT 5 UNION ALL SELECT 6 UNION ALL SELECT 7 UNION ALL SELECT 8 UNION ALL SELECT 9) e, \
                    (SELECT 0 d UNION ALL SELECT 1 UNION ALL SELECT 2) f) numbers",
    )
    .execute(queue.mysql_pool().unwrap())
    .await
    .unwrap();
    let old = tests::count_status(&queue, JobStatus::Done).await;
    assert_eq!(old, 30_000);
    // A recent one stays.
    let recent = queue.enqueue(Noop { n: 1 }).await.unwrap().id();

    let worker = quick_worker(&queue).queues(["conn"]).build().unwrap();
    let t0 = Instant::now();
    let (handle, task) = start(worker);
    wait_status(&queue, recent, JobStatus::Done, Duration::from_secs(20)).await;
    wait_for(
        "the backlog of 30,000 old done jobs to be pruned",
        // A busy machine's margin; at 10,000 a minute it would take three.
        Duration::from_secs(90),
        || async {
            let n = tests::count_status(&queue, JobStatus::Done).await;
            (n == 1).then_some(())
        },
    )
    .await;
    println!("pruned 30,000 rows in {:?}", t0.elapsed());
    stop(&handle, task).await;
    assert_eq!(row(&queue, recent).await.status, JobStatus::Done);
}

// ---------------------------------------------------------------------------------------
// Promotion and reclaim, through the store, on every backend
// ---------------------------------------------------------------------------------------

use jobqueue::admin::AttemptOutcome;
use jobqueue::{Backend, Queue};
use jobqueue_runtime::__store::Reclaimed;
use tests::{fresh_queue_on, sql_exec, sql_i64, sql_text, Arg};

/// Enqueues `n` jobs of the test kind and returns their ids, in order.
async fn enqueue_n(queue: &Queue, from: u64, n: u64) -> Vec<u64> {
    let mut ids = Vec::new();
    for i in from..from + n {
        ids.push(queue.enqueue(Noop { n: i }).await.expect("enqueue").id());
    }
    ids
}

/// Job `id`'s status as the table holds it.
async fn status_of(queue: &Queue, id: u64) -> String {
    sql_text(
        queue,
        "SELECT status FROM job_queue WHERE id = ?",
        &[Arg::Int(id as i64)],
    )
    .await
    .expect("a status")
}

/// Promotion makes due scheduled jobs ready, oldest due first and no more than asked per
/// call; a job not yet due stays scheduled.
async fn promotion_readies_due_jobs_oldest_first_in_bounded_batches(backend: Backend) {
    let queue = fresh_queue_on(backend, "maint_promote").await;
    let store = queue.store();
    let ids = enqueue_n(&queue, 0, 4).await;
    let runs = [
        "2000-01-03 00:00:00",
        "2000-01-01 00:00:00",
        "2000-01-02 00:00:00",
        "2999-01-01 00:00:00",
    ];
    for (&id, run_at) in ids.iter().zip(runs) {
        // A literal: both databases read it as a time, where a bound text is a time on
        // MySQL only.
        let sql =
            format!("UPDATE job_queue SET status = 'scheduled', run_at = '{run_at}' WHERE id = ?");
        assert_eq!(sql_exec(&queue, &sql, &[Arg::Int(id as i64)]).await, 1);
    }
    assert_eq!(store.promote(2).await.expect("promote"), 2);
    assert_eq!(status_of(&queue, ids[1]).await, "ready");
    assert_eq!(status_of(&queue, ids[2]).await, "ready");
    assert_eq!(
        status_of(&queue, ids[0]).await,
        "scheduled",
        "the latest due job waits for the next batch"
    );
    assert_eq!(store.promote(10).await.expect("promote"), 1);
    assert_eq!(status_of(&queue, ids[0]).await, "ready");
    assert_eq!(store.promote(10).await.expect("promote"), 0);
    assert_eq!(status_of(&queue, ids[3]).await, "scheduled");
}

/// Puts job `id` in `running` for `owner`, its lease expired at `until`.
async fn running(
    queue: &Queue,
    id: u64,
    until: &str,
    attempts: i64,
    max_attempts: i64,
    expiries: i64,
    cancel: bool,
) {
    // The time as a literal: both databases read it as a time.
    let sql = format!(
        "UPDATE job_queue SET status = 'running', attempts = ?, max_attempts = ?, \
         lease_expiries = ?, cancel_requested = (? = 1), lease_owner = 'worker-x', \
         lease_until = '{until}', claimed_at = '2000-01-01 00:00:00', last_error = 'boom' WHERE id = ?"
    );
    let changed = sql_exec(
        queue,
        &sql,
        &[
            Arg::Int(attempts),
            Arg::Int(max_attempts),
            Arg::Int(expiries),
            Arg::Int(i64::from(cancel)),
            Arg::Int(id as i64),
        ],
    )
    .await;
    assert_eq!(changed, 1);
}

/// Reclaim takes back expired leases, oldest first and no more than asked per call: to
/// ready at a first expiry with `attempts` kept, to scheduled later after a later one, to
/// failed at the last attempt or at the last expiry allowed, to cancelled when a cancel was
/// pending; each expiry is counted and written into the job's history, and a live lease is
/// left alone.
async fn reclaim_keeps_attempts_and_respects_max_attempts(backend: Backend) {
    let queue = fresh_queue_on(backend, "maint_reclaim").await;
    let store = queue.store();
    let ids = enqueue_n(&queue, 100, 6).await;
    let (first, last_attempt, cancel, again, poison, live) =
        (ids[0], ids[1], ids[2], ids[3], ids[4], ids[5]);
    running(&queue, first, "2000-01-01 00:00:01", 1, 3, 0, false).await;
    running(&queue, last_attempt, "2000-01-01 00:00:02", 3, 3, 0, false).await;
    running(&queue, cancel, "2000-01-01 00:00:03", 1, 3, 0, true).await;
    running(&queue, again, "2000-01-01 00:00:04", 2, 5, 1, false).await;
    running(&queue, poison, "2000-01-01 00:00:05", 2, 5, 2, false).await;
    running(&queue, live, "2999-01-01 00:00:00", 1, 3, 0, false).await;

    // The two oldest expiries first.
    let batch = store.reclaim(2).await.expect("reclaim");
    assert_eq!(batch.ready, vec![(first, 1, "worker-x".to_owned())]);
    assert_eq!(batch.failed, vec![(last_attempt, 3, "worker-x".to_owned())]);
    assert!(batch.cancelled.is_empty() && batch.delayed.is_empty() && batch.poison.is_empty());
    assert_eq!(status_of(&queue, cancel).await, "running");

    let Reclaimed {
        ready,
        delayed,
        failed,
        poison: poisoned,
        cancelled,
        ..
    } = store.reclaim(100).await.expect("reclaim");
    assert!(ready.is_empty() && failed.is_empty());
    assert_eq!(cancelled, vec![cancel]);
    assert_eq!(delayed.len(), 1);
    assert_eq!((delayed[0].0, delayed[0].1), (again, 2));
    assert_eq!(poisoned, vec![(poison, 2, "worker-x".to_owned())]);

    let expect = [
        (first, "ready", 1),
        (last_attempt, "failed", 3),
        (cancel, "cancelled", 1),
        (again, "scheduled", 2),
        (poison, "failed", 2),
    ];
    for (id, status, attempts) in expect {
        assert_eq!(status_of(&queue, id).await, status, "job {id}");
        let row = tests::row(&queue, id).await;
        assert_eq!(row.attempts, attempts, "a reclaim keeps the attempt count");
        assert_eq!(row.lease_owner, None);
        let history = queue.attempts(id).await.expect("attempts");
        let lost = history.last().expect("the lost attempt in the history");
        assert_eq!(lost.outcome, AttemptOutcome::LeaseExpired);
        assert_eq!(lost.attempt, attempts);
        assert_eq!(lost.worker.as_deref(), Some("worker-x"));
    }
    // Each expiry is counted (a count, to read a BIGINT from both databases).
    for (id, expiries) in [(first, 1), (again, 2), (poison, 3)] {
        let counted = sql_i64(
            &queue,
            "SELECT COUNT(*) FROM job_queue WHERE id = ? AND lease_expiries = ?",
            &[Arg::Int(id as i64), Arg::Int(expiries)],
        )
        .await;
        assert_eq!(counted, 1, "job {id} has {expiries} expiries");
    }
    let error = |id: u64| {
        let queue = queue.clone();
        async move {
            sql_text(
                &queue,
                "SELECT last_error FROM job_queue WHERE id = ?",
                &[Arg::Int(id as i64)],
            )
            .await
            .unwrap_or_default()
        }
    };
    assert!(error(first).await.starts_with(
        "lease of worker-x expired during attempt 1; taken back; previous error: boom"
    ));
    assert!(error(last_attempt)
        .await
        .contains("during the last attempt (3 of 3)"));
    assert!(error(again)
        .await
        .contains("(expiry 2 of at most 2); taken back with a delay"));
    assert!(error(poison).await.starts_with("lease expired 3 times"));
    // The delayed job waits: a promotion now finds nothing due.
    assert_eq!(store.promote(10).await.expect("promote"), 0);
    assert_eq!(status_of(&queue, live).await, "running");
    let nothing = store.reclaim(100).await.expect("reclaim");
    assert!(
        nothing.ready.is_empty()
            && nothing.failed.is_empty()
            && nothing.cancelled.is_empty()
            && nothing.delayed.is_empty()
            && nothing.poison.is_empty()
    );
}

tests::on_every_backend!(
    promotion_readies_due_jobs_oldest_first_in_bounded_batches,
    reclaim_keeps_attempts_and_respects_max_attempts,
);
