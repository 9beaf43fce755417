//! One test per bug fixed after a review of the worker and the bulk enqueue: each failed
//! before its fix and guards against the bug coming back.
//!
//! 1. A job whose operator cancel is pending and which ignores cancellation no longer
//!    makes shutdown wait for it forever.
//! 2. Dropping `run_until`'s future stops lease renewal, so another worker can take over.
//! 3. Renewals have connections of their own: jobs that exhaust the queue's pool do not
//!    make healthy jobs lose their leases.
//! 4. A worker with every slot busy does not spin.
//! 5. A bulk enqueue larger than the server's `max_allowed_packet` is sent in pieces.
//! 6. A bulk enqueue keeps the caller's order.
//!
//! Every test has its own database and its own job kinds (one registry serves the whole
//! binary).

use std::time::{Duration, Instant};

use jobqueue::admin::CancelOutcome;
use jobqueue::context::CancelReason;
use jobqueue::{job, Data, JobContext, JobError, JobStatus, Queue, QueueConfig, Worker};
use sqlx::mysql::MySqlPoolOptions;
use sqlx::types::chrono::NaiveDateTime;
use tests::{
    fresh_database, fresh_queue, init_tracing, quick_worker, receive, row, start, stop, wait_for,
    wait_status, Mailbox,
};

// ---------------------------------------------------------------------------------------
// 1. Shutdown is bounded for a job with a pending operator cancel that ignores it.
// ---------------------------------------------------------------------------------------

static DEAF_STARTED: Mailbox<JobContext> = Mailbox::new();

