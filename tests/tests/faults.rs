//! The acceptance and fault suite: real worker processes (`test-worker`) against a real
//! server, and the faults a deployment meets: a row locked by someone else's transaction, an
//! idle queue and a privilege revoked under a running worker, a worker killed with SIGKILL,
//! the same message delivered many times, a worker paused past its lease, the database
//! restarted under load, ten thousand jobs over four processes, and input that is wrong.
//!
//! The crash, duplicate, pause, restart, scale and periodic tests run on both databases
//! (`mysql::` and `postgres::`); the locked-row, privilege and bad-input tests read MySQL's
//! lock counters, grants or raw SQL and stay MySQL-only.
//!
//! Each test has a database of its own on the shared test server, except the restart test,
//! which starts a private server so that stopping it disturbs no one. Jobs record their side
//! effects in an `effects` table (see `test-worker/jobs.rs`), which has no unique index, so
//! a side effect that happened twice is two rows: "exactly once" is counted where a user
//! would count it. Workers log JSON lines to standard error; the tests read them to assert
//! what was logged, and read the counters each worker prints when it stops.
//!
//! Figures a reader wants (recovery time after a crash, re-runs after a restart, conflict
//! retries at scale) are printed: run with `--nocapture` to see them.
//!
//! ```text
//! cargo test -p tests --test faults -- --nocapture
//! ```

use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use jobqueue::admin::JobFilter;
use jobqueue::testing::{TestDatabase, TestServer};
use jobqueue::{Backend, EnqueueOptions, Enqueued, Error, JobStatus, Queue};
use serde_json::Value;
use sqlx::mysql::MySqlPool;
use sqlx::types::chrono::NaiveDateTime;
use sqlx::{Connection as _, MySqlConnection};
use tests::{
    count_status, migrated_queue, on_every_backend, row, sql_exec, sql_i64, wait_for, wait_status,
};
use tokio::io::{AsyncBufReadExt as _, AsyncWriteExt as _, BufReader};
use tokio::process::{Child, ChildStdin, Command};
use tokio::task::JoinHandle;

#[allow(dead_code)] // the suite enqueues these kinds; only the worker processes run them
#[path = "../src/bin/test-worker/jobs.rs"]
mod jobs;

use jobs::{Effect, Slow};

/// The worker binary of this package.
const WORKER_BIN: &str = env!("CARGO_BIN_EXE_test-worker");

// ---------------------------------------------------------------------------------------
// Databases and the effects table
// ---------------------------------------------------------------------------------------

/// A migrated queue on `url`, with the `effects` table the jobs write to.
async fn prepare(url: &str) -> Queue {
    let queue = migrated_queue(url).await;
    let table = match queue.backend() {
        Backend::Postgres => jobs::EFFECTS_TABLE_POSTGRES,
        _ => jobs::EFFECTS_TABLE,
    };
    sql_exec(&queue, table, &[]).await;
    queue
}

/// A new database on the shared server of `backend`, prepared; returns its URL and queue.
async fn setup(backend: Backend, prefix: &str) -> (String, Queue) {
    let url = TestDatabase::empty_on(backend, prefix)
        .await
        .unwrap_or_else(|e| panic!("cannot create a {backend} test database: {e}"))
        .keep();
    let queue = prepare(&url).await;
    (url, queue)
}

fn effect(name: impl Into<String>, sleep_ms: u64) -> Effect {
    Effect {
        name: name.into(),
        sleep_ms,
        fail_first: 0,
    }
}

/// One row of `effects`.
#[derive(Debug, Clone)]
struct EffectRow {
    task_key: String,
    job_id: u64,
    attempt: u32,
    pid: u32,
    phase: String,
    at: NaiveDateTime,
}

async fn effect_rows(queue: &Queue) -> Vec<EffectRow> {
    const SQL: &str = "SELECT task_key, job_id, attempt, pid, phase, at FROM effects ORDER BY seq";
    if let Some(pool) = queue.postgres_pool() {
        let rows: Vec<(String, i64, i32, i32, String, NaiveDateTime)> = sqlx::query_as(SQL)
            .fetch_all(pool)
            .await
            .expect("read effects");
        return rows
            .into_iter()
            .map(|(task_key, job_id, attempt, pid, phase, at)| EffectRow {
                task_key,
                job_id: job_id as u64,
                attempt: attempt as u32,
                pid: pid as u32,
                phase,
                at,
            })
            .collect();
    }
    let rows: Vec<(Vec<u8>, u64, u32, u32, String, NaiveDateTime)> = sqlx::query_as(SQL)
        .fetch_all(queue.mysql_pool().expect("a MySQL queue"))
        .await
        .expect("read effects");
    rows.into_iter()
        .map(|(key, job_id, attempt, pid, phase, at)| EffectRow {
            // A binary collation makes the driver see VARBINARY: decode the bytes.
            task_key: String::from_utf8(key).expect("keys are UTF-8"),
            job_id,
            attempt,
            pid,
            phase,
            at,
        })
        .collect()
}

/// How many `done` effects there are (each job records exactly one when it succeeds).
async fn done_effects(queue: &Queue) -> i64 {
    sql_i64(
        queue,
        "SELECT COUNT(*) FROM effects WHERE phase = 'done'",
        &[],
    )
    .await
}

/// The database's clock, the one the effects are stamped with.
async fn db_now(queue: &Queue) -> NaiveDateTime {
    match queue.backend() {
        Backend::Postgres => {
            sqlx::query_scalar("SELECT job_queue_now()")
                .fetch_one(queue.postgres_pool().expect("a PostgreSQL queue"))
                .await
        }
        _ => {
            sqlx::query_scalar("SELECT UTC_TIMESTAMP(6)")
                .fetch_one(queue.mysql_pool().expect("a MySQL queue"))
                .await
        }
    }
    .expect("read the database clock")
}

/// `later - earlier`, in seconds.
fn seconds_between(later: NaiveDateTime, earlier: NaiveDateTime) -> f64 {
    (later - earlier)
        .num_microseconds()
        .expect("a short interval") as f64
        / 1e6
}

// ---------------------------------------------------------------------------------------
// Worker processes
// ---------------------------------------------------------------------------------------

/// A `test-worker` process, with what it printed so far. Killed if dropped while running;
/// a test that fails prints the last lines each of its processes logged.
struct Proc {
    name: String,
    child: Child,
    pid: u32,
    stdin: Option<ChildStdin>,
    stdout: Arc<Mutex<Vec<String>>>,
    stderr: Arc<Mutex<Vec<String>>>,
    readers: Vec<JoinHandle<()>>,
}

/// Flags every worker of this suite gets unless a test overrides them: quick polling and
/// maintenance, so that the tests wait on the database rather than on timers.
const QUICK: &[&str] = &[
    "--poll-min-ms",
    "20",
    "--poll-max-ms",
    "200",
    "--maintenance-ms",
    "250",
];

