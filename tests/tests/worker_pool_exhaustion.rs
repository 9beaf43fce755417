//! Jobs that hold every connection of the queue's own pool hold back neither the worker's
//! lease renewals nor its outcome writes: renewals have connections of their own, so healthy
//! jobs do not lose their leases, and a job's last progress does not hold its outcome behind
//! the pool. Each test failed before its fix and guards against the bug coming back.
//!
//! Every test has its own database and its own job kinds (one registry serves the whole
//! binary). The test watches the rows through a pool of its own: the queue's is busy by
//! design.

use std::time::Duration;

use jobqueue::{job, Data, JobContext, JobError, Queue, QueueConfig, Worker};
use sqlx::mysql::MySqlPoolOptions;
use tests::{fresh_database, init_tracing, receive, start, stop, wait_for, Mailbox};

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
    let mut conn = queue.mysql_pool().unwrap().acquire().await?;
    sqlx::query("SELECT SLEEP(4)").execute(&mut *conn).await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn renewals_keep_leases_while_jobs_exhaust_the_pool() {
    init_tracing();
    let url = fresh_database("regressions_pool").await;
    let queue = Queue::connect_with(&url, QueueConfig::default().max_connections(3))
        .await
        .unwrap();
    queue.migrate().await.unwrap();
    // The test watches through a pool of its own: the queue's is busy by design.
    let observer = MySqlPoolOptions::new()
        .max_connections(2)
        .connect(&url)
        .await
        .unwrap();

    queue
        .enqueue_many((0..6).map(|n| PoolHog { n }))
        .await
        .unwrap();
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
            let done: i64 =
                sqlx::query_scalar("SELECT COUNT(*) FROM job_queue WHERE status = 'done'")
                    .fetch_one(&observer)
                    .await
                    .unwrap();
            (done == 6 || handle.metrics().lease_lost > 0).then_some(())
        },
    )
    .await;
    let m = handle.metrics();
    assert_eq!((m.lease_lost, m.reclaimed), (0, 0), "{m:?}");
    let rows: Vec<(String, u32)> =
        sqlx::query_as("SELECT CAST(status AS CHAR), attempts FROM job_queue ORDER BY id")
            .fetch_all(&observer)
            .await
            .unwrap();
    assert_eq!(rows, vec![("done".to_owned(), 1); 6]);
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

static HOLDERS: Mailbox<u32> = Mailbox::new();
static HOLDERS_GO: tokio::sync::Semaphore = tokio::sync::Semaphore::const_new(0);
static REPORTER_GO: tokio::sync::Notify = tokio::sync::Notify::const_new();

/// Holds one connection of the queue's own pool until the test lets it go.
#[job(name = "regressions_pool_holder")]
async fn pool_holder(queue: Data<Queue>, n: u32) -> Result<(), JobError> {
    let _conn = queue.mysql_pool().unwrap().acquire().await?;
    HOLDERS.send(n);
    HOLDERS_GO.acquire().await.expect("open").forget();
    Ok(())
}

/// Reports progress once every connection of the queue's pool is taken, and returns.
#[job(name = "regressions_progress_reporter")]
async fn progress_reporter(ctx: JobContext) -> Result<(), JobError> {
    REPORTER_GO.notified().await;
    ctx.set_progress(&serde_json::json!({ "done": 1 }))?;
    Ok(())
}

/// Jobs hold every connection of the queue's pool. A job that reported progress and
/// returned is recorded done within seconds (its outcome goes through the worker's own
/// connections), not after the pool's 30 s wait for its last progress write.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reported_progress_does_not_hold_back_the_outcome_while_jobs_hold_the_pool() {
    init_tracing();
    let url = fresh_database("regressions_progress_pool").await;
    let queue = Queue::connect_with(
        &url,
        QueueConfig::default()
            .max_connections(3)
            // An application whose requests may wait long for a connection.
            .acquire_timeout(Duration::from_secs(30)),
    )
    .await
    .unwrap();
    queue.migrate().await.unwrap();
    let observer = MySqlPoolOptions::new()
        .max_connections(2)
        .connect(&url)
        .await
        .unwrap();
    let mut holding = HOLDERS.open();
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
    REPORTER_GO.notify_one();
    let status = wait_for(
        "the reporter to be recorded done while the pool is held",
        Duration::from_secs(12),
        || async {
            let status: String =
                sqlx::query_scalar("SELECT CAST(status AS CHAR) FROM job_queue WHERE id = ?")
                    .bind(reporter)
                    .fetch_one(&observer)
                    .await
                    .unwrap();
            (status == "done").then_some(status)
        },
    )
    .await;
    assert_eq!(status, "done");
    HOLDERS_GO.add_permits(3);
    wait_for(
        "the holders to be done",
        Duration::from_secs(20),
        || async { (handle.metrics().succeeded == 4).then_some(()) },
    )
    .await;
    stop(&handle, task).await;
}
