//! Shared helpers of the integration tests in `tests/tests/`.
//!
//! Every test gets its own database on the shared test server (see
//! `jobqueue::testing::TestServer`), so tests run in parallel without seeing each other's
//! jobs.
//!
//! Besides databases, it holds the plumbing the in-process worker tests (`worker.rs`,
//! `scheduling.rs`, `worker_shutdown.rs`, ...) share: an `effects` table that jobs record their
//! side effects in ([`fresh_queue_with_effects`], [`record_effect_in`]), reached through
//! the worker's shared state ([`Effects`]) as an application's jobs reach its pool, a
//! [`Mailbox`] from a test's jobs to the test, starting and stopping a [`Worker`]
//! ([`start`], [`stop`]), and waiting for a job's status ([`wait_status`]).

use std::fmt;
use std::future::Future;
use std::io::Write;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use jobqueue::admin::JobRecord;
use jobqueue::testing::{TestDatabase, TestServer};
use jobqueue::{JobContext, JobError, JobStatus, Queue, Worker, WorkerBuilder, WorkerHandle};
use sqlx::mysql::{MySqlPool, MySqlPoolOptions, MySqlRow};
use sqlx::postgres::{PgPool, PgPoolOptions};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

mod backends;
pub use backends::{
    fresh_queue_on, lock_job, lock_rows, numbered, on, plain_database_url, slot, sql_exec, sql_i64,
    sql_text, Arg, RowLocks,
};
pub use jobqueue::Backend;

/// The test server of this process (started on first use).
pub fn server() -> &'static TestServer {
    TestServer::shared().unwrap_or_else(|e| panic!("{e}"))
}

/// A URL of a new, empty database on the shared server ([`TestDatabase::empty`], kept: it
/// goes away with the server). A test that wants it dropped when it ends holds a
/// [`TestDatabase`] itself.
pub async fn fresh_database(prefix: &str) -> String {
    TestDatabase::empty(prefix)
        .await
        .unwrap_or_else(|e| panic!("cannot create a test database: {e}"))
        .keep()
}

/// The URL of the database `pool` is connected to, on the test server: the server's URL
/// with its database part, if it has one (`JOBQUEUE_TEST_DATABASE_URL` may name one, as in
/// `mysql://root@127.0.0.1:3306/test`), replaced by the pool's, and without options. For a
/// second pool on a test's database, as another node would have.
pub async fn database_url(pool: &MySqlPool) -> String {
    let name: String = sqlx::query_scalar("SELECT CAST(DATABASE() AS CHAR)")
        .fetch_one(pool)
        .await
        .expect("the database name");
    with_database(server().url(), &name)
}

/// `url` with its database part replaced by `name`, and without options.
pub(crate) fn with_database(url: &str, name: &str) -> String {
    let (scheme, rest) = url.split_once("://").expect("a URL");
    let authority = rest.split(['/', '?']).next().expect("an authority");
    format!("{scheme}://{authority}/{name}")
}

/// A queue on the database at `url`, migrated.
pub async fn migrated_queue(url: &str) -> Queue {
    // As TestDatabase's: room for the test's own reads beside its workers.
    let config =
        jobqueue::QueueConfig::default().max_connections(jobqueue::testing::TEST_POOL_CONNECTIONS);
    let queue = Queue::connect_with(url, config).await.expect("connect");
    queue.migrate().await.expect("migrate");
    queue
}

/// A queue on a new database, migrated ([`TestDatabase::new`], kept).
pub async fn fresh_queue(prefix: &str) -> Queue {
    let db = TestDatabase::new(prefix)
        .await
        .unwrap_or_else(|e| panic!("cannot create a test database: {e}"));
    let queue = db.queue().clone();
    db.keep();
    queue
}

/// Logs to the test's output (shown on failure), once per process.
pub fn init_tracing() {
    let _ = tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| "warn,jobqueue_runtime=info".into()),
        )
        .with_test_writer()
        .try_init();
}

