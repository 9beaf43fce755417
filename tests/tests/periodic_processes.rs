//! Periodic (cron) jobs across processes: three `test-worker` processes, each enqueuing the
//! ticks of the every-second `tick` kind, run for about five seconds; every tick in that
//! window becomes exactly one job and one side effect, with none missing. On every backend
//! (`mysql::...`, `postgres::...`): the processes connect to the URL of the test's database.
//!
//! The periodic kind lives in the `test-worker` binary only. This test binary includes its
//! job file for the `effects` table and the kind's name, and builds no `Worker` of its own,
//! so no periodic kind of this process schedules anything.

use std::process::Stdio;
use std::time::Duration;

use jobqueue::cron::tick_key;
use jobqueue::testing::TestDatabase;
use jobqueue::{Job, Queue};
use sqlx::types::chrono::NaiveDateTime;
use tests::{init_tracing, on_every_backend, sql_i64, wait_for, Arg, Backend};
use tokio::process::{Child, Command};

#[allow(dead_code)]
#[path = "../src/bin/test-worker/jobs.rs"]
mod worker_jobs;

use worker_jobs::{Tick, EFFECTS_TABLE, EFFECTS_TABLE_POSTGRES};

/// Starts a `test-worker` process serving the `default` queue, with periodic kinds on.
fn spawn_worker(url: &str) -> Child {
    Command::new(env!("CARGO_BIN_EXE_test-worker"))
        .args(["--database-url", url, "--queues", "default", "--periodic"])
        // The default maintenance interval (1 s), as in production: each pass enqueues
        // every tick since the process's previous pass.
        .args(["--maintenance-ms", "1000", "--poll-max-ms", "500"])
        .env("RUST_LOG", "warn")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("start test-worker")
}

/// Asks a worker process to shut down gracefully (SIGTERM) and returns its counters, the
/// JSON line it prints when it stops.
async fn stop_worker(child: Child) -> serde_json::Value {
    let pid = child.id().expect("running").to_string();
    let status = std::process::Command::new("kill")
        .args(["-TERM", &pid])
        .status()
        .expect("run kill");
    assert!(status.success(), "kill -TERM {pid}");
    let out = tokio::time::timeout(Duration::from_secs(20), child.wait_with_output())
        .await
        .expect("the worker stops after SIGTERM")
        .expect("wait for the worker");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "worker {pid} exited with {}: {stderr}",
        out.status
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    let last = stdout.lines().last().unwrap_or_default();
    serde_json::from_str(last)
        .unwrap_or_else(|e| panic!("worker {pid} printed no counters ({e}): {stdout:?} {stderr}"))
}

/// The tick jobs' rows: (task_key, run_at, status, attempts), by run_at.
async fn tick_rows(queue: &Queue) -> Vec<(String, NaiveDateTime, String, i64)> {
    match queue.backend() {
        Backend::Postgres => sqlx::query_as(
            "SELECT task_key::text, run_at, status::text, attempts FROM job_queue \
             WHERE kind = $1 ORDER BY run_at",
        )
        .bind(Tick::KIND)
        .fetch_all(queue.postgres_pool().unwrap())
        .await
        .expect("read tick rows"),
        _ => sqlx::query_as(
            "SELECT CAST(task_key AS CHAR), run_at, CAST(status AS CHAR), \
             CAST(attempts AS SIGNED) FROM job_queue WHERE kind = ? ORDER BY run_at",
        )
        .bind(Tick::KIND)
        .fetch_all(queue.mysql_pool().unwrap())
        .await
        .expect("read tick rows"),
    }
}

/// The effects: (task_key, count) per key, by key.
async fn effects_per_key(queue: &Queue) -> Vec<(String, i64)> {
    let mut effects: Vec<(String, i64)> = match queue.backend() {
        Backend::Postgres => {
            sqlx::query_as("SELECT task_key::text, COUNT(*) FROM effects GROUP BY task_key")
                .fetch_all(queue.postgres_pool().unwrap())
                .await
        }
        _ => {
            sqlx::query_as("SELECT CAST(task_key AS CHAR), COUNT(*) FROM effects GROUP BY task_key")
                .fetch_all(queue.mysql_pool().unwrap())
                .await
        }
    }
    .expect("read effects");
    effects.sort_unstable();
    effects
}

/// The effects per worker process: (pid, count), by pid.
async fn effects_per_process(queue: &Queue) -> Vec<(i64, i64)> {
    match queue.backend() {
        Backend::Postgres => {
            sqlx::query_as("SELECT pid::bigint, COUNT(*) FROM effects GROUP BY pid ORDER BY pid")
                .fetch_all(queue.postgres_pool().unwrap())
                .await
        }
        _ => {
            sqlx::query_as(
                "SELECT CAST(pid AS SIGNED), COUNT(*) FROM effects GROUP BY pid ORDER BY pid",
            )
            .fetch_all(queue.mysql_pool().unwrap())
            .await
        }
    }
    .expect("read effects per process")
}

