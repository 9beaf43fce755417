//! Jobs that hold every connection of the queue's own pool hold back neither the worker's
//! lease renewals nor its outcome writes: renewals have connections of their own, so healthy
//! jobs do not lose their leases, and a job's last progress does not hold its outcome behind
//! the pool. Each test failed before its fix and guards against the bug coming back.
//!
//! Every test runs on every backend (`mysql::...`, `postgres::...`), with its own database
//! and its own job kinds (one registry serves the whole binary). The test watches the rows
//! through a queue of its own: the pool of the queue under test is busy by design.

use std::time::Duration;

use jobqueue::testing::TestDatabase;
use jobqueue::{job, Backend, Data, JobContext, JobError, JobStatus, Queue, QueueConfig, Worker};
use tests::{
    count_status, init_tracing, on_every_backend, receive, row, slot, start, stop, wait_for,
    Mailbox,
};

/// The URL of a new, empty database of `backend` (kept: it goes away with its server).
async fn empty_database(backend: Backend, prefix: &str) -> String {
    TestDatabase::empty_on(backend, prefix)
        .await
        .unwrap_or_else(|e| panic!("cannot create a {backend} test database: {e}"))
        .keep()
}

/// A queue of the test's own on `url`, to watch the rows through while the pool of the
/// queue under test is busy.
async fn observer(url: &str) -> Queue {
    Queue::connect_with(url, QueueConfig::default().max_connections(2))
        .await
        .expect("connect the observer")
}

/// The size of a queue's own pool that leaves `jobs` connections to its worker's jobs: on
/// PostgreSQL the worker's listener holds one of them for its whole life (as
/// `Store::wake_source` documents), so the pool has one more there; the MySQL worker's idle
/// probe holds none while jobs run.
fn pool_leaving(backend: Backend, jobs: u32) -> u32 {
    match backend {
        Backend::Postgres => jobs + 1,
        _ => jobs,
    }
}