/// Polls `check` every 25 ms until it returns `Some`, or panics after `timeout` naming
/// `what`. For waiting on database state, which has no push notification; each poll is a
/// query. See [`wait_for_every`] for what the time-out covers.
pub async fn wait_for<T, F, Fut>(what: &str, timeout: Duration, check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    wait_for_every(what, timeout, Duration::from_millis(25), check).await
}

/// Polls `check` until it returns `Some`, sleeping `every` between polls, or panics after
/// `timeout` naming `what`. The time-out covers the checks too: a check that hangs (a query
/// waiting on a lock) fails the wait at its deadline instead of holding it up.
///
/// Choose `every` for what is polled: InnoDB's `information_schema` tables (`INNODB_TRX`,
/// `INNODB_LOCKS`, `INNODB_LOCK_WAITS`) are served from a snapshot that the server refreshes
/// only once nobody has read it for 100 ms, so polling them more often than that sees the
/// first snapshot forever. Prefer live sources (`PROCESSLIST`, `SHOW GLOBAL STATUS`).
pub async fn wait_for_every<T, F, Fut>(
    what: &str,
    timeout: Duration,
    every: Duration,
    mut check: F,
) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let deadline = Instant::now() + timeout;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match tokio::time::timeout(left, check()).await {
            Ok(Some(v)) => return v,
            Ok(None) if Instant::now() < deadline => tokio::time::sleep(every).await,
            _ => panic!("timed out after {timeout:?} waiting for {what}"),
        }
    }
}

/// The server-wide status variable `name` (`SHOW GLOBAL STATUS`), such as the live
/// `Innodb_row_lock_current_waits` or the cumulative `Innodb_row_lock_waits`. These count
/// every session of the server: read them on a private server
/// (`jobqueue::testing::TestServer::start`) when other tests must not add to them.
pub async fn global_status(pool: &MySqlPool, name: &str) -> u64 {
    let row = sqlx::query("SHOW GLOBAL STATUS WHERE Variable_name = ?")
        .bind(name)
        .fetch_one(pool)
        .await
        .unwrap_or_else(|e| panic!("read the status variable {name}: {e}"));
    // The server sends the value as text or as bytes, depending on its version.
    let value: String = sqlx::Row::try_get::<String, _>(&row, 1)
        .or_else(|_| {
            sqlx::Row::try_get::<Vec<u8>, _>(&row, 1)
                .map(|b| String::from_utf8(b).expect("a status value in UTF-8"))
        })
        .unwrap_or_else(|e| panic!("the value of {name}: {e}"));
    value
        .parse()
        .unwrap_or_else(|e| panic!("{name} = {value:?} is not a count: {e}"))
}

/// Count of jobs in `status` (all queues), on either backend.
pub async fn count_status(queue: &Queue, status: JobStatus) -> i64 {
    sql_i64(
        queue,
        "SELECT COUNT(*) FROM job_queue WHERE status = ?",
        &[Arg::Text(status.as_str())],
    )
    .await
}

/// The one number `sql` selects (a `COUNT(*)`, say) on `pool`; panics with the statement if
/// it fails.
pub async fn count(pool: &MySqlPool, sql: &str) -> i64 {
    sqlx::query_scalar(sql)
        .fetch_one(pool)
        .await
        .unwrap_or_else(|e| panic!("{sql}: {e}"))
}

/// A text column of a raw row (EXPLAIN output and binary-collated columns come back as
/// bytes on some servers).
pub fn text_col(row: &MySqlRow, name: &str) -> Option<String> {
    match sqlx::Row::try_get::<Option<String>, _>(row, name) {
        Ok(s) => s,
        Err(_) => sqlx::Row::try_get::<Option<Vec<u8>>, _>(row, name)
            .unwrap_or_else(|e| panic!("column {name}: {e}"))
            .map(|b| String::from_utf8_lossy(&b).into_owned()),
    }
}

/// Job `id`'s row; panics if there is none.
pub async fn row(queue: &Queue, id: u64) -> JobRecord {
    queue
        .job(id)
        .await
        .expect("read job")
        .unwrap_or_else(|| panic!("job {id} does not exist"))
}