async fn three_processes_run_each_tick_of_an_every_second_job_exactly_once(backend: Backend) {
    init_tracing();
    assert_eq!(Tick::OPTIONS.cron, Some("* * * * * *"));
    let db = TestDatabase::new_on(backend, "cron_ticks")
        .await
        .unwrap_or_else(|e| panic!("cannot create a {backend} test database: {e}"));
    let queue = db.queue().clone();
    let url = db.keep();
    let effects_table = match backend {
        Backend::Postgres => EFFECTS_TABLE_POSTGRES,
        _ => EFFECTS_TABLE,
    };
    match backend {
        Backend::Postgres => sqlx::raw_sql(effects_table)
            .execute(queue.postgres_pool().unwrap())
            .await
            .map(drop),
        _ => sqlx::raw_sql(effects_table)
            .execute(queue.mysql_pool().unwrap())
            .await
            .map(drop),
    }
    .expect("create effects");

    let workers: Vec<Child> = (0..3).map(|_| spawn_worker(&url)).collect();

    // Run until the ticks done span five seconds (six ticks), about five seconds after the
    // first one; the processes start within the first second or two.
    wait_for(
        "ticks spanning five seconds",
        Duration::from_secs(30),
        || async {
            let sql = match backend {
                Backend::Postgres => {
                    "SELECT COALESCE(CAST(EXTRACT(EPOCH FROM MAX(run_at) - MIN(run_at)) \
                     AS BIGINT), -1) FROM job_queue WHERE kind = ? AND status = 'done'"
                }
                _ => {
                    "SELECT COALESCE(TIMESTAMPDIFF(SECOND, MIN(run_at), MAX(run_at)), -1) \
                     FROM job_queue WHERE kind = ? AND status = 'done'"
                }
            };
            let span = sql_i64(&queue, sql, &[Arg::Text(Tick::KIND)]).await;
            (span >= 5).then_some(())
        },
    )
    .await;
    let mut counters = Vec::new();
    for w in workers {
        counters.push(stop_worker(w).await);
    }

    let rows = tick_rows(&queue).await;
    let done: Vec<_> = rows.iter().filter(|r| r.2 == "done").collect();
    assert!(done.len() >= 6, "{rows:?}");

    // One job per tick: each row's key is its tick's key (the unique index then allows no
    // second job of that tick), and the ticks are consecutive seconds from the first to
    // the last, none missing.
    for (key, run_at, _, _) in &rows {
        assert_eq!(key, &tick_key(Tick::KIND, run_at.and_utc()));
        assert_eq!(run_at.and_utc().timestamp_subsec_micros(), 0, "{key}");
    }
    for pair in rows.windows(2) {
        assert_eq!(
            (pair[1].1 - pair[0].1).num_milliseconds(),
            1000,
            "consecutive ticks: {} then {}",
            pair[0].0,
            pair[1].0
        );
    }
    // Every tick that was enqueued ran, once, except that ticks enqueued in the last
    // moment before the last process stopped may still wait (`ready`): graceful shutdown
    // stops claiming first. No tick waits behind a later one that ran.
    let last_done = rows.iter().rposition(|r| r.2 == "done").unwrap();
    for (i, (key, _, status, attempts)) in rows.iter().enumerate() {
        match status.as_str() {
            "done" => assert_eq!(*attempts, 1, "{key}"),
            "ready" => assert!(i > last_done, "tick {key} was skipped: {rows:?}"),
            other => panic!("tick {key} is {other}: {rows:?}"),
        }
    }

    // One effect per done tick, and no tick's effect twice.
    let effects = effects_per_key(&queue).await;
    let mut done_keys: Vec<&str> = done.iter().map(|r| r.0.as_str()).collect();
    done_keys.sort_unstable();
    let effect_keys: Vec<&str> = effects.iter().map(|e| e.0.as_str()).collect();
    assert_eq!(
        effect_keys, done_keys,
        "an effect for each done tick, no other"
    );
    assert!(
        effects.iter().all(|e| e.1 == 1),
        "a tick's effect twice: {effects:?}"
    );

    let sum = |field: &str| -> u64 { counters.iter().map(|c| c[field].as_u64().unwrap()).sum() };
    assert_eq!(sum("succeeded"), done.len() as u64, "{counters:?}");
    assert_eq!(sum("claimed"), done.len() as u64, "{counters:?}");
    let per_process = effects_per_process(&queue).await;
    let max_lag_us = match backend {
        Backend::Postgres => {
            "SELECT CAST(MAX(EXTRACT(EPOCH FROM (e.at - j.run_at)) * 1000000) AS BIGINT) \
             FROM effects e JOIN job_queue j ON j.task_key = e.task_key"
        }
        _ => {
            "SELECT MAX(TIMESTAMPDIFF(MICROSECOND, j.run_at, e.at)) \
             FROM effects e JOIN job_queue j ON j.task_key = e.task_key"
        }
    };
    let max_lag_ms = sql_i64(&queue, max_lag_us, &[]).await as f64 / 1e3;
    println!(
        "{} ticks from {} to {}; effects per process {per_process:?}; \
         latest start {max_lag_ms:.0} ms after its tick",
        rows.len(),
        rows[0].0,
        rows[rows.len() - 1].0
    );
}

on_every_backend!(three_processes_run_each_tick_of_an_every_second_job_exactly_once);
