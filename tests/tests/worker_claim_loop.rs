//! The worker's claim loop, its fast paths held to what they must still guarantee: a worker
//! with more than 256 slots fills them in one pass (a claim takes at most 256 jobs per
//! transaction); an idle worker finds a job that another process enqueued within its idle
//! probe's interval, and never claims for jobs of a paused queue; and a worker with every
//! slot busy does not spin (that test failed before its fix).
//!
//! Every test has its own database and its own job kinds (one registry serves the whole
//! binary). The wide and the saturated worker run on MySQL/MariaDB and on PostgreSQL
//! (`mysql::name`, `postgres::name`); the idle probe is MySQL's way of noticing jobs enqueued
//! elsewhere (a PostgreSQL worker listens instead, see `postgres_wake.rs`), so its tests, in
//! a section of their own, run on MySQL only. The fast path of bulk enqueue is in
//! `enqueue_bulk.rs`.

use std::sync::Arc;
use std::time::{Duration, Instant};

use jobqueue::{job, Data, JobError, JobStatus, Queue, Worker};
use tests::{
    count_status, fresh_database, fresh_queue_on, init_tracing, migrated_queue, on_every_backend,
    receive, row, start, stop, wait_for, wait_status, Backend, Mailbox,
};

/// Held by the 300-slot test and the saturated-worker test for their whole run: the latter
/// sums the CPU of every lease thread of this process, and the former's lease thread writes
/// the outcomes of 300 jobs, which would count against the worker being measured.
static LEASE_CPU_MEASURED: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

// ---------------------------------------------------------------------------------------
// More than 256 slots.
// ---------------------------------------------------------------------------------------

/// Holds every job until `parties` jobs run at once.
#[derive(Clone)]
struct Gate(Arc<tokio::sync::Barrier>);

#[job(name = "fast_wide", queue = "fast_wide")]
async fn wide(n: u32, gate: Data<Gate>) -> Result<(), JobError> {
    let _ = n;
    let Gate(barrier) = &*gate;
    barrier.wait().await;
    Ok(())
}

/// 300 jobs that can only finish together need all 300 slots at once. The worker polls
/// only every 120 s, so a worker that claimed 256 and waited for its next poll would not
/// finish them within the test's bound.
async fn a_worker_with_300_slots_fills_them_all_in_one_pass(backend: Backend) {
    let _measured = LEASE_CPU_MEASURED.lock().await;
    let queue = fresh_queue_on(backend, "fast_wide").await;
    let out = queue
        .enqueue_many((0..300).map(|n| Wide { n }))
        .await
        .expect("enqueue");
    assert_eq!(out.iter().filter(|e| e.is_new()).count(), 300);
    let (handle, task) = start(
        Worker::builder(queue.clone())
            .queues(["fast_wide"])
            .concurrency(300)
            .poll_interval(Duration::from_secs(120), Duration::from_secs(120))
            .idle_probe(None)
            .data(Gate(Arc::new(tokio::sync::Barrier::new(300))))
            .build()
            .expect("build"),
    );
    // Far below the next poll (96 s at the earliest), with room for a busy machine, where
    // writing 300 outcomes has taken over 20 s.
    wait_for("300 jobs done", Duration::from_secs(60), || async {
        (count_status(&queue, JobStatus::Done).await == 300).then_some(())
    })
    .await;
    // Read after the stop: the writer counts an outcome once its commit has returned, so a
    // row can read `done` a moment before its success is counted.
    stop(&handle, task).await;
    let metrics = handle.metrics();
    assert_eq!(metrics.claimed, 300, "each job claimed once");
    assert_eq!(metrics.succeeded, 300);
}

// ---------------------------------------------------------------------------------------
// A saturated worker does not spin.
// ---------------------------------------------------------------------------------------

/// One mailbox per backend (a job's `run`): a test's two runs may overlap.
static BUSY_STARTED: [Mailbox<u32>; 2] = [Mailbox::new(), Mailbox::new()];