/// Waits until job `id` is in `status`, and returns its row.
pub async fn wait_status(
    queue: &Queue,
    id: u64,
    status: JobStatus,
    timeout: Duration,
) -> JobRecord {
    wait_for(&format!("job {id} to be {status}"), timeout, || async {
        let r = row(queue, id).await;
        (r.status == status).then_some(r)
    })
    .await
}

// ---------------------------------------------------------------------------------------
// Side effects of in-process jobs
// ---------------------------------------------------------------------------------------

/// A pool of `max` connections on `url` whose every session first runs `statement` (a
/// session setting a test needs, such as a short lock wait timeout).
pub async fn pool_with_session(url: &str, max: u32, statement: &'static str) -> MySqlPool {
    MySqlPoolOptions::new()
        .max_connections(max)
        .after_connect(move |conn, _meta| {
            Box::pin(async move {
                sqlx::Executor::execute(&mut *conn, statement).await?;
                Ok(())
            })
        })
        .connect(url)
        .await
        .expect("pool")
}

/// A queue on a new, migrated MySQL/MariaDB database with an `effects` table
/// ([`fresh_queue_with_effects_on`] for MySQL).
pub async fn fresh_queue_with_effects(prefix: &str) -> (Queue, Effects) {
    fresh_queue_with_effects_on(Backend::MySql, prefix).await
}

/// A queue on a new, migrated database of `backend` (with [`init_tracing`] done), and a
/// separate pool on the same database for the jobs' side effects, so that they do not compete
/// with the workers for connections. The database has an `effects` table:
///
/// - `seq`: an auto-increment sequence, the order the effects were recorded in;
/// - `task_key`, `attempt`: the job and the attempt that did it;
/// - `note`: what the job says about it;
/// - `started_at`: when, by the database's clock (`UTC_TIMESTAMP(6)` on MySQL,
///   `job_queue_now()` on PostgreSQL: the queue's own clocks), so that it compares with
///   `run_at` by the same clock that set it.
///
/// Jobs reach the pool as a `Data<Effects>` parameter, given to the worker with
/// `.data(effects.clone())` (see [`record_effect_in`]), as an application gives its jobs its
/// pool, so that "exactly once" is counted where a user would count it. A worker refuses to
/// build without it when a kind of its queues takes it, so in a test binary whose kinds
/// share a queue every worker gets one.
pub async fn fresh_queue_with_effects_on(backend: Backend, prefix: &str) -> (Queue, Effects) {
    init_tracing();
    let db = TestDatabase::new_on(backend, prefix)
        .await
        .unwrap_or_else(|e| panic!("cannot create a {backend} test database: {e}"));
    let queue = db.queue().clone();
    let url = db.keep();
    let effects = match backend {
        Backend::Postgres => {
            let pool = PgPoolOptions::new()
                .max_connections(5)
                .connect(&url)
                .await
                .expect("connect the effects pool");
            sqlx::query(
                "CREATE TABLE effects (\
                   seq BIGSERIAL PRIMARY KEY, \
                   task_key VARCHAR(255) NOT NULL, \
                   attempt INT NOT NULL, \
                   note VARCHAR(255) NOT NULL, \
                   started_at TIMESTAMP(6) NOT NULL)",
            )
            .execute(&pool)
            .await
            .expect("create effects");
            Effects::Postgres(pool)
        }
        _ => {
            let pool = MySqlPoolOptions::new()
                .max_connections(5)
                .connect(&url)
                .await
                .expect("connect the effects pool");
            sqlx::query(
                "CREATE TABLE effects (\
                   seq BIGINT NOT NULL AUTO_INCREMENT PRIMARY KEY, \
                   task_key VARCHAR(255) NOT NULL, \
                   attempt INT NOT NULL, \
                   note VARCHAR(255) NOT NULL, \
                   started_at DATETIME(6) NOT NULL)",
            )
            .execute(&pool)
            .await
            .expect("create effects");
            Effects::MySql(pool)
        }
    };
    (queue, effects)
}

/// The pool of the `effects` table of [`fresh_queue_with_effects_on`], as a job takes it from
/// its worker: a `Data<Effects>` parameter, given with `.data(effects.clone())`. (A type of
/// its own, so that it is not taken for the application's pool.)
#[derive(Clone, Debug)]
pub enum Effects {
    /// On MySQL/MariaDB.
    MySql(MySqlPool),
    /// On PostgreSQL.
    Postgres(PgPool),
}