impl Proc {
    /// Starts `test-worker` with `args` (after `--database-url url`).
    fn spawn(name: &str, url: &str, args: &[&str], log_filter: &str) -> Proc {
        let mut command = Command::new(WORKER_BIN);
        command
            .arg("--database-url")
            .arg(url)
            .args(args)
            .env("RUST_LOG", log_filter)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        let mut child = command
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {WORKER_BIN}: {e}"));
        let pid = child.id().expect("a running child has a pid");
        let stdout = Arc::new(Mutex::new(Vec::new()));
        let stderr = Arc::new(Mutex::new(Vec::new()));
        let readers = vec![
            collect_lines(child.stdout.take().expect("piped"), stdout.clone()),
            collect_lines(child.stderr.take().expect("piped"), stderr.clone()),
        ];
        Proc {
            name: name.to_owned(),
            stdin: child.stdin.take(),
            child,
            pid,
            stdout,
            stderr,
            readers,
        }
    }

    /// A worker with the [`QUICK`] settings followed by `args` (later flags win).
    fn worker(name: &str, url: &str, args: &[&str]) -> Proc {
        let all: Vec<&str> = QUICK.iter().chain(args).copied().collect();
        Proc::spawn(name, url, &all, "info")
    }

    /// Log records (one JSON object per line of standard error).
    fn logs(&self) -> Vec<Value> {
        self.stderr
            .lock()
            .unwrap()
            .iter()
            .filter_map(|l| serde_json::from_str(l).ok())
            .collect()
    }

    /// Log records at WARN or ERROR, except the driver's reports that a statement or a pool
    /// acquire was slow: a loaded machine produces those, and they say nothing of a fault.
    fn warnings(&self) -> Vec<Value> {
        self.logs()
            .into_iter()
            .filter(|r| matches!(level(r), "WARN" | "ERROR") && !reports_slowness(r))
            .collect()
    }

    fn stdout_lines(&self) -> Vec<String> {
        self.stdout.lock().unwrap().clone()
    }

    /// Waits until the process has logged a record matching `pred`, and returns it.
    async fn wait_log(
        &self,
        what: &str,
        timeout: Duration,
        pred: impl Fn(&Value) -> bool,
    ) -> Value {
        wait_for(&format!("{} to log {what}", self.name), timeout, || async {
            self.logs().into_iter().find(|r| pred(r))
        })
        .await
    }

    /// Waits until the worker has started (logged "worker starting").
    async fn started(&self) {
        self.wait_log("that it started", Duration::from_secs(30), |r| {
            message(r) == "worker starting"
        })
        .await;
    }

    /// Sends a signal with `kill`, e.g. `"STOP"`, `"CONT"`, `"TERM"`.
    fn signal(&self, signal: &str) {
        let status = std::process::Command::new("kill")
            .arg(format!("-{signal}"))
            .arg(self.pid.to_string())
            .status()
            .expect("run kill");
        assert!(status.success(), "kill -{signal} {} failed", self.pid);
    }

    /// SIGKILL, and waits until the process is gone.
    async fn kill(&mut self) {
        self.child.start_kill().expect("send SIGKILL");
        self.child.wait().await.expect("wait for the killed worker");
    }

    /// Waits for the process to exit by itself; returns whether it succeeded.
    async fn exit(&mut self, timeout: Duration) -> bool {
        let status = tokio::time::timeout(timeout, self.child.wait())
            .await
            .unwrap_or_else(|_| panic!("{} did not exit within {timeout:?}", self.name))
            .expect("wait for the process");
        for reader in self.readers.drain(..) {
            let _ = reader.await;
        }
        status.success()
    }

    /// SIGTERM (a graceful shutdown), waits for the exit, and returns the counters the
    /// worker printed.
    async fn terminate(&mut self) -> Value {
        self.signal("TERM");
        assert!(
            self.exit(Duration::from_secs(30)).await,
            "{} exited with an error",
            self.name
        );
        let lines = self.stdout_lines();
        lines
            .iter()
            .rev()
            .find_map(|l| {
                serde_json::from_str::<Value>(l)
                    .ok()
                    .filter(|v| v.get("claimed").is_some())
            })
            .unwrap_or_else(|| panic!("{} printed no counters: {lines:?}", self.name))
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        if std::thread::panicking() {
            let lines = self.stderr.lock().unwrap_or_else(|e| e.into_inner());
            eprintln!("--- last log lines of {} (pid {}) ---", self.name, self.pid);
            for line in &lines[lines.len().saturating_sub(40)..] {
                eprintln!("{line}");
            }
        }
    }
}

fn collect_lines(
    stream: impl tokio::io::AsyncRead + Unpin + Send + 'static,
    into: Arc<Mutex<Vec<String>>>,
) -> JoinHandle<()> {
    tokio::spawn(async move {
        let mut lines = BufReader::new(stream).lines();
        while let Ok(Some(line)) = lines.next_line().await {
            into.lock().unwrap().push(line);
        }
    })
}

fn level(r: &Value) -> &str {
    r["level"].as_str().unwrap_or("")
}

fn message(r: &Value) -> &str {
    r["message"].as_str().unwrap_or("")
}

/// Whether `r` is sqlx's warning that a statement took a second or more, or that a pool
/// acquire took two seconds or more. Their level is WARN whatever the cause, and on a busy
/// machine the cause is the machine.
fn reports_slowness(r: &Value) -> bool {
    let target = r["target"].as_str().unwrap_or("");
    (target == "sqlx::query" && message(r).starts_with("slow statement"))
        || (target == "sqlx::pool::acquire" && message(r).contains("exceeded slow threshold"))
}

/// Whether `r` says that the worker's claims, the read of the jobs a claim took, its outcome
/// writes or its maintenance work again after failing (whichever hit the error first: a
/// worker that does not hold the maintenance turn may meet an outage only in its outcome
/// writes, or only in the read after a claim).
fn recovered(r: &Value) -> bool {
    matches!(
        message(r),
        "maintenance step recovered"
            | "database reachable again; claiming resumed"
            | "job outcomes recorded again"
            | "the jobs just claimed were read again"
            | "worker heartbeat written again"
    )
}

/// A counter printed by a worker.
fn counter(m: &Value, name: &str) -> u64 {
    m[name]
        .as_u64()
        .unwrap_or_else(|| panic!("no counter {name} in {m}"))
}

/// A counter summed over several workers.
fn total(metrics: &[Value], name: &str) -> u64 {
    metrics.iter().map(|m| counter(m, name)).sum()
}

// ---------------------------------------------------------------------------------------
// 1. A row locked by another transaction is skipped, never waited for.
// ---------------------------------------------------------------------------------------