/// Ignores every cancellation: only dropping it stops it. The renewer notices an operator's
/// cancel within a quarter of the lease, under a second; the lease leaves a renewal round a second
/// of slack, so that a slow statement on a busy machine is not a lost lease.
#[job(name = "regressions_deaf_to_cancel", lease = "3s")]
async fn deaf_to_cancel(ctx: JobContext) {
    DEAF_STARTED.send(ctx);
    tokio::time::sleep(Duration::from_secs(120)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_is_bounded_for_a_job_that_ignores_a_pending_cancel() {
    init_tracing();
    let queue = fresh_queue("regressions_deaf").await;
    let mut started = DEAF_STARTED.open();
    let id = queue.enqueue(DeafToCancel {}).await.unwrap().id();
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
// 2. Dropping `run_until`'s future stops lease renewal.
// ---------------------------------------------------------------------------------------

static ABANDONED_STARTED: Mailbox<JobContext> = Mailbox::new();

/// The first attempt runs until its task is dropped; later ones finish at once.
#[job(name = "regressions_abandoned", lease = "1s", max_attempts = 3)]
async fn abandoned(ctx: JobContext) {
    let first = ctx.attempt() == 1;
    ABANDONED_STARTED.send(ctx);
    if first {
        tokio::time::sleep(Duration::from_secs(120)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropping_the_run_future_stops_renewals_and_another_worker_takes_over() {
    init_tracing();
    let queue = fresh_queue("regressions_dropped").await;
    let mut started = ABANDONED_STARTED.open();
    let id = queue.enqueue(Abandoned {}).await.unwrap().id();
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
    let lease_until: NaiveDateTime = wait_for(
        "the dropped worker's lease to expire unrenewed",
        Duration::from_secs(5),
        || async {
            let (until, expired): (Option<NaiveDateTime>, bool) = sqlx::query_as(
                "SELECT lease_until, COALESCE(lease_until < UTC_TIMESTAMP(6), FALSE) \
                 FROM job_queue WHERE id = ?",
            )
            .bind(id)
            .fetch_one(queue.pool())
            .await
            .unwrap();
            expired.then(|| until.expect("a running job has a lease"))
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
        (
            JobStatus::Running,
            1,
            Some("dropped-a"),
            Some(lease_until.and_utc())
        ),
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
// 3. Renewals do not wait behind jobs that exhaust the queue's pool.
// ---------------------------------------------------------------------------------------

/// Holds one connection of the queue's own pool (the worker's `Queue`) for 4 s, longer than
/// the three quarters of its lease after which an unrenewed job is stopped. The lease leaves
/// a renewal round a second of slack, so that a slow statement on a busy machine is not a
/// lost lease.
#[job(name = "regressions_pool_hog", lease = "3s", max_attempts = 3)]
async fn pool_hog(queue: Data<Queue>, n: u32) -> Result<(), JobError> {
    let _ = n;
    let mut conn = queue.pool().acquire().await?;
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
// 4. A saturated worker does not spin.
// ---------------------------------------------------------------------------------------

static BUSY_STARTED: Mailbox<u32> = Mailbox::new();

#[job(name = "regressions_busy_slot")]
async fn busy_slot(n: u32) {
    BUSY_STARTED.send(n);
    tokio::time::sleep(Duration::from_secs(5)).await;
}

/// CPU time (user + system) used so far by the calling thread.
fn thread_cpu_time() -> Duration {
    let stat = std::fs::read_to_string("/proc/thread-self/stat").expect("read /proc stat");
    ticks_to_time(cpu_ticks(&stat))
}

/// The CPU ticks (user + system) of a `/proc/.../stat` line.
fn cpu_ticks(stat: &str) -> u64 {
    // Fields 14 and 15 (utime, stime), counted after the command name in parentheses,
    // which may itself contain spaces.
    let fields: Vec<&str> = stat[stat.rfind(')').expect("a stat line") + 1..]
        .split_whitespace()
        .collect();
    fields[11].parse::<u64>().unwrap() + fields[12].parse::<u64>().unwrap()
}

fn ticks_to_time(ticks: u64) -> Duration {
    Duration::from_secs_f64(ticks as f64 / clock_ticks_per_second() as f64)
}

/// CPU ticks used so far by each thread of this process named `name`, by thread id.
fn named_threads_cpu_ticks(name: &str) -> std::collections::HashMap<String, u64> {
    let mut ticks = std::collections::HashMap::new();
    for task in std::fs::read_dir("/proc/self/task").expect("list /proc/self/task") {
        let dir = task.expect("a task").path();
        // A thread that ends meanwhile has no files left: it is simply not counted.
        let (Ok(comm), Ok(stat)) = (
            std::fs::read_to_string(dir.join("comm")),
            std::fs::read_to_string(dir.join("stat")),
        ) else {
            continue;
        };
        if comm.trim_end() == name {
            let tid = dir.file_name().unwrap().to_string_lossy().into_owned();
            ticks.insert(tid, cpu_ticks(&stat));
        }
    }
    ticks
}

/// The kernel's `USER_HZ`, in which /proc reports CPU times: from `getconf CLK_TCK`, else
/// 100 (its value on every mainstream Linux architecture).
fn clock_ticks_per_second() -> u64 {
    std::process::Command::new("getconf")
        .arg("CLK_TCK")
        .output()
        .ok()
        .and_then(|o| String::from_utf8(o.stdout).ok())
        .and_then(|s| s.trim().parse().ok())
        .filter(|&hz| hz > 0)
        .unwrap_or(100)
}

/// On a single-threaded runtime the worker's every task runs on the test's thread, so the
/// thread's CPU time is the worker's, whatever the other tests of this binary (threads of
/// the same process) are doing meanwhile; unlike wall time, it does not depend on the
/// machine's load either. The worker's lease thread, an OS thread of its own, is measured
/// too: with those of other tests' workers, which renew a few leases at most.
#[tokio::test(flavor = "current_thread")]
async fn a_saturated_worker_does_not_spin() {
    init_tracing();
    let queue = fresh_queue("regressions_busy").await;
    let mut started = BUSY_STARTED.open();
    queue
        .enqueue_many((0..4).map(|n| BusySlot { n }))
        .await
        .unwrap();
    let (handle, task) = start(
        Worker::builder(queue.clone())
            .concurrency(4)
            .build()
            .unwrap(),
    );
    for _ in 0..4 {
        receive(&mut started, "every slot busy", Duration::from_secs(10)).await;
    }

    // The measurement needs time to pass: 2 s with all four slots busy (the jobs run 5 s).
    let lease_before = named_threads_cpu_ticks("jobqueue-lease");
    assert!(!lease_before.is_empty(), "no lease thread found to measure");
    let cpu_before = thread_cpu_time();
    let wall_before = Instant::now();
    tokio::time::sleep(Duration::from_secs(2)).await;
    let cpu = thread_cpu_time() - cpu_before;
    let wall = wall_before.elapsed();
    let lease_cpu = ticks_to_time(
        named_threads_cpu_ticks("jobqueue-lease")
            .iter()
            .map(|(tid, after)| after.saturating_sub(lease_before.get(tid).copied().unwrap_or(0)))
            .sum(),
    );
    assert_eq!(
        handle.metrics().succeeded,
        0,
        "the slots stayed busy while measuring"
    );
    assert!(
        cpu < Duration::from_millis(300),
        "the worker used {cpu:?} of CPU in {wall:?} with every slot busy"
    );
    assert!(
        lease_cpu < Duration::from_millis(300),
        "the lease threads used {lease_cpu:?} of CPU in {wall:?} with every slot busy"
    );

    wait_for("the four jobs done", Duration::from_secs(10), || async {
        (handle.metrics().succeeded == 4).then_some(())
    })
    .await;
    stop(&handle, task).await;
    assert_eq!(handle.metrics().claimed, 4);
}

// ---------------------------------------------------------------------------------------
// 5. A bulk enqueue larger than `max_allowed_packet` succeeds.
// ---------------------------------------------------------------------------------------

#[job(name = "regressions_bulky")]
async fn bulky(n: u32, blob: String) {
    let _ = (n, blob);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bulk_enqueue_larger_than_max_allowed_packet_is_stored_whole() {
    init_tracing();
    let url = fresh_database("regressions_packet").await;
    let probe = Queue::connect(&url).await.unwrap();
    let packet: i64 = sqlx::query_scalar("SELECT CAST(@@max_allowed_packet AS SIGNED)")
        .fetch_one(probe.pool())
        .await
        .unwrap();
    let packet = usize::try_from(packet).unwrap();
    // 300 KiB per job at the usual 16 MiB (about 50 jobs per packet), and payloads adding up
    // to more than twice the packet whatever its size.
    let blob_len = (packet / 50).max(300 * 1024);
    let count = (2 * packet).div_ceil(blob_len) + 10;
    let queue = Queue::connect_with(
        &url,
        QueueConfig::default().max_payload_bytes(blob_len + 1024),
    )
    .await
    .unwrap();
    queue.migrate().await.unwrap();

    let blob = "x".repeat(blob_len);
    let outcomes = queue
        .enqueue_many((0..count as u32).map(|n| Bulky {
            n,
            blob: blob.clone(),
        }))
        .await
        .unwrap_or_else(|e| {
            panic!("enqueue of {count} jobs of {blob_len} bytes (packet {packet}) failed: {e}")
        });
    assert_eq!(outcomes.len(), count);
    assert!(outcomes.iter().all(|o| o.is_new()));

    let (rows, bytes): (i64, i64) = sqlx::query_as(
        "SELECT COUNT(*), CAST(SUM(LENGTH(payload)) AS SIGNED) FROM job_queue WHERE status = 'ready'",
    )
    .fetch_one(queue.pool())
    .await
    .unwrap();
    assert_eq!(rows, count as i64, "every job is stored");
    assert!(
        bytes as usize > 2 * packet,
        "{bytes} bytes of payload stored, packet {packet}"
    );
    for o in [outcomes[0], outcomes[count - 1]] {
        let r = row(&queue, o.id()).await;
        assert_eq!(r.payload["blob"].as_str().map(str::len), Some(blob_len));
    }
}

// ---------------------------------------------------------------------------------------
// 6. A bulk enqueue keeps the caller's order.
// ---------------------------------------------------------------------------------------

#[job(name = "regressions_ordered", key = "regressions_ordered:{label}")]
async fn ordered(label: String) {
    let _ = label;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bulk_enqueue_keeps_the_callers_order() {
    init_tracing();
    let queue = fresh_queue("regressions_order").await;
    // Keys in descending order, so that an insert in key order would reverse the batch;
    // 1100 jobs take several statements.
    let labels: Vec<String> = (0..1100).rev().map(|n| format!("{n:05}")).collect();
    let outcomes = queue
        .enqueue_many(labels.iter().map(|label| Ordered {
            label: label.clone(),
        }))
        .await
        .unwrap();
    assert!(outcomes.iter().all(|o| o.is_new()));
    let ids: Vec<u64> = outcomes.iter().map(|o| o.id()).collect();
    assert!(
        ids.windows(2).all(|w| w[0] < w[1]),
        "ids follow the input order: {:?}",
        &ids[..10]
    );

    let keys: Vec<String> =
        sqlx::query_scalar("SELECT CAST(task_key AS CHAR) FROM job_queue ORDER BY id")
            .fetch_all(queue.pool())
            .await
            .unwrap();
    let expected: Vec<String> = labels
        .iter()
        .map(|l| format!("regressions_ordered:{l}"))
        .collect();
    assert_eq!(
        keys, expected,
        "rows, and so claims, follow the input order"
    );
}

// ---------------------------------------------------------------------------------------
// 5. A job's last progress does not hold its outcome behind a pool the jobs exhaust.
// ---------------------------------------------------------------------------------------

static HOLDERS: Mailbox<u32> = Mailbox::new();
static HOLDERS_GO: tokio::sync::Semaphore = tokio::sync::Semaphore::const_new(0);
static REPORTER_GO: tokio::sync::Notify = tokio::sync::Notify::const_new();

/// Holds one connection of the queue's own pool until the test lets it go.
#[job(name = "regressions_pool_holder")]
async fn pool_holder(queue: Data<Queue>, n: u32) -> Result<(), JobError> {
    let _conn = queue.pool().acquire().await?;
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