impl Effects {
    /// The MySQL pool, for a MySQL-only test's own reads; panics on PostgreSQL.
    pub fn mysql(&self) -> &MySqlPool {
        match self {
            Effects::MySql(pool) => pool,
            Effects::Postgres(_) => panic!("a MySQL-only test given a PostgreSQL effects pool"),
        }
    }
}

impl Effects {
    /// A transaction of the effects pool, as a job opens one of its application's pool.
    pub async fn begin(&self) -> Result<EffectsTx<'static>, JobError> {
        Ok(match self {
            Effects::MySql(pool) => EffectsTx::MySql(pool.begin().await?),
            Effects::Postgres(pool) => EffectsTx::Postgres(pool.begin().await?),
        })
    }
}

/// A transaction of an [`Effects`] pool: where a job completes itself (`complete_in`) and
/// records its effect, both committed or rolled back together.
#[derive(Debug)]
pub enum EffectsTx<'c> {
    /// On MySQL/MariaDB.
    MySql(sqlx::Transaction<'c, sqlx::MySql>),
    /// On PostgreSQL.
    Postgres(sqlx::Transaction<'c, sqlx::Postgres>),
}

impl EffectsTx<'_> {
    /// `ctx.complete_in` on this transaction.
    pub async fn complete(&mut self, ctx: &JobContext) -> jobqueue::Result<()> {
        match self {
            EffectsTx::MySql(tx) => ctx.complete_in(tx).await,
            EffectsTx::Postgres(tx) => ctx.complete_in(tx).await,
        }
    }

    /// Records `note` in `effects`, inside this transaction.
    pub async fn effect(&mut self, ctx: &JobContext, note: &str) -> Result<(), JobError> {
        match self {
            EffectsTx::MySql(tx) => {
                sqlx::query(
                    "INSERT INTO effects (task_key, attempt, note, started_at) \
                     VALUES (?, ?, ?, UTC_TIMESTAMP(6))",
                )
                .bind(ctx.task_key())
                .bind(ctx.attempt())
                .bind(note)
                .execute(&mut **tx)
                .await?;
            }
            EffectsTx::Postgres(tx) => {
                sqlx::query(
                    "INSERT INTO effects (task_key, attempt, note, started_at) \
                     VALUES ($1, $2, $3, job_queue_now())",
                )
                .bind(ctx.task_key())
                .bind(ctx.attempt() as i32)
                .bind(note)
                .execute(&mut **tx)
                .await?;
            }
        }
        Ok(())
    }

    /// Commits.
    pub async fn commit(self) -> sqlx::Result<()> {
        match self {
            EffectsTx::MySql(tx) => tx.commit().await,
            EffectsTx::Postgres(tx) => tx.commit().await,
        }
    }

    /// Rolls back.
    pub async fn rollback(self) -> sqlx::Result<()> {
        match self {
            EffectsTx::MySql(tx) => tx.rollback().await,
            EffectsTx::Postgres(tx) => tx.rollback().await,
        }
    }
}

/// Records one side effect of a job in the `effects` table of [`fresh_queue_with_effects_on`],
/// through the pool the job was given (a `Data<Effects>` parameter), stamped with the
/// database's clock.
pub async fn record_effect_in(
    effects: &Effects,
    ctx: &JobContext,
    note: &str,
) -> Result<(), JobError> {
    match effects {
        Effects::Postgres(pool) => {
            sqlx::query(
                "INSERT INTO effects (task_key, attempt, note, started_at) \
                 VALUES ($1, $2, $3, job_queue_now())",
            )
            .bind(ctx.task_key())
            .bind(ctx.attempt() as i32)
            .bind(note)
            .execute(pool)
            .await?;
        }
        Effects::MySql(pool) => {
            sqlx::query(
                "INSERT INTO effects (task_key, attempt, note, started_at) \
                 VALUES (?, ?, ?, UTC_TIMESTAMP(6))",
            )
            .bind(ctx.task_key())
            .bind(ctx.attempt())
            .bind(note)
            .execute(pool)
            .await?;
        }
    }
    Ok(())
}