/// Row lock waits the server has begun since it started, by anyone: a cumulative count,
/// so that a wait shows however briefly it lasted and whenever it happened.
async fn row_lock_waits_so_far(pool: &MySqlPool) -> u64 {
    tests::global_status(pool, "Innodb_row_lock_waits").await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_row_locked_by_another_transaction_is_skipped_not_waited_for() {
    // A private server: its count of row lock waits is server-wide, and no other test may
    // add to it.
    let db_server = tokio::task::spawn_blocking(TestServer::start)
        .await
        .expect("the start task")
        .expect("a private server");
    let url = db_server
        .create_database("faults_locked_row")
        .await
        .expect("a database");
    let queue = prepare(&url).await;
    let ids: Vec<u64> = queue
        .enqueue_many((0..10).map(|i| effect(format!("locked-{i}"), 50)))
        .await
        .expect("enqueue")
        .into_iter()
        .map(Enqueued::id)
        .collect();
    let locked = ids[4];

    // Someone else's transaction holds the row of one ready job, and stays open.
    let mut holder = MySqlConnection::connect(&url).await.expect("connect");
    sqlx::raw_sql("BEGIN").execute(&mut holder).await.unwrap();
    let held: u64 = sqlx::query_scalar("SELECT id FROM job_queue WHERE id = ? FOR UPDATE")
        .bind(locked)
        .fetch_one(&mut holder)
        .await
        .expect("lock the row");
    assert_eq!(held, locked);

    // Debug logs of the worker loop say when a claim found only locked rows.
    let filter = "info,jobqueue_runtime::worker=debug";
    let workers: Vec<Proc> = (0..3)
        .map(|i| {
            let args: Vec<&str> = QUICK
                .iter()
                .copied()
                .chain(["--concurrency", "4"])
                .collect();
            Proc::spawn(&format!("worker-{i}"), &url, &args, filter)
        })
        .collect();
    let began = Instant::now();
    let waits_before = row_lock_waits_so_far(queue.mysql_pool().unwrap()).await;

    // Every other job is done while the lock is held, and nothing waits for the lock.
    wait_for("nine jobs done", Duration::from_secs(30), || async {
        (done_effects(&queue).await == 9).then_some(())
    })
    .await;
    let nine_in = began.elapsed();
    for w in &workers {
        w.wait_log(
            "a claim that found only locked rows",
            Duration::from_secs(10),
            |r| message(r).contains("found only jobs locked by other claimers"),
        )
        .await;
    }
    let waits = row_lock_waits_so_far(queue.mysql_pool().unwrap()).await - waits_before;
    assert_eq!(waits, 0, "a worker waited for the locked row");
    let row = row(&queue, locked).await;
    assert_eq!((row.status, row.attempts), (JobStatus::Ready, 0));
    let effects = effect_rows(&queue).await;
    assert_eq!(effects.len(), 9, "{effects:?}");
    for (i, id) in ids.iter().enumerate() {
        let n = effects.iter().filter(|e| e.job_id == *id).count();
        assert_eq!(n, usize::from(*id != locked), "job {i} (id {id})");
    }
    println!(
        "locked row: 9 of 10 jobs done in {:.2}s by 3 processes while one row stayed locked",
        nine_in.as_secs_f64()
    );

    // The transaction ends: the last job runs too.
    sqlx::raw_sql("ROLLBACK")
        .execute(&mut holder)
        .await
        .unwrap();
    wait_status(&queue, locked, JobStatus::Done, Duration::from_secs(15)).await;
    let effects = effect_rows(&queue).await;
    assert_eq!(effects.len(), 10);
    let mut keys: Vec<&str> = effects.iter().map(|e| e.task_key.as_str()).collect();
    keys.sort_unstable();
    keys.dedup();
    assert_eq!(keys.len(), 10, "each job once");

    let mut metrics = Vec::new();
    for mut w in workers {
        metrics.push(w.terminate().await);
        assert!(w.warnings().is_empty(), "{}: {:?}", w.name, w.warnings());
    }
    assert_eq!(total(&metrics, "succeeded"), 10);
    assert_eq!(total(&metrics, "claimed"), 10);
    assert_eq!(total(&metrics, "conflict_retries"), 0);
    assert_eq!(total(&metrics, "database_errors"), 0);
    assert!(total(&metrics, "empty_contended") > 0, "{metrics:?}");
}

// ---------------------------------------------------------------------------------------
// 2. An idle worker stays quiet; a revoked privilege is an ERROR it survives.
// ---------------------------------------------------------------------------------------

/// `url` with its user and password replaced.
fn url_as(url: &str, user: &str, password: &str) -> String {
    let (scheme, rest) = url.split_once("://").expect("a URL");
    let host = rest.rsplit_once('@').map_or(rest, |(_, host)| host);
    format!("{scheme}://{user}:{password}@{host}")
}

/// Runs `sql` once for each host a worker of this suite may connect from, with `{u}` in it
/// replaced by the account.
async fn for_each_host(pool: &MySqlPool, user: &str, sql: &str) {
    for host in ["%", "localhost", "127.0.0.1"] {
        let account = format!("'{user}'@'{host}'");
        sqlx::raw_sql(&sql.replace("{u}", &account))
            .execute(pool)
            .await
            .unwrap_or_else(|e| panic!("{sql} for {account}: {e}"));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_worker_is_quiet_and_survives_a_revoked_privilege() {
    let (url, queue) = setup(Backend::MySql, "faults_idle").await;
    let pool = queue.mysql_pool().unwrap();
    let db: String = sqlx::query_scalar("SELECT DATABASE()")
        .fetch_one(pool)
        .await
        .unwrap();
    // A user of its own with DML rights on the tables it uses, as a deployment would give a
    // worker. Table-level grants: a change to them applies to open sessions at their next
    // statement (a database-level one only at their next `USE`).
    // (On a server given by JOBQUEUE_TEST_DATABASE_URL, its user needs CREATE USER and GRANT
    // OPTION for this.)
    let user = format!("jqw_{}", &db[db.len() - 8..]);
    for_each_host(pool, &user, "CREATE USER {u} IDENTIFIED BY 'w-pass'").await;
    let grants = format!(
        "GRANT SELECT, INSERT, UPDATE, DELETE ON `{db}`.`job_queue` TO {{u}}; \
         GRANT SELECT ON `{db}`.`job_queue_pause` TO {{u}}; \
         GRANT SELECT, INSERT, DELETE ON `{db}`.`job_queue_gauges` TO {{u}}; \
         GRANT SELECT, UPDATE ON `{db}`.`job_queue_gauge_refresh` TO {{u}}; \
         GRANT SELECT, INSERT, UPDATE, DELETE ON `{db}`.`job_queue_slot` TO {{u}}; \
         GRANT SELECT, INSERT, UPDATE, DELETE ON `{db}`.`job_queue_blocked` TO {{u}}; \
         GRANT SELECT, INSERT ON `{db}`.`effects` TO {{u}}"
    );
    for_each_host(pool, &user, &grants).await;
    let worker_url = url_as(&url, &user, "w-pass");

    let mut idle = Proc::worker("idle", &worker_url, &[]);
    let mut survivor = Proc::worker("survivor", &worker_url, &[]);
    idle.started().await;
    survivor.started().await;
    // The observation window: nothing to wait for but time itself.
    tokio::time::sleep(Duration::from_secs(3)).await;
    for w in [&idle, &survivor] {
        assert!(w.warnings().is_empty(), "{}: {:?}", w.name, w.warnings());
    }
    let m = idle.terminate().await;
    // One claim found nothing; from then on the worker looked with its idle probe (every
    // 60 ms, alone: it may not read the roster; about 50 in the window), and claimed
    // nothing more.
    assert!(counter(&m, "empty_idle") >= 1, "{m}");
    assert!(counter(&m, "idle_probes") >= 10, "{m}");
    for name in [
        "claimed",
        "empty_contended",
        "empty_leased_only",
        "database_errors",
        "conflict_retries",
    ] {
        assert_eq!(counter(&m, name), 0, "{name}: {m}");
    }
    assert!(idle.warnings().is_empty(), "{:?}", idle.warnings());

    // The worker's user loses SELECT on the job table: every claim fails.
    let revoke = format!("REVOKE SELECT ON `{db}`.`job_queue` FROM {{u}}");
    for_each_host(pool, &user, &revoke).await;
    let error = survivor
        .wait_log(
            "the denied claim as an ERROR",
            Duration::from_secs(10),
            |r| level(r) == "ERROR" && r["error"].as_str().unwrap_or("").contains("command denied"),
        )
        .await;
    println!("revoked privilege, as the worker logs it: {error}");
    assert!(
        survivor.child.try_wait().unwrap().is_none(),
        "the worker must keep running"
    );

    // Granted again: the worker recovers by itself and runs a new job.
    let grant = format!("GRANT SELECT ON `{db}`.`job_queue` TO {{u}}");
    for_each_host(pool, &user, &grant).await;
    let id = queue
        .enqueue(effect("after-regrant", 0))
        .await
        .unwrap()
        .id();
    wait_status(&queue, id, JobStatus::Done, Duration::from_secs(30)).await;
    survivor
        .wait_log("that it recovered", Duration::from_secs(5), recovered)
        .await;
    let m = survivor.terminate().await;
    assert_eq!(counter(&m, "succeeded"), 1, "{m}");
    assert!(counter(&m, "database_errors") >= 1, "{m}");
    for_each_host(pool, &user, "DROP USER {u}").await;
}

// ---------------------------------------------------------------------------------------
// 3. A worker killed mid-job: its jobs come back after one lease, and run once more.
// ---------------------------------------------------------------------------------------

async fn a_killed_worker_s_jobs_come_back_after_one_lease(backend: Backend) {
    let (url, queue) = setup(backend, "faults_crash").await;
    let pool = &queue;
    const LEASE: f64 = 2.0; // `slow`'s lease
    const MAINTENANCE: f64 = 0.5;
    let mut slow_ids = Vec::new();
    for i in 0..3 {
        let job = Slow {
            name: format!("crash-slow-{i}"),
            ms: 3000,
        };
        slow_ids.push(queue.enqueue(job).await.unwrap().id());
    }
    let quick_ids: Vec<u64> = queue
        .enqueue_many((0..5).map(|i| effect(format!("crash-quick-{i}"), 0)))
        .await
        .unwrap()
        .into_iter()
        .map(Enqueued::id)
        .collect();

    let maintenance = ["--maintenance-ms", "500", "--concurrency", "8"];
    let mut doomed = Proc::worker("doomed", &url, &maintenance);
    wait_for(
        "the slow jobs to start",
        Duration::from_secs(30),
        || async {
            let e = effect_rows(pool).await;
            let started = e.iter().filter(|e| e.phase == "start").count();
            let quick = e
                .iter()
                .filter(|e| e.task_key.starts_with("crash-quick"))
                .count();
            (started == 3 && quick == 5).then_some(())
        },
    )
    .await;
    let mut rescuer = Proc::worker("rescuer", &url, &maintenance);
    rescuer.started().await;

    doomed.kill().await;
    let killed_at = db_now(pool).await;

    // Each slow job starts again in the other process, once its lease has run out.
    let restarts = wait_for(
        "the slow jobs to restart",
        Duration::from_secs(20),
        || async {
            let e = effect_rows(pool).await;
            let again: Vec<EffectRow> = e
                .into_iter()
                .filter(|e| e.phase == "start" && e.attempt == 2)
                .collect();
            (again.len() == 3).then_some(again)
        },
    )
    .await;
    let recovery = restarts
        .iter()
        .map(|e| seconds_between(e.at, killed_at))
        .fold(0.0, f64::max);
    // One lease and one maintenance pass, and a margin for the rescuer's claim and the
    // job's first write on a busy machine: far from the default lease of 30 s that the
    // jobs would otherwise have waited for.
    let bound = LEASE + MAINTENANCE * 1.2 + 8.0;
    println!(
        "crash recovery: SIGKILL to the last reclaimed job's second start took {recovery:.2}s \
         (lease {LEASE}s, maintenance every {MAINTENANCE}s; bound {bound:.1}s)"
    );
    assert!(recovery <= bound, "recovery took {recovery:.2}s");
    assert!(restarts.iter().all(|e| e.pid == rescuer.pid));

    for id in &slow_ids {
        let row = wait_status(&queue, *id, JobStatus::Done, Duration::from_secs(20)).await;
        assert_eq!(row.attempts, 2, "both claims count");
        let error = row.last_error.unwrap_or_default();
        assert!(error.contains("expired during attempt 1"), "{error}");
    }
    let effects = effect_rows(pool).await;
    for id in &slow_ids {
        let mine: Vec<(&str, u32, u32)> = effects
            .iter()
            .filter(|e| e.job_id == *id)
            .map(|e| (e.phase.as_str(), e.attempt, e.pid))
            .collect();
        assert_eq!(
            mine,
            [
                ("start", 1, doomed.pid),
                ("start", 2, rescuer.pid),
                ("done", 2, rescuer.pid)
            ],
            "job {id}"
        );
    }
    // Nothing else ran twice.
    for id in &quick_ids {
        let n = effects.iter().filter(|e| e.job_id == *id).count();
        assert_eq!(n, 1, "job {id}");
        assert_eq!(row(&queue, *id).await.attempts, 1);
    }
    let m = rescuer.terminate().await;
    assert_eq!(counter(&m, "reclaimed"), 3, "{m}");
    assert_eq!(counter(&m, "succeeded"), 3, "{m}");
}

// ---------------------------------------------------------------------------------------
// 4. The same message many times: one job, one side effect, a log record per duplicate.
// ---------------------------------------------------------------------------------------

async fn duplicate_enqueues_leave_one_job_and_one_side_effect(backend: Backend) {
    let (url, queue) = setup(backend, "faults_duplicates").await;
    let pool = &queue;

    // One after the other.
    let seq = queue.enqueue(effect("dup-seq", 0)).await.unwrap();
    assert!(seq.is_new());
    for _ in 0..5 {
        assert_eq!(
            queue
                .enqueue(effect("dup-seq", 0))
                .await
                .unwrap()
                .duplicate_of(),
            Some(seq.id())
        );
    }

    // At the same moment from three processes, for a key none of them has seen.
    let mut enqueuers: Vec<Proc> = (0..3)
        .map(|i| {
            let args = [
                "--enqueue-key",
                "dup-race",
                "--enqueue-count",
                "20",
                "--wait-for-go",
            ];
            Proc::spawn(&format!("enqueuer-{i}"), &url, &args, "info")
        })
        .collect();
    for p in &enqueuers {
        wait_for(
            "an enqueuer to be ready",
            Duration::from_secs(30),
            || async { p.stdout_lines().iter().any(|l| l == "ready").then_some(()) },
        )
        .await;
    }
    for p in &mut enqueuers {
        let stdin = p.stdin.as_mut().expect("stdin piped");
        stdin.write_all(b"go\n").await.unwrap();
        stdin.flush().await.unwrap();
    }
    let mut race_id = None;
    let (mut new, mut duplicates, mut logged) = (0, 0, 0);
    for p in &mut enqueuers {
        assert!(p.exit(Duration::from_secs(30)).await, "{} failed", p.name);
        let out: Value = p
            .stdout_lines()
            .iter()
            .find_map(|l| serde_json::from_str(l).ok())
            .expect("the enqueuer's outcome");
        new += out["new"].as_u64().unwrap();
        let dups = out["duplicates"].as_u64().unwrap();
        duplicates += dups;
        for id in out["ids"].as_array().unwrap() {
            let id = id.as_u64().unwrap();
            assert_eq!(
                *race_id.get_or_insert(id),
                id,
                "every outcome names one job"
            );
        }
        // Each duplicate is logged with the key and the existing job's id.
        let records: Vec<Value> = p
            .logs()
            .into_iter()
            .filter(|r| message(r).starts_with("duplicate enqueue ignored"))
            .collect();
        for r in &records {
            assert_eq!(r["task_key"], "dup-race", "{r}");
            assert_eq!(r["existing_id"].as_u64(), race_id, "{r}");
        }
        assert_eq!(records.len() as u64, dups, "{}", p.name);
        logged += records.len();
    }
    assert_eq!((new, duplicates, logged), (1, 59, 59));
    let race_id = race_id.unwrap();

    // Inside the application's transactions (its own pool, at its default isolation level).
    macro_rules! in_app_transactions {
        ($app:expr) => {{
            let app = $app;
            let mut tx = app.begin().await.unwrap();
            assert!(queue
                .enqueue_in(&mut tx, effect("dup-tx", 0))
                .await
                .unwrap()
                .is_new());
            tx.rollback().await.unwrap();
            assert!(queue.job_by_key("dup-tx").await.unwrap().is_none());

            let mut tx = app.begin().await.unwrap();
            let tx_id = queue
                .enqueue_in(&mut tx, effect("dup-tx", 0))
                .await
                .unwrap();
            assert!(tx_id.is_new());
            let again = queue
                .enqueue_in(&mut tx, effect("dup-tx", 0))
                .await
                .unwrap();
            assert_eq!(again.duplicate_of(), Some(tx_id.id()));
            let seq_again = queue
                .enqueue_in(&mut tx, effect("dup-seq", 0))
                .await
                .unwrap();
            assert_eq!(seq_again.duplicate_of(), Some(seq.id()));
            // A duplicate does not spoil the transaction: what follows commits with it.
            let other = queue
                .enqueue_in(&mut tx, effect("dup-tx-other", 0))
                .await
                .unwrap();
            assert!(other.is_new());
            tx.commit().await.unwrap();

            let mut tx = app.begin().await.unwrap();
            let dup = queue
                .enqueue_in(&mut tx, effect("dup-tx", 0))
                .await
                .unwrap();
            assert_eq!(dup.duplicate_of(), Some(tx_id.id()));
            tx.rollback().await.unwrap();
            assert!(queue.job(tx_id.id()).await.unwrap().is_some());

            // A transaction whose snapshot predates the other job still finds it.
            let mut tx = app.begin().await.unwrap();
            let _: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM job_queue")
                .fetch_one(&mut *tx)
                .await
                .unwrap();
            let late = queue.enqueue(effect("dup-snapshot", 0)).await.unwrap();
            let seen = queue
                .enqueue_in(&mut tx, effect("dup-snapshot", 0))
                .await
                .unwrap();
            assert_eq!(seen.duplicate_of(), Some(late.id()));
            tx.commit().await.unwrap();
            (tx_id, other, late)
        }};
    }
    let (tx_id, other, late) = match backend {
        Backend::Postgres => in_app_transactions!(sqlx::PgPool::connect(&url).await.unwrap()),
        _ => in_app_transactions!(MySqlPool::connect(&url).await.unwrap()),
    };
    assert_eq!(queue.metrics().duplicates, 5 + 2 + 1 + 1);

    // Run them all: one side effect per key.
    let mut worker = Proc::worker("worker", &url, &[]);
    let ids = [seq.id(), race_id, tx_id.id(), other.id(), late.id()];
    for id in ids {
        wait_status(&queue, id, JobStatus::Done, Duration::from_secs(30)).await;
    }
    let jobs = sql_i64(&queue, "SELECT COUNT(*) FROM job_queue", &[]).await;
    assert_eq!(jobs, 5);
    let effects = effect_rows(pool).await;
    let mut keys: Vec<&str> = effects.iter().map(|e| e.task_key.as_str()).collect();
    keys.sort_unstable();
    assert_eq!(
        keys,
        [
            "dup-race",
            "dup-seq",
            "dup-snapshot",
            "dup-tx",
            "dup-tx-other"
        ]
    );
    let m = worker.terminate().await;
    assert_eq!(counter(&m, "succeeded"), 5, "{m}");
}

// ---------------------------------------------------------------------------------------
// 5. A worker paused past its lease wakes up to find it lost, and writes nothing.
// ---------------------------------------------------------------------------------------

async fn a_paused_worker_that_wakes_after_its_lease_changes_nothing(backend: Backend) {
    let (url, queue) = setup(backend, "faults_zombie").await;
    let pool = &queue;
    let id = queue
        .enqueue(Slow {
            name: "zombie".into(),
            ms: 2500,
        })
        .await
        .unwrap()
        .id();
    let mut zombie = Proc::worker("zombie", &url, &[]);
    wait_for("the job to start", Duration::from_secs(30), || async {
        (!effect_rows(pool).await.is_empty()).then_some(())
    })
    .await;
    zombie.signal("STOP");

    let mut rescuer = Proc::worker("rescuer", &url, &[]);
    let done = wait_status(&queue, id, JobStatus::Done, Duration::from_secs(30)).await;
    assert_eq!(done.attempts, 2);

    zombie.signal("CONT");
    let record = zombie
        .wait_log("that it lost the lease", Duration::from_secs(15), |r| {
            r["job.id"].as_u64() == Some(id)
                && matches!(level(r), "WARN" | "ERROR")
                && message(r).contains("lease")
        })
        .await;
    println!("the resumed worker logs: {}", message(&record));

    let after = row(&queue, id).await;
    assert_eq!(after.status, JobStatus::Done);
    assert_eq!(after.attempts, 2);
    assert_eq!(after.lease_owner, None);
    assert_eq!(after.finished_at, done.finished_at);
    assert_eq!(after.updated_at, done.updated_at);
    assert_eq!(after.last_error, done.last_error);

    let effects = effect_rows(pool).await;
    let by = |phase: &str, attempt: u32| {
        effects
            .iter()
            .filter(|e| e.phase == phase && e.attempt == attempt)
            .map(|e| e.pid)
            .collect::<Vec<_>>()
    };
    assert_eq!(by("start", 1), [zombie.pid]);
    assert_eq!(by("start", 2), [rescuer.pid]);
    assert_eq!(by("done", 2), [rescuer.pid]);
    // Woken together after the pause, the job's task and the worker's lease thread race:
    // the job's timer has fired, and one more step of it would record its `done`, outside
    // its claim (another worker ran the job meanwhile). The run checks its lease's stop-by
    // moment before every step, so it never takes that step.
    assert_eq!(
        by("done", 1),
        [] as [u32; 0],
        "the paused attempt ran on after its lease was gone"
    );

    let z = zombie.terminate().await;
    assert!(counter(&z, "lease_lost") >= 1, "{z}");
    assert_eq!(counter(&z, "succeeded"), 0, "{z}");
    let r = rescuer.terminate().await;
    assert_eq!(counter(&r, "succeeded"), 1, "{r}");
    assert_eq!(counter(&r, "reclaimed"), 1, "{r}");
}

// ---------------------------------------------------------------------------------------
// 6. The database restarts under load: workers log it, reconnect, and finish every job.
// ---------------------------------------------------------------------------------------

async fn workers_ride_out_a_database_restart(backend: Backend) {
    let start = match backend {
        Backend::Postgres => TestServer::start_postgres,
        _ => TestServer::start,
    };
    let db_server = tokio::task::spawn_blocking(start)
        .await
        .unwrap()
        .unwrap_or_else(|e| panic!("{e}"));
    let url = db_server.create_database("faults_restart").await.unwrap();
    let queue = prepare(&url).await;
    let pool = &queue;
    const JOBS: i64 = 300;
    queue
        .enqueue_many((0..JOBS).map(|i| effect(format!("restart-{i}"), 20)))
        .await
        .unwrap();
    // Connections are refused while the server is down, and an operation waits for one up
    // to the acquire timeout before it fails: a short one makes the outage show in the logs.
    let args = [
        "--concurrency",
        "2",
        "--maintenance-ms",
        "500",
        "--acquire-timeout-ms",
        "1000",
    ];
    let mut workers = [
        Proc::worker("worker-a", &url, &args),
        Proc::worker("worker-b", &url, &args),
    ];

    wait_for("a fifth of the jobs", Duration::from_secs(60), || async {
        (done_effects(pool).await >= JOBS / 5).then_some(())
    })
    .await;
    let down = Instant::now();
    tokio::task::block_in_place(|| db_server.stop()).unwrap();
    // The outage itself: nothing to wait for but time.
    tokio::time::sleep(Duration::from_secs(2)).await;
    tokio::task::block_in_place(|| db_server.restart()).unwrap();
    let outage = down.elapsed();

    let finished = wait_for("every job done", Duration::from_secs(120), || async {
        // The queue's pool reconnects as the workers' do; a read that meets a connection
        // the restart broke is tried again.
        let done = queue
            .count(&JobFilter::default().status(JobStatus::Done))
            .await
            .ok()?;
        (done == JOBS as u64).then(Instant::now)
    })
    .await;
    println!(
        "database restart: down for {:.1}s; all {JOBS} jobs done {:.1}s after it went down",
        outage.as_secs_f64(),
        (finished - down).as_secs_f64()
    );

    let effects = effect_rows(pool).await;
    let mut keys: Vec<&str> = effects.iter().map(|e| e.task_key.as_str()).collect();
    keys.sort_unstable();
    keys.dedup();
    assert_eq!(keys.len() as i64, JOBS, "every job's side effect happened");
    let reruns = effects.len() as i64 - JOBS;
    let reclaimed = sql_i64(
        &queue,
        "SELECT COUNT(*) FROM job_queue WHERE attempts > 1",
        &[],
    )
    .await;
    println!(
        "database restart: {reruns} side effect(s) repeated (an attempt interrupted after its \
         effect, before its outcome was recorded); {reclaimed} job(s) needed more than one attempt"
    );
    assert_eq!(count_status(&queue, JobStatus::Failed).await, 0);

    // Each worker logged the outage, and that it was over. Which line says it depends on
    // where the worker was when the server went: a claim that failed (ERROR), or a claim
    // whose jobs could not be read back and a heartbeat that failed (WARN, each retried).
    for w in &mut workers {
        let errors: Vec<Value> = w
            .logs()
            .into_iter()
            .filter(|r| {
                matches!(level(r), "ERROR" | "WARN")
                    && r["target"]
                        .as_str()
                        .is_some_and(|t| t.starts_with("jobqueue_runtime"))
                    && r["error"]
                        .as_str()
                        .is_some_and(|e| e.starts_with("database error"))
            })
            .collect();
        println!(
            "{}: {} line(s) of the library reporting the outage, first: {} ({})",
            w.name,
            errors.len(),
            errors.first().map(message).unwrap_or("-"),
            errors
                .first()
                .map(|r| r["error"].to_string())
                .unwrap_or_default(),
        );
        assert!(!errors.is_empty(), "{} did not log the outage", w.name);
        w.wait_log("that it recovered", Duration::from_secs(10), recovered)
            .await;
        let m = w.terminate().await;
        assert!(counter(&m, "database_errors") >= 1, "{}: {m}", w.name);
    }
    tokio::task::block_in_place(move || drop(db_server));
}

// ---------------------------------------------------------------------------------------
// 7. Ten thousand jobs, four processes: each job done exactly once, none failed.
// ---------------------------------------------------------------------------------------

async fn ten_thousand_jobs_over_four_processes_run_exactly_once(backend: Backend) {
    let (url, queue) = setup(backend, "faults_scale").await;
    const JOBS: i64 = 10_000;
    let args = ["--concurrency", "8"];
    let mut workers: Vec<Proc> = (0..4)
        .map(|i| Proc::worker(&format!("worker-{i}"), &url, &args))
        .collect();
    for w in &workers {
        w.started().await;
    }
    let began = Instant::now();
    let outcomes = queue
        .enqueue_many((0..JOBS).map(|i| effect(format!("scale-{i}"), 0)))
        .await
        .unwrap();
    assert!(outcomes.iter().all(|o| o.is_new()));
    wait_for("every job done", Duration::from_secs(180), || async {
        (count_status(&queue, JobStatus::Done).await == JOBS).then_some(())
    })
    .await;
    let took = began.elapsed();

    let rows = sql_i64(&queue, "SELECT COUNT(*) FROM effects", &[]).await;
    let distinct = sql_i64(&queue, "SELECT COUNT(DISTINCT task_key) FROM effects", &[]).await;
    assert_eq!(
        (rows, distinct),
        (JOBS, JOBS),
        "each side effect exactly once"
    );
    assert_eq!(count_status(&queue, JobStatus::Failed).await, 0);
    let again = sql_i64(
        &queue,
        "SELECT COUNT(*) FROM job_queue WHERE attempts <> 1",
        &[],
    )
    .await;
    assert_eq!(again, 0, "every job took exactly one attempt");

    let mut metrics = Vec::new();
    for w in &mut workers {
        metrics.push(w.terminate().await);
    }
    assert_eq!(total(&metrics, "claimed"), JOBS as u64);
    assert_eq!(total(&metrics, "succeeded"), JOBS as u64);
    assert_eq!(total(&metrics, "retried"), 0);
    assert_eq!(total(&metrics, "failed"), 0);
    assert_eq!(total(&metrics, "lease_lost"), 0);
    let per_process: Vec<u64> = metrics.iter().map(|m| counter(m, "claimed")).collect();
    println!(
        "scale: {JOBS} jobs over 4 processes x 8 slots in {:.1}s ({:.0} jobs/s); claimed per \
         process {per_process:?}; conflict retries {}, database errors {}, contended empty \
         claims {}",
        took.as_secs_f64(),
        JOBS as f64 / took.as_secs_f64(),
        total(&metrics, "conflict_retries"),
        total(&metrics, "database_errors"),
        total(&metrics, "empty_contended"),
    );
    for w in &workers {
        let errors: Vec<Value> = w
            .warnings()
            .into_iter()
            .filter(|r| level(r) == "ERROR")
            .collect();
        assert!(errors.is_empty(), "{}: {errors:?}", w.name);
    }
}

// ---------------------------------------------------------------------------------------
// 8. Bad input: a clear error at enqueue, or a job that waits for a worker able to run it,
//    saying why; nothing else is harmed.
// ---------------------------------------------------------------------------------------

/// Inserts a job by SQL, bypassing every check of `enqueue`; returns its id.
async fn insert_raw(pool: &MySqlPool, kind: &str, key: &str, payload: &str, attempts: u32) -> u64 {
    sqlx::query(
        "INSERT INTO job_queue (queue, kind, task_key, payload, status, priority, run_at, \
           attempts, max_attempts, lease_ms, created_at, updated_at) \
         VALUES ('default', ?, ?, ?, 'ready', 0, UTC_TIMESTAMP(6), 0, ?, 10000, \
           UTC_TIMESTAMP(6), UTC_TIMESTAMP(6))",
    )
    .bind(kind)
    .bind(key)
    .bind(payload)
    .bind(attempts)
    .execute(pool)
    .await
    .expect("insert a raw job")
    .last_insert_id()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_input_gets_a_clear_error_and_harms_nothing_else() {
    let (url, queue) = setup(Backend::MySql, "faults_bad_input").await;
    let pool = queue.mysql_pool().unwrap();

    // Refused at enqueue, with the reason.
    let huge = queue
        .enqueue(effect("x".repeat(2 * 1024 * 1024), 0))
        .await
        .unwrap_err();
    assert!(matches!(huge, Error::PayloadTooLarge { .. }), "{huge}");
    assert!(
        huge.to_string().contains("over the limit of 1048576 bytes"),
        "{huge}"
    );
    for bad_queue in [
        "it's",
        "a'; DROP TABLE job_queue; --",
        "очередь",
        "with space",
        "",
    ] {
        let e = queue
            .enqueue_with(
                effect("queue-probe", 0),
                EnqueueOptions::default().queue(bad_queue),
            )
            .await
            .unwrap_err();
        assert!(
            matches!(e, Error::InvalidQueue { .. }),
            "{bad_queue:?}: {e}"
        );
        assert!(e.to_string().starts_with("invalid queue name"), "{e}");
    }
    for (bad_key, reason) in [
        ("", "must not be empty"),
        ("line\nbreak", "control characters"),
        ("nul\0byte", "control characters"),
        (&"k".repeat(256), "over the limit of 255"),
    ] {
        let e = queue
            .enqueue_with(
                effect("key-probe", 0),
                EnqueueOptions::default().key(bad_key),
            )
            .await
            .unwrap_err();
        assert!(matches!(e, Error::InvalidKey { .. }), "{e}");
        assert!(e.to_string().contains(reason), "{e}");
    }
    let none: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM job_queue")
        .fetch_one(pool)
        .await
        .unwrap();
    assert_eq!(none, 0, "a refused enqueue inserts nothing");

    // Keys full of quotes, SQL and non-ASCII text are data: stored, run and found as given.
    let odd_keys = [
        "it's \"quoted\" `back\\tick`;",
        "'); DROP TABLE job_queue; --",
        "%_ LIKE _% \\% ?",
        "ключ-🔑-鍵-ﬁ",
        "Mixed",
        "mixed",
    ];
    let mut odd_ids = Vec::new();
    for key in odd_keys {
        let first = queue.enqueue(effect(key, 0)).await.unwrap();
        assert!(first.is_new(), "{key:?}");
        let again = queue.enqueue(effect(key, 0)).await.unwrap();
        assert_eq!(again.duplicate_of(), Some(first.id()), "{key:?}");
        let found = queue.job_by_key(key).await.unwrap().expect("found by key");
        assert_eq!((found.id, found.task_key.as_str()), (first.id(), key));
        odd_ids.push(first.id());
    }

    // Written by SQL past every check: payloads that do not fit the kind, an unknown kind.
    let wrong_type = insert_raw(
        pool,
        "effect",
        "raw-wrong-type",
        r#"{"name": 42, "sleep_ms": 0, "fail_first": 0}"#,
        5,
    )
    .await;
    let missing = insert_raw(pool, "effect", "raw-missing", r#"{"name": "m"}"#, 5).await;
    let not_object = insert_raw(pool, "effect", "raw-string", r#""just a string""#, 5).await;
    let unknown = insert_raw(pool, "no_such_kind", "raw-unknown", "{}", 2).await;
    let normal = queue.enqueue(effect("normal", 0)).await.unwrap().id();
    let flaky = queue
        .enqueue(Effect {
            name: "flaky".into(),
            sleep_ms: 0,
            fail_first: 2,
        })
        .await
        .unwrap()
        .id();

    let mut worker = Proc::worker("worker", &url, &[]);
    let expected = [
        (
            wrong_type,
            "payload does not match the arguments of job `effect` at `name`: invalid type: integer `42`, expected a string",
        ),
        (
            missing,
            "payload does not match the arguments of job `effect`: missing field `sleep_ms`",
        ),
        (
            not_object,
            "payload does not match the arguments of job `effect`: invalid type: string \"just a string\"",
        ),
        (
            unknown,
            "job kind `no_such_kind` is not registered in this worker (it knows: crash, effect, ledger, slow, tick)",
        ),
    ];
    // Another release of the program may run them: they wait for it, said so in
    // `last_error`, and no claim of a worker that cannot run them spends an attempt.
    for (id, text) in expected {
        let row = wait_status(&queue, id, JobStatus::Scheduled, Duration::from_secs(30)).await;
        let error = row.last_error.unwrap_or_default();
        assert!(
            error.starts_with("waiting for a worker that can run it: "),
            "job {id}: {error}"
        );
        assert!(error.contains(text), "job {id}: {error}");
        let budget = if id == unknown { 2 } else { 5 };
        assert_eq!(row.max_attempts - row.attempts, budget, "job {id}");
    }

    for id in odd_ids.iter().chain([&normal]) {
        wait_status(&queue, *id, JobStatus::Done, Duration::from_secs(30)).await;
    }
    // A job that fails twice and then succeeds keeps the last failure's text.
    let row = wait_status(&queue, flaky, JobStatus::Done, Duration::from_secs(30)).await;
    assert_eq!(row.attempts, 3);
    let error = row.last_error.unwrap_or_default();
    assert!(
        error.contains("flaky: failing attempt 2 of the first 2 on purpose"),
        "{error}"
    );
    let effects = effect_rows(&queue).await;
    let mut keys: Vec<&str> = effects.iter().map(|e| e.task_key.as_str()).collect();
    keys.sort_unstable();
    let mut want: Vec<&str> = odd_keys
        .iter()
        .copied()
        .chain(["normal", "flaky"])
        .collect();
    want.sort_unstable();
    assert_eq!(
        keys, want,
        "one side effect per good job, keys byte for byte"
    );
    let m = worker.terminate().await;
    assert_eq!(counter(&m, "succeeded"), odd_keys.len() as u64 + 2, "{m}");
    assert_eq!(counter(&m, "retried"), 2, "flaky's two failures: {m}");
    assert_eq!(counter(&m, "failed"), 0, "{m}");
    assert!(counter(&m, "deferred") >= 4, "{m}");

    // A worker given a bad queue name refuses to start, and says why.
    let mut refused = Proc::spawn("refused", &url, &["--queues", "it's"], "info");
    assert!(!refused.exit(Duration::from_secs(30)).await);
    let why = refused
        .logs()
        .into_iter()
        .find(|r| level(r) == "ERROR")
        .expect("an error record");
    assert!(
        why["error"]
            .as_str()
            .unwrap_or("")
            .contains("invalid queue name"),
        "{why}"
    );
}

// ---------------------------------------------------------------------------------------
// 9. Periodic jobs: every process schedules the ticks; each tick runs once.
// ---------------------------------------------------------------------------------------

async fn periodic_ticks_run_once_however_many_processes_schedule_them(backend: Backend) {
    let (url, queue) = setup(backend, "faults_periodic").await;
    let pool = &queue;
    let args = ["--periodic", "--maintenance-ms", "200"];
    let mut workers = [
        Proc::worker("worker-a", &url, &args),
        Proc::worker("worker-b", &url, &args),
    ];
    wait_for("three ticks done", Duration::from_secs(20), || async {
        (done_effects(pool).await >= 3).then_some(())
    })
    .await;
    for w in &mut workers {
        w.terminate().await;
    }
    let effects = effect_rows(pool).await;
    let ticks = queue
        .list(&JobFilter::default().kind("tick"), None, 1_000)
        .await
        .expect("list the ticks")
        .jobs;
    for tick in &ticks {
        let key = tick.task_key.clone();
        assert!(key.starts_with("tick@"), "{key}");
        let runs = effects.iter().filter(|e| e.task_key == key).count();
        assert!(runs <= 1, "tick {key} ran {runs} times");
    }
    assert!(effects.iter().all(|e| e.task_key.starts_with("tick@")));
    let mut keys: Vec<&str> = effects.iter().map(|e| e.task_key.as_str()).collect();
    keys.sort_unstable();
    keys.dedup();
    assert_eq!(keys.len(), effects.len(), "each tick once");
    println!(
        "periodic: {} tick job(s) from two schedulers, {} run",
        ticks.len(),
        effects.len()
    );
}

#[test]
fn urls_take_another_user() {
    assert_eq!(
        url_as("mysql://root@127.0.0.1:3306/db", "w", "p"),
        "mysql://w:p@127.0.0.1:3306/db"
    );
    assert_eq!(
        url_as("mysql://a:b@h/db?x=1", "w", "p"),
        "mysql://w:p@h/db?x=1"
    );
    assert_eq!(url_as("mysql://h:1/db", "w", "p"), "mysql://w:p@h:1/db");
}

on_every_backend!(
    a_killed_worker_s_jobs_come_back_after_one_lease,
    duplicate_enqueues_leave_one_job_and_one_side_effect,
    a_paused_worker_that_wakes_after_its_lease_changes_nothing,
    workers_ride_out_a_database_restart,
    ten_thousand_jobs_over_four_processes_run_exactly_once,
    periodic_ticks_run_once_however_many_processes_schedule_them,
);
