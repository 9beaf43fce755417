//! Several workers on one database, as a fleet of processes would be: one maintenance pass at
//! a time (the maintenance turn, `job_queue_turn`), handed on when its holder stops or stops
//! renewing; idle probes taken in turns, so that a group of idle workers probes about as
//! often as one; at most 4 connections held by a worker at full drain; and a job enqueued
//! through another `Queue` (no in-process wake-up) started promptly while several idle.
//!
//! Every worker here has a `Queue` of its own, as a worker in another process would. The
//! turn and prompt-start tests run on both databases; the probe and connection-count tests
//! are MySQL's (PostgreSQL's idle workers wait on `LISTEN`: see `postgres_wake.rs`, which
//! also counts a PostgreSQL worker's sessions).

use std::time::{Duration, Instant};

use jobqueue::{job, EnqueueOptions, JobError, JobStatus, Queue, Worker, WorkerHandle};
use sqlx::{Connection as _, MySqlConnection, Row as _};
use tests::{
    count_status, database_url, fresh_queue, fresh_queue_on, on_every_backend, plain_database_url,
    receive, sql_exec, sql_text, start, stop, text_col, wait_for, Arg, Backend, Mailbox,
    WorkerTask,
};

/// The maintenance interval of these tests' workers. The turn stays with its holder for 5
/// intervals without a renewal: 1.5 s, longer than a pass stalls on a loaded 2-core
/// machine, so that a holder that is alive never loses it here.
const INTERVAL: Duration = Duration::from_millis(300);

#[job(name = "fleet_turn_noop", queue = "fleet_turn")]
async fn turn_noop(n: u32) -> Result<(), JobError> {
    let _ = n;
    Ok(())
}

#[job(name = "fleet_probe_noop", queue = "fleet_probe")]
async fn probe_noop(n: u32) -> Result<(), JobError> {
    let _ = n;
    Ok(())
}

#[job(name = "fleet_drain_sleep", queue = "fleet_drain")]
async fn drain_sleep(n: u32) -> Result<(), JobError> {
    let _ = n;
    tokio::time::sleep(Duration::from_millis(20)).await;
    Ok(())
}

static STARTED: Mailbox<(u32, Instant)> = Mailbox::new();

#[job(name = "fleet_started", queue = "fleet_latency")]
async fn started(n: u32) -> Result<(), JobError> {
    STARTED.send((n, Instant::now()));
    Ok(())
}

/// A worker on a `Queue` of its own (default settings) over the database at `url`.
async fn own_worker(
    url: &str,
    owner: &str,
    queue: &str,
    build: impl FnOnce(jobqueue::WorkerBuilder) -> jobqueue::WorkerBuilder,
) -> (WorkerHandle, WorkerTask) {
    let q = Queue::connect(url).await.expect("connect");
    start(
        build(
            Worker::builder(q)
                .owner(owner)
                .queues([queue])
                .maintenance_interval(INTERVAL),
        )
        .build()
        .expect("build"),
    )
}

/// The holder of the maintenance turn, whether it is still unexpired, and when it was taken
/// (as text: compared, not parsed).
async fn turn(queue: &Queue) -> (Option<String>, bool, String) {
    if let Some(pool) = queue.postgres_pool() {
        let (holder, live, taken): (Option<String>, bool, Option<String>) = sqlx::query_as(
            "SELECT holder, expires_at > job_queue_now(), taken_at::text \
             FROM job_queue_turn WHERE name = 'maintenance'",
        )
        .fetch_one(pool)
        .await
        .expect("the turn's row");
        return (holder, live, taken.unwrap_or_default());
    }
    let row = sqlx::query(
        "SELECT holder, expires_at > UTC_TIMESTAMP(6) AS live, CAST(taken_at AS CHAR) AS taken \
         FROM job_queue_turn WHERE name = 'maintenance'",
    )
    .fetch_one(queue.mysql_pool().unwrap())
    .await
    .expect("the turn's row");
    let live: i64 = row.try_get("live").expect("live");
    (
        text_col(&row, "holder"),
        live == 1,
        text_col(&row, "taken").unwrap_or_default(),
    )
}