/// Every side effect recorded, as (task_key, attempt), ordered by key and attempt.
pub async fn effects(effects: &Effects) -> Vec<(String, i32)> {
    let sql = "SELECT task_key, attempt FROM effects ORDER BY task_key, attempt";
    match effects {
        Effects::Postgres(pool) => sqlx::query_as(sql).fetch_all(pool).await,
        Effects::MySql(pool) => sqlx::query_as(sql).fetch_all(pool).await,
    }
    .expect("read effects")
}

/// Every side effect recorded, as (task_key, attempt, note), in the order they were recorded.
pub async fn all_effects(effects: &Effects) -> Vec<(String, i32, String)> {
    let sql = "SELECT task_key, attempt, note FROM effects ORDER BY seq";
    match effects {
        Effects::Postgres(pool) => sqlx::query_as(sql).fetch_all(pool).await,
        Effects::MySql(pool) => sqlx::query_as(sql).fetch_all(pool).await,
    }
    .expect("read effects")
}

/// The side effects of `task_key` as (attempt, note), in the order they were recorded.
pub async fn effects_of(effects: &Effects, task_key: &str) -> Vec<(i32, String)> {
    let sql = "SELECT attempt, note FROM effects WHERE task_key = ? ORDER BY seq";
    match effects {
        Effects::Postgres(pool) => {
            sqlx::query_as(&numbered(sql))
                .bind(task_key)
                .fetch_all(pool)
                .await
        }
        Effects::MySql(pool) => sqlx::query_as(sql).bind(task_key).fetch_all(pool).await,
    }
    .expect("read effects")
}

/// The table the jobs of the `test-worker` process write their side effects to; the suite
/// creates it next to the queue.
/// No unique index: a duplicate side effect must be visible, not refused.
pub const WORKER_EFFECTS_TABLE: &str = "CREATE TABLE effects (
    seq      BIGINT UNSIGNED NOT NULL AUTO_INCREMENT PRIMARY KEY,
    task_key VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL,
    job_id   BIGINT UNSIGNED NOT NULL,
    attempt  INT UNSIGNED NOT NULL,
    pid      INT UNSIGNED NOT NULL,
    phase    VARCHAR(8) NOT NULL,
    at       DATETIME(6) NOT NULL,
    KEY effects_key (task_key)
) ENGINE = InnoDB";

/// [`WORKER_EFFECTS_TABLE`] on PostgreSQL (keys compared byte by byte, as MySQL's `utf8mb4_bin`).
pub const WORKER_EFFECTS_TABLE_POSTGRES: &str = "CREATE TABLE effects (
    seq      BIGSERIAL PRIMARY KEY,
    task_key VARCHAR(255) COLLATE \"C\" NOT NULL,
    job_id   BIGINT NOT NULL,
    attempt  INT NOT NULL,
    pid      INT NOT NULL,
    phase    VARCHAR(8) NOT NULL,
    at       TIMESTAMP(6) NOT NULL
)";

// ---------------------------------------------------------------------------------------
// Messages from jobs to their test
// ---------------------------------------------------------------------------------------

/// A channel from a test's jobs to the test. Jobs reach it through a `static`
/// (`static STARTED: Mailbox<JobContext> = Mailbox::new();`) and [`Mailbox::send`] what the
/// test waits for; the test [`Mailbox::open`]s it before its worker starts and
/// [`receive`]s from the receiver.
pub struct Mailbox<T>(Mutex<Option<mpsc::UnboundedSender<T>>>);

impl<T> Mailbox<T> {
    /// A mailbox nobody listens to yet: messages sent before [`Mailbox::open`] are dropped.
    pub const fn new() -> Self {
        Mailbox(Mutex::new(None))
    }

    /// Starts listening; messages sent from now on arrive at the receiver returned (which
    /// replaces any earlier one).
    pub fn open(&self) -> mpsc::UnboundedReceiver<T> {
        let (tx, rx) = mpsc::unbounded_channel();
        *self.0.lock().unwrap() = Some(tx);
        rx
    }