/// Takes one connection of `queue`'s own pool and holds it for `seconds` in a statement.
async fn hold_a_connection_for(queue: &Queue, seconds: u32) -> Result<(), JobError> {
    match queue.backend() {
        Backend::Postgres => {
            let mut conn = queue.postgres_pool().unwrap().acquire().await?;
            sqlx::query("SELECT pg_sleep($1)")
                .bind(f64::from(seconds))
                .execute(&mut *conn)
                .await?;
        }
        _ => {
            let mut conn = queue.mysql_pool().unwrap().acquire().await?;
            sqlx::query("SELECT SLEEP(?)")
                .bind(seconds)
                .execute(&mut *conn)
                .await?;
        }
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------
// Renewals do not wait behind jobs that exhaust the queue's pool.
// ---------------------------------------------------------------------------------------

/// Holds one connection of the queue's own pool (the worker's `Queue`) for 4 s, longer than
/// the three quarters of its lease after which an unrenewed job is stopped. The lease leaves
/// a renewal round a second of slack, so that a slow statement on a busy machine is not a
/// lost lease.
#[job(name = "regressions_pool_hog", lease = "3s", max_attempts = 3)]
async fn pool_hog(queue: Data<Queue>, n: u32) -> Result<(), JobError> {
    let _ = n;
    hold_a_connection_for(&queue, 4).await
}

async fn renewals_keep_leases_while_jobs_exhaust_the_pool(backend: Backend) {
    init_tracing();
    let url = empty_database(backend, "regressions_pool").await;
    let queue = Queue::connect_with(
        &url,
        QueueConfig::default().max_connections(pool_leaving(backend, 3)),
    )
    .await
    .unwrap();
    queue.migrate().await.unwrap();
    // The test watches through a queue of its own: the pool of this one is busy by design.
    let observer = observer(&url).await;

    let ids: Vec<u64> = queue
        .enqueue_many((0..6).map(|n| PoolHog { n }))
        .await
        .unwrap()
        .iter()
        .map(|e| e.id())
        .collect();
    // Six jobs for three connections: half of them wait 4 s for one, then hold it 4 s, all
    // the while their 3 s leases must be renewed.
    let worker = Worker::builder(queue.clone())
        .concurrency(6)
        .build()
        .unwrap();
    let (handle, task) = start(worker);

    wait_for(
        "all six jobs done (or a lease lost)",
        Duration::from_secs(40),
        || async {
            let done = count_status(&observer, JobStatus::Done).await;
            (done == 6 || handle.metrics().lease_lost > 0).then_some(())
        },
    )
    .await;
    let m = handle.metrics();
    assert_eq!((m.lease_lost, m.reclaimed), (0, 0), "{m:?}");
    let mut rows = Vec::new();
    for &id in &ids {
        let r = row(&observer, id).await;
        rows.push((r.status, r.attempts));
    }
    assert_eq!(rows, vec![(JobStatus::Done, 1); 6]);
    stop(&handle, task).await;
    let m = handle.metrics();
    assert_eq!(
        (m.claimed, m.succeeded, m.lease_lost, m.reclaimed),
        (6, 6, 0, 0),
        "{m:?}"
    );
}

// ---------------------------------------------------------------------------------------
// A job's last progress does not hold its outcome behind a pool the jobs exhaust.
// ---------------------------------------------------------------------------------------

/// In pairs, one for each backend's run of the test (the two go on at once in this
/// process): see [`slot`].
static HOLDERS: [Mailbox<u32>; 2] = [Mailbox::new(), Mailbox::new()];
static HOLDERS_GO: [tokio::sync::Semaphore; 2] = [
    tokio::sync::Semaphore::const_new(0),
    tokio::sync::Semaphore::const_new(0),
];
static REPORTER_GO: [tokio::sync::Notify; 2] = [
    tokio::sync::Notify::const_new(),
    tokio::sync::Notify::const_new(),
];

/// Holds one connection of the queue's own pool until the test lets it go.
#[job(name = "regressions_pool_holder")]
async fn pool_holder(queue: Data<Queue>, n: u32) -> Result<(), JobError> {
    // Either database's connection, held until the job returns.
    let _conn = match queue.backend() {
        Backend::Postgres => (Some(queue.postgres_pool().unwrap().acquire().await?), None),
        _ => (None, Some(queue.mysql_pool().unwrap().acquire().await?)),
    };
    let slot = slot(queue.backend());
    HOLDERS[slot].send(n);
    HOLDERS_GO[slot].acquire().await.expect("open").forget();
    Ok(())
}

/// Reports progress once every connection of the queue's pool is taken, and returns.
#[job(name = "regressions_progress_reporter")]
async fn progress_reporter(ctx: JobContext, queue: Data<Queue>) -> Result<(), JobError> {
    REPORTER_GO[slot(queue.backend())].notified().await;
    ctx.set_progress(&serde_json::json!({ "done": 1 }))?;
    Ok(())
}

/// Jobs hold every connection of the queue's pool. A job that reported progress and
/// returned is recorded done within seconds (its outcome goes through the worker's own
/// connections), not after the pool's 30 s wait for its last progress write.
async fn a_reported_progress_does_not_hold_back_the_outcome_while_jobs_hold_the_pool(
    backend: Backend,
) {
    init_tracing();
    let url = empty_database(backend, "regressions_progress_pool").await;
    let queue = Queue::connect_with(
        &url,
        QueueConfig::default()
            .max_connections(pool_leaving(backend, 3))
            // An application whose requests may wait long for a connection.
            .acquire_timeout(Duration::from_secs(30)),
    )
    .await
    .unwrap();
    queue.migrate().await.unwrap();
    let observer = observer(&url).await;
    let mut holding = HOLDERS[slot(backend)].open();
    let reporter = queue.enqueue(ProgressReporter {}).await.unwrap().id();
    queue
        .enqueue_many((0..3).map(|n| PoolHolder { n }))
        .await
        .unwrap();
    let worker = Worker::builder(queue.clone())
        .concurrency(4)
        .data(queue.clone())
        .maintenance(false)
        .build()
        .unwrap();
    let (handle, task) = start(worker);
    for _ in 0..3 {
        receive(
            &mut holding,
            "the pool's three connections to be held",
            Duration::from_secs(20),
        )
        .await;
    }
    REPORTER_GO[slot(backend)].notify_one();
    let status = wait_for(
        "the reporter to be recorded done while the pool is held",
        Duration::from_secs(12),
        || async {
            let status = row(&observer, reporter).await.status;
            (status == JobStatus::Done).then_some(status)
        },
    )
    .await;
    assert_eq!(status, JobStatus::Done);
    HOLDERS_GO[slot(backend)].add_permits(3);
    wait_for(
        "the holders to be done",
        Duration::from_secs(20),
        || async { (handle.metrics().succeeded == 4).then_some(()) },
    )
    .await;
    stop(&handle, task).await;
}

on_every_backend!(
    renewals_keep_leases_while_jobs_exhaust_the_pool,
    a_reported_progress_does_not_hold_back_the_outcome_while_jobs_hold_the_pool,
);