async fn one_worker_holds_the_maintenance_turn_and_another_takes_it_when_it_stops(
    backend: Backend,
) {
    let queue = fresh_queue_on(backend, "fleet_turn").await;
    let url = plain_database_url(&queue).await;
    let a = own_worker(&url, "turn-a", "fleet_turn", |b| b).await;
    let b = own_worker(&url, "turn-b", "fleet_turn", |b| b).await;

    let (holder, taken_at) = wait_for("a worker to take the turn", Duration::from_secs(10), || {
        let queue = queue.clone();
        async move {
            match turn(&queue).await {
                (Some(h), true, taken) => Some((h, taken)),
                _ => None,
            }
        }
    })
    .await;
    // For ten intervals the turn stays with its holder, renewed (never expired) and never
    // taken again: one worker passes, the other only tries.
    let watch = Instant::now();
    while watch.elapsed() < INTERVAL * 10 {
        let (h, live, taken) = turn(&queue).await;
        assert_eq!(h.as_deref(), Some(holder.as_str()), "the turn moved");
        assert!(live, "the holder let the turn expire");
        assert_eq!(taken, taken_at, "the turn was taken again");
        tokio::time::sleep(INTERVAL / 4).await;
    }
    // `Queue::workers` names the holder, and only it.
    let holders: Vec<String> = queue
        .workers()
        .await
        .expect("workers")
        .into_iter()
        .filter(|w| w.maintains)
        .map(|w| w.owner)
        .collect();
    assert_eq!(
        holders,
        std::slice::from_ref(&holder),
        "the workers listing shows the holder"
    );
    // The holder's passes promote what is due.
    let due = queue
        .enqueue_with(TurnNoop { n: 1 }, EnqueueOptions::default().delay(INTERVAL))
        .await
        .expect("enqueue");
    assert!(due.is_new());
    wait_for("the scheduled job to run", Duration::from_secs(10), || {
        let queue = queue.clone();
        async move { (count_status(&queue, JobStatus::Done).await == 1).then_some(()) }
    })
    .await;

    // The holder stops: it gives the turn up, and the other takes it at its next try
    // (every interval × 2 live workers, ±20 %).
    let (stopped, other) = if holder == "turn-a" {
        (a, ("turn-b", b))
    } else {
        (b, ("turn-a", a))
    };
    let stopping = Instant::now();
    stop(&stopped.0, stopped.1).await;
    wait_for(
        "the other worker to take the turn",
        Duration::from_secs(10),
        || {
            let queue = queue.clone();
            async move {
                let (h, live, _) = turn(&queue).await;
                (h.as_deref() == Some(other.0) && live).then_some(())
            }
        },
    )
    .await;
    // The documented bound for a released turn, with room for a loaded machine.
    assert!(
        stopping.elapsed() < Duration::from_secs(5),
        "took {:?}",
        stopping.elapsed()
    );
    stop(&other.1 .0, other.1 .1).await;
    let (h, _, _) = turn(&queue).await;
    assert_eq!(h, None, "a worker that stops gives the turn up");
}