    /// Sends `value` to the test, if it listens.
    pub fn send(&self, value: T) {
        if let Some(tx) = &*self.0.lock().unwrap() {
            let _ = tx.send(value);
        }
    }
}

impl<T> Default for Mailbox<T> {
    fn default() -> Self {
        Mailbox::new()
    }
}

impl<T> fmt::Debug for Mailbox<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Mailbox").finish_non_exhaustive()
    }
}

/// The next message, or a panic naming `what` after `timeout`.
pub async fn receive<T>(rx: &mut mpsc::UnboundedReceiver<T>, what: &str, timeout: Duration) -> T {
    tokio::time::timeout(timeout, rx.recv())
        .await
        .unwrap_or_else(|_| panic!("timed out after {timeout:?} waiting for {what}"))
        .expect("mailbox open")
}

// ---------------------------------------------------------------------------------------
// In-process workers
// ---------------------------------------------------------------------------------------

/// The task a [`start`]ed worker runs on.
pub type WorkerTask = JoinHandle<jobqueue::Result<()>>;

/// A worker with quick polling (20 ms to 200 ms) and maintenance (every 100 ms), for tests
/// that wait on retries, promotions and reclaims rather than on timers.
pub fn quick_worker(queue: &Queue) -> WorkerBuilder {
    Worker::builder(queue.clone())
        .poll_interval(Duration::from_millis(20), Duration::from_millis(200))
        .maintenance_interval(Duration::from_millis(100))
}

/// Runs `worker` on its own task.
pub fn start(worker: Worker) -> (WorkerHandle, WorkerTask) {
    let handle = worker.handle();
    (handle, tokio::spawn(worker.run()))
}

/// Shuts a worker down and waits (up to 30 s) for it to return `Ok`.
pub async fn stop(handle: &WorkerHandle, task: WorkerTask) {
    handle.shutdown();
    tokio::time::timeout(Duration::from_secs(30), task)
        .await
        .expect("the worker stops")
        .expect("the worker task does not panic")
        .expect("the worker returns Ok");
}

// ---------------------------------------------------------------------------------------
// Logs
// ---------------------------------------------------------------------------------------

/// Log lines captured from `tracing`, for tests that assert what was logged.
#[derive(Clone, Default, Debug)]
pub struct LogCapture {
    lines: Arc<Mutex<Vec<u8>>>,
}

impl LogCapture {
    /// Everything captured so far.
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.lines.lock().unwrap()).into_owned()
    }

    /// Captured lines that contain every one of `parts`.
    pub fn lines_with(&self, parts: &[&str]) -> Vec<String> {
        self.text()
            .lines()
            .filter(|l| parts.iter().all(|p| l.contains(p)))
            .map(str::to_owned)
            .collect()
    }

    /// Captured lines at WARN or ERROR, except sqlx's reports that a statement took 1 s or
    /// more, or a pool acquire 2 s or more: a busy machine produces those whatever the code
    /// under test does, so they say nothing about it.
    pub fn warnings(&self) -> Vec<String> {
        self.text()
            .lines()
            .filter(|l| l.contains(" WARN ") || l.contains(" ERROR "))
            .filter(|l| {
                !(l.contains(" sqlx::query: slow statement")
                    || l.contains(" sqlx::pool::acquire: ")
                        && l.contains("time to acquire exceeded slow threshold"))
            })
            .map(str::to_owned)
            .collect()
    }

    /// Installs a subscriber capturing events at `filter` for the current thread; use it in
    /// a `current_thread` test so that every task logs through it.
    pub fn install(filter: &str) -> (LogCapture, tracing::subscriber::DefaultGuard) {
        let capture = LogCapture::default();
        let writer = capture.clone();
        let subscriber = tracing_subscriber::fmt()
            .with_env_filter(tracing_subscriber::EnvFilter::new(filter))
            .with_ansi(false)
            .with_writer(move || CaptureWriter(writer.lines.clone()))
            .finish();
        let guard = tracing::subscriber::set_default(subscriber);
        (capture, guard)
    }
}

struct CaptureWriter(Arc<Mutex<Vec<u8>>>);

impl Write for CaptureWriter {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}
