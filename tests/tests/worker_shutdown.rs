//! How a worker stops, and that it always does: a shutdown is bounded for a job whose
//! operator cancel is pending and which ignores cancellation; with the default grace periods
//! a job that ignores cancellation is handed back before an orchestrator's default 30 s
//! kill; and dropping `run_until`'s future stops lease renewal, so another worker can take
//! over. Each test failed before the change it guards and guards against the bug coming
//! back.
//!
//! Every test runs on MySQL/MariaDB and on PostgreSQL (`mysql::name`, `postgres::name`), with
//! its own database and its own job kinds (one registry serves the whole binary). A job's
//! `run` argument is its test's backend ([`run_of`]), which picks the test's mailbox, since a
//! test's two runs run at once. Graceful shutdown's hand-back of a job on its last attempt is
//! in `worker_outcomes.rs`.

use std::time::{Duration, Instant};

use jobqueue::admin::CancelOutcome;

use jobqueue::context::CancelReason;

use jobqueue::{job, JobContext, JobStatus, Queue, Worker};
use tests::{
    fresh_queue_on, init_tracing, on_every_backend, quick_worker, receive, row, sql_i64, start,
    stop, wait_for, wait_status, Arg, Backend, Mailbox,
};

/// The `run` of a test's job on `backend`: the index of the test's mailbox in a pair of them.
fn run_of(backend: Backend) -> u32 {
    match backend {
        Backend::Postgres => 1,
        _ => 0,
    }
}

/// Whether job `id`'s lease has ended by the database's clock.
async fn lease_has_ended(queue: &Queue, id: u64) -> bool {
    let sql = match queue.backend() {
        Backend::Postgres => {
            "SELECT COUNT(*) FROM job_queue WHERE id = ? AND lease_until < job_queue_now()"
        }
        _ => "SELECT COUNT(*) FROM job_queue WHERE id = ? AND lease_until < UTC_TIMESTAMP(6)",
    };
    sql_i64(queue, sql, &[Arg::Int(id as i64)]).await == 1
}

// ---------------------------------------------------------------------------------------
// Shutdown is bounded for a job with a pending operator cancel that ignores it.
// ---------------------------------------------------------------------------------------

static DEAF_STARTED: [Mailbox<JobContext>; 2] = [Mailbox::new(), Mailbox::new()];

/// Ignores every cancellation: only dropping it stops it. The renewer notices an operator's
/// cancel within a quarter of the lease, under a second; the lease leaves a renewal round a second
/// of slack, so that a slow statement on a busy machine is not a lost lease.
#[job(name = "regressions_deaf_to_cancel", lease = "3s")]
async fn deaf_to_cancel(ctx: JobContext, run: u32) {
    DEAF_STARTED[run as usize].send(ctx);
    tokio::time::sleep(Duration::from_secs(120)).await;
}

async fn shutdown_is_bounded_for_a_job_that_ignores_a_pending_cancel(backend: Backend) {
    init_tracing();
    let queue = fresh_queue_on(backend, "regressions_deaf").await;
    let run = run_of(backend);
    let mut started = DEAF_STARTED[run as usize].open();
    let id = queue.enqueue(DeafToCancel { run }).await.unwrap().id();
    let worker = quick_worker(&queue)
        .shutdown_grace(Duration::from_millis(200))
        .cancel_grace(Duration::from_millis(200))
        .build()
        .unwrap();
    let (handle, task) = start(worker);
    let ctx = receive(&mut started, "the job to start", Duration::from_secs(10)).await;

    assert_eq!(queue.cancel(id).await.unwrap(), CancelOutcome::Requested);
    tokio::time::timeout(Duration::from_secs(10), ctx.cancelled())
        .await
        .expect("the operator's cancel reaches the job");
    assert_eq!(ctx.cancel_reason(), Some(CancelReason::Requested));

    // Both grace periods are 200 ms: the job, which goes on running, is dropped after them.
    // The bound leaves a busy machine seconds for the final writes, and is far below the
    // job's 120 s.
    let t0 = Instant::now();
    handle.shutdown();
    let returned = tokio::time::timeout(Duration::from_secs(10), task).await;
    assert!(
        returned.is_ok(),
        "the worker was still shutting down after {:?}: a job with a pending cancel kept it waiting",
        t0.elapsed()
    );
    returned.unwrap().unwrap().unwrap();

    // Handed back while its cancel was pending: it ends cancelled, not back in line.
    let r = row(&queue, id).await;
    assert_eq!((r.status, r.attempts), (JobStatus::Cancelled, 1), "{r:?}");
    assert_eq!((r.lease_owner, r.lease_until), (None, None));
    assert!(r.finished_at.is_some());
    let m = handle.metrics();
    assert_eq!(
        (m.cancelled, m.handed_back, m.lease_lost),
        (1, 0, 0),
        "counted as what the row became: {m:?}"
    );
}

// ---------------------------------------------------------------------------------------
// Dropping `run_until`'s future stops lease renewal.
// ---------------------------------------------------------------------------------------