#[job(name = "regressions_busy_slot")]
async fn busy_slot(run: u32, n: u32) {
    BUSY_STARTED[run as usize].send(n);
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
/// too: with those of other tests' workers, which renew a few leases at most (the one test
/// whose worker writes hundreds of outcomes never runs at the same time).
async fn a_saturated_worker_does_not_spin(backend: Backend) {
    let _measured = LEASE_CPU_MEASURED.lock().await;
    init_tracing();
    let queue = fresh_queue_on(backend, "regressions_busy").await;
    let run = match backend {
        Backend::Postgres => 1,
        _ => 0,
    };
    let mut started = BUSY_STARTED[run as usize].open();
    queue
        .enqueue_many((0..4).map(|n| BusySlot { run, n }))
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
    // A thread takes its name once it first runs, which a loaded machine can put off past
    // the jobs' start: wait for the worker's lease thread to be seen.
    let lease_before = wait_for(
        "a lease thread to measure",
        Duration::from_secs(10),
        || async {
            let ticks = named_threads_cpu_ticks("jobqueue-lease");
            (!ticks.is_empty()).then_some(ticks)
        },
    )
    .await;
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
// The idle probe's setting is checked on every backend.
// ---------------------------------------------------------------------------------------

async fn the_idle_probe_interval_is_checked(backend: Backend) {
    let queue = fresh_queue_on(backend, "fast_idle_setting").await;
    let err = Worker::builder(queue)
        .queues(["fast_idle"])
        .idle_probe(Some(Duration::from_millis(2)))
        .build()
        .expect_err("2 ms is too short");
    let message = err.to_string();
    assert!(
        message.contains("idle probe") && message.contains("at least 10 ms"),
        "{message}"
    );
}

on_every_backend!(
    a_worker_with_300_slots_fills_them_all_in_one_pass,
    the_idle_probe_interval_is_checked;
    current_thread: a_saturated_worker_does_not_spin,
);

// =======================================================================================
// MySQL only: the idle probe, MySQL's way of noticing jobs enqueued elsewhere (a PostgreSQL
// worker listens for them instead).
// =======================================================================================

// ---------------------------------------------------------------------------------------
// The idle probe.
// ---------------------------------------------------------------------------------------

#[job(name = "fast_idle", queue = "fast_idle")]
async fn idle_job(n: u32) -> Result<(), JobError> {
    let _ = n;
    Ok(())
}

/// An idle worker that polls with claims only every 10 s starts a job that another
/// process's `Queue` enqueued (no in-process wake-up) within its probe's interval, and
/// claims nothing while its probes see only a ready job in a paused queue.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_worker_finds_a_job_from_elsewhere_at_its_probe_and_skips_paused_queues() {
    let url = fresh_database("fast_idle").await;
    let queue = migrated_queue(&url).await;
    let (handle, task) = start(
        Worker::builder(queue.clone())
            .queues(["fast_idle"])
            .poll_interval(Duration::from_secs(10), Duration::from_secs(10))
            .idle_probe(Some(Duration::from_millis(20)))
            .maintenance(false)
            .build()
            .expect("build"),
    );
    wait_for("the first empty claim", Duration::from_secs(10), || async {
        (handle.metrics().empty_idle >= 1).then_some(())
    })
    .await;
    // Another process: a queue of its own, whose enqueues wake nobody here.
    let elsewhere = Queue::connect(&url).await.expect("second queue");
    let id = elsewhere
        .enqueue(IdleJob { n: 1 })
        .await
        .expect("enqueue")
        .id();
    let done = wait_status(&queue, id, JobStatus::Done, Duration::from_secs(5)).await;
    assert_eq!(done.attempts, 1);

    // Paused: the probe must not see the ready job, so no claim is made for it.
    elsewhere.pause("fast_idle").await.expect("pause");
    let paused = elsewhere
        .enqueue(IdleJob { n: 2 })
        .await
        .expect("enqueue")
        .id();
    let claims = |m: jobqueue::metrics::MetricsSnapshot| m.claimed + m.empty_idle + m.empty_paused;
    let before = handle.metrics();
    // Thirty probes look at the paused queue's ready job: none may lead to a claim.
    wait_for(
        "thirty probes of the paused queue",
        Duration::from_secs(10),
        || async { (handle.metrics().idle_probes >= before.idle_probes + 30).then_some(()) },
    )
    .await;
    let made = claims(handle.metrics()) - claims(before);
    assert!(
        made <= 1,
        "claims while the only ready job was paused: {made}"
    );
    assert_eq!(row(&queue, paused).await.status, JobStatus::Ready);
    elsewhere.resume("fast_idle").await.expect("resume");
    wait_status(&queue, paused, JobStatus::Done, Duration::from_secs(5)).await;
    stop(&handle, task).await;
}

/// The server closes every connection of an idle worker (a `wait_timeout` reached while it
/// was busy, a restart). The probe's kept connection fails once; the probe goes on at once on
/// a new one instead of switching off for its cool-down, and a job enqueued elsewhere still
/// starts within the probe's interval, not at the next 10 s poll.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_probe_whose_connection_was_closed_goes_on_on_a_new_one() {
    let url = fresh_database("fast_idle_closed").await;
    let queue = migrated_queue(&url).await;
    let (handle, task) = start(
        Worker::builder(queue.clone())
            .queues(["fast_idle"])
            .poll_interval(Duration::from_secs(10), Duration::from_secs(10))
            .idle_probe(Some(Duration::from_millis(20)))
            .maintenance(false)
            .build()
            .expect("build"),
    );
    wait_for("five probes", Duration::from_secs(10), || async {
        (handle.metrics().idle_probes >= 5).then_some(())
    })
    .await;
    let outside = sqlx::MySqlPool::connect(&url).await.expect("connect");
    let others: Vec<i64> = sqlx::query_scalar(
        "SELECT ID FROM information_schema.PROCESSLIST \
         WHERE DB = DATABASE() AND ID <> CONNECTION_ID()",
    )
    .fetch_all(&outside)
    .await
    .expect("list sessions");
    assert!(!others.is_empty());
    // The sessions die one KILL at a time, not at once as in a restart: an idle connection
    // of the worker's pool not yet killed could replace the probe's and then be killed
    // under it, a second failure in a row that a restart would not cause. So the pool's
    // idle connections are held, out of the probe's reach, until every KILL is done.
    let pool = queue.mysql_pool().expect("a MySQL queue");
    let mut held = Vec::new();
    for id in others {
        held.extend(std::iter::from_fn(|| pool.try_acquire()));
        // A session may end by itself meanwhile.
        let _ = sqlx::query(&format!("KILL {id}")).execute(&outside).await;
    }
    drop(held);
    let before = handle.metrics().idle_probes;
    wait_for(
        "five probes after the connections were closed",
        Duration::from_secs(5),
        || async { (handle.metrics().idle_probes >= before + 5).then_some(()) },
    )
    .await;
    let elsewhere = Queue::connect(&url).await.expect("second queue");
    let id = elsewhere
        .enqueue(IdleJob { n: 3 })
        .await
        .expect("enqueue")
        .id();
    let done = wait_status(&queue, id, JobStatus::Done, Duration::from_secs(5)).await;
    assert_eq!(done.attempts, 1);
    stop(&handle, task).await;
}