async fn a_holder_that_stops_renewing_loses_the_turn_once_it_expires(backend: Backend) {
    let queue = fresh_queue_on(backend, "fleet_frozen").await;
    let url = plain_database_url(&queue).await;
    // A holder that froze: it took the turn, and will not renew it.
    let freeze = match backend {
        Backend::Postgres => {
            "UPDATE job_queue_turn SET holder = 'frozen:1:x', taken_at = job_queue_now(), \
             expires_at = job_queue_now() + INTERVAL '1.5 seconds' WHERE name = 'maintenance'"
        }
        _ => {
            "UPDATE job_queue_turn SET holder = 'frozen:1:x', taken_at = UTC_TIMESTAMP(6), \
             expires_at = UTC_TIMESTAMP(6) + INTERVAL 1500000 MICROSECOND \
             WHERE name = 'maintenance'"
        }
    };
    assert_eq!(sql_exec(&queue, freeze, &[]).await, 1, "freeze a holder");
    let due = queue
        .enqueue_with(TurnNoop { n: 2 }, EnqueueOptions::default().delay(INTERVAL))
        .await
        .expect("enqueue")
        .id();
    let w = own_worker(&url, "thaw", "fleet_turn", |b| b).await;
    // Until the frozen turn expires the worker passes not, so the due job stays scheduled;
    // then it takes the turn within 5 intervals plus 1.2 × interval × its fleet of one.
    let mut checks = 0;
    wait_for(
        "the worker to take the expired turn",
        Duration::from_secs(15),
        || {
            let queue = queue.clone();
            checks += 1;
            async move {
                // Both in one read: "holder|status".
                let both = sql_text(
                    &queue,
                    "SELECT CONCAT(COALESCE(t.holder, ''), '|', j.status) \
                     FROM job_queue_turn t JOIN job_queue j ON j.id = ? \
                     WHERE t.name = 'maintenance'",
                    &[Arg::Int(due as i64)],
                )
                .await
                .expect("read the turn and the job");
                let (holder, status) = both.split_once('|').expect("holder|status");
                if holder == "frozen:1:x" {
                    assert_eq!(
                        status, "scheduled",
                        "a pass ran while another worker held the turn"
                    );
                    return None;
                }
                (holder == "thaw").then_some(())
            }
        },
    )
    .await;
    assert!(checks > 1, "the frozen turn was watched before it expired");
    wait_for("the due job to run", Duration::from_secs(10), || {
        let queue = queue.clone();
        async move { (count_status(&queue, JobStatus::Done).await == 1).then_some(()) }
    })
    .await;
    stop(&w.0, w.1).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_group_of_idle_workers_probes_about_as_often_as_one() {
    let queue = fresh_queue("fleet_probe").await;
    let url = database_url(queue.mysql_pool().unwrap()).await;
    let mut workers = Vec::new();
    for i in 0..4 {
        workers.push(
            own_worker(&url, &format!("probe-{i}"), "fleet_probe", |b| {
                b.concurrency(2)
            })
            .await,
        );
    }
    // Default `idle_probe`: 60 ms for the group, about 17 a second; four workers each on its
    // own clock would make 67. The rotation settles once every worker has read the others'
    // heartbeats (its second beat, 2 s after its first).
    let every = Duration::from_millis(60);
    let limit = 1.5 / every.as_secs_f64();
    let probes = |ws: &[(WorkerHandle, WorkerTask)]| -> Vec<u64> {
        ws.iter().map(|(h, _)| h.metrics().idle_probes).collect()
    };
    let mut last_rate = f64::MAX;
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let before = probes(&workers);
        let began = Instant::now();
        // The observation window: a rate needs time to pass.
        tokio::time::sleep(Duration::from_millis(1500)).await;
        let after = probes(&workers);
        let secs = began.elapsed().as_secs_f64();
        let each: Vec<u64> = after.iter().zip(&before).map(|(a, b)| a - b).collect();
        let rate = each.iter().sum::<u64>() as f64 / secs;
        last_rate = last_rate.min(rate);
        if rate <= limit {
            // Every worker still probes in its slots.
            assert!(
                each.iter().all(|&n| n > 0),
                "a worker stopped probing: {each:?}"
            );
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the group probes {last_rate:.1}/s at best, over {limit:.1}/s: {each:?}"
        );
    }
    // A job enqueued by another queue meanwhile is found by the group.
    queue.enqueue(ProbeNoop { n: 1 }).await.expect("enqueue");
    wait_for("the job to run", Duration::from_secs(10), || {
        let queue = queue.clone();
        async move { (count_status(&queue, JobStatus::Done).await == 1).then_some(()) }
    })
    .await;
    for (h, t) in workers {
        stop(&h, t).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_at_full_drain_holds_at_most_four_connections() {
    let queue = fresh_queue("fleet_drain").await;
    let url = database_url(queue.mysql_pool().unwrap()).await;
    const JOBS: u32 = 640;
    queue
        .enqueue_many((0..JOBS).map(|n| DrainSleep { n }))
        .await
        .expect("enqueue");
    queue.mysql_pool().unwrap().close().await;
    let mut watcher = MySqlConnection::connect(&url).await.expect("connect");
    let count_sql = "SELECT COUNT(*) FROM information_schema.PROCESSLIST \
                     WHERE DB = DATABASE() AND ID <> CONNECTION_ID()";
    let w = own_worker(&url, "drainer", "fleet_drain", |b| b.concurrency(64)).await;
    let mut most = 0i64;
    let mut busy_seen = false;
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let held: i64 = sqlx::query_scalar(count_sql)
            .fetch_one(&mut watcher)
            .await
            .expect("count connections");
        most = most.max(held);
        let (done, running): (i64, i64) = {
            let r = sqlx::query(
                "SELECT CAST(SUM(status = 'done') AS SIGNED), CAST(SUM(status = 'running') AS SIGNED) \
                 FROM job_queue",
            )
            .fetch_one(&mut watcher)
            .await
            .expect("count jobs");
            (
                r.get::<Option<i64>, _>(0).unwrap_or(0),
                r.get::<Option<i64>, _>(1).unwrap_or(0),
            )
        };
        busy_seen |= running >= 64;
        if done == i64::from(JOBS) {
            break;
        }
        assert!(Instant::now() < deadline, "{done} of {JOBS} done in 60 s");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    assert!(busy_seen, "every slot was busy at some point");
    assert!(most <= 4, "the worker held {most} connections");
    stop(&w.0, w.1).await;
}

async fn a_job_enqueued_by_another_queue_starts_promptly_while_several_workers_idle(
    backend: Backend,
) {
    let producer = fresh_queue_on(backend, "fleet_latency").await;
    let url = plain_database_url(&producer).await;
    let mut started = STARTED.open();
    let mut workers = Vec::new();
    for i in 0..3 {
        workers.push(own_worker(&url, &format!("idle-{i}"), "fleet_latency", |b| b).await);
    }
    wait_for("every worker to go idle", Duration::from_secs(10), || {
        let idle = workers.iter().all(|(h, _)| h.metrics().empty_idle > 0);
        async move { idle.then_some(()) }
    })
    .await;
    let mut slowest = Duration::ZERO;
    for n in 0..10 {
        let sent = Instant::now();
        producer.enqueue(Started { n }).await.expect("enqueue");
        let (got, at) = receive(&mut started, "the job to start", Duration::from_secs(10)).await;
        assert_eq!(got, n);
        slowest = slowest.max(at - sent);
    }
    // On MySQL the group probes every 60 ms; on PostgreSQL the commit notifies the workers'
    // listeners. A second leaves room for a loaded machine, and is half of what polling
    // with backed-off claims (up to 2 s) would take.
    assert!(
        slowest < Duration::from_secs(1),
        "slowest start {slowest:?}"
    );
    for (h, t) in workers {
        stop(&h, t).await;
    }
}

on_every_backend!(
    one_worker_holds_the_maintenance_turn_and_another_takes_it_when_it_stops,
    a_holder_that_stops_renewing_loses_the_turn_once_it_expires,
    a_job_enqueued_by_another_queue_starts_promptly_while_several_workers_idle,
);