static ABANDONED_STARTED: [Mailbox<JobContext>; 2] = [Mailbox::new(), Mailbox::new()];

/// The first attempt runs until its task is dropped; later ones finish at once.
#[job(name = "regressions_abandoned", lease = "1s", max_attempts = 3)]
async fn abandoned(ctx: JobContext, run: u32) {
    let first = ctx.attempt() == 1;
    ABANDONED_STARTED[run as usize].send(ctx);
    if first {
        tokio::time::sleep(Duration::from_secs(120)).await;
    }
}

async fn dropping_the_run_future_stops_renewals_and_another_worker_takes_over(backend: Backend) {
    init_tracing();
    let queue = fresh_queue_on(backend, "regressions_dropped").await;
    let run = run_of(backend);
    let mut started = ABANDONED_STARTED[run as usize].open();
    let id = queue.enqueue(Abandoned { run }).await.unwrap().id();
    let worker = quick_worker(&queue)
        .owner("dropped-a")
        .maintenance(false)
        .build()
        .unwrap();
    let task = tokio::spawn(worker.run());
    let ctx = receive(&mut started, "the first attempt", Duration::from_secs(10)).await;
    assert_eq!(ctx.attempt(), 1);

    // Drop the future without a shutdown, as a caller's `select!` or timeout would.
    task.abort();
    assert!(task.await.unwrap_err().is_cancelled());

    // At most one renewal was in flight: the 1 s lease then runs out, and nobody extends it.
    // The lease read before the check that it has ended: a renewal in between would have
    // extended it past the check.
    let lease_until = wait_for(
        "the dropped worker's lease to expire unrenewed",
        Duration::from_secs(5),
        || async {
            let until = row(&queue, id)
                .await
                .lease_until
                .expect("a running job has a lease");
            lease_has_ended(&queue, id).await.then_some(until)
        },
    )
    .await;
    let r = row(&queue, id).await;
    assert_eq!(
        (
            r.status,
            r.attempts,
            r.lease_owner.as_deref(),
            r.lease_until
        ),
        (JobStatus::Running, 1, Some("dropped-a"), Some(lease_until)),
        "nothing touched the row since its lease ran out"
    );

    // Another worker reclaims it after the lease and runs it.
    let (handle, task) = start(quick_worker(&queue).owner("dropped-b").build().unwrap());
    let r = wait_status(&queue, id, JobStatus::Done, Duration::from_secs(10)).await;
    assert_eq!(r.attempts, 2);
    let second = receive(&mut started, "the second attempt", Duration::from_secs(1)).await;
    assert_eq!(second.attempt(), 2);
    stop(&handle, task).await;
    let m = handle.metrics();
    assert_eq!((m.reclaimed, m.claimed, m.succeeded), (1, 1, 1), "{m:?}");
}

// ---------------------------------------------------------------------------------------
// Default shutdown fits Kubernetes' default termination grace
// ---------------------------------------------------------------------------------------

static STUBBORN_STARTED: [Mailbox<u64>; 2] = [Mailbox::new(), Mailbox::new()];

/// Ignores cancellation: only dropping it stops it.
#[job(name = "hardening_conn_stubborn", queue = "conn_stubborn")]
async fn stubborn(ctx: JobContext, run: u32) {
    STUBBORN_STARTED[run as usize].send(ctx.id());
    tokio::time::sleep(Duration::from_secs(300)).await;
}

/// With the default grace periods, a worker told to stop while a job
/// ignores cancellation has handed the job back before Kubernetes' default
/// `terminationGracePeriodSeconds` of 30 s would kill the pod.
async fn default_shutdown_hands_jobs_back_within_thirty_seconds(backend: Backend) {
    init_tracing();
    let queue = fresh_queue_on(backend, "conn_k8s").await;
    let run = run_of(backend);
    let mut started = STUBBORN_STARTED[run as usize].open();
    let id = queue.enqueue(Stubborn { run }).await.unwrap().id();
    let worker = Worker::builder(queue.clone())
        .queues(["conn_stubborn"])
        .build()
        .unwrap();
    let (handle, task) = start(worker);
    receive(&mut started, "the job to start", Duration::from_secs(20)).await;
    let t0 = Instant::now();
    handle.shutdown();
    let returned = tokio::time::timeout(Duration::from_secs(30), task).await;
    let took = t0.elapsed();
    assert!(
        returned.is_ok(),
        "the worker was still shutting down after {took:?}"
    );
    returned.unwrap().unwrap().unwrap();
    println!("default shutdown took {took:?}");
    let r = row(&queue, id).await;
    assert_eq!((r.status, r.attempts), (JobStatus::Ready, 1), "{r:?}");
}

on_every_backend!(
    shutdown_is_bounded_for_a_job_that_ignores_a_pending_cancel,
    dropping_the_run_future_stops_renewals_and_another_worker_takes_over,
    default_shutdown_hands_jobs_back_within_thirty_seconds,
);
