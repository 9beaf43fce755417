//! [`Queue`]: the handle to the job table that enqueues, inspects and hands work to workers.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use sqlx::mysql::{MySqlConnectOptions, MySqlPool, MySqlPoolOptions};
use sqlx::postgres::{PgConnectOptions, PgPool};
use tokio::sync::watch;

use crate::backend::{Backend, DatabasePool};

use crate::error::{Error, Result};
use crate::metrics::Metrics;
use crate::store::connect::LeaseOptions;
use crate::store::{server, Db, DbErrorKind, LeaseConnect, ServerInfo, Store};

/// Settings of a [`Queue`]. Every field has a documented default.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct QueueConfig {
    /// Connections in the pool [`Queue::connect`] opens, for enqueues, claims, maintenance,
    /// the heartbeat and an idle worker's probe (on PostgreSQL: its listener, which holds one
    /// for the worker's life; see [`WorkerBuilder::listen_fallback`](crate::WorkerBuilder::listen_fallback)).
    /// Default 2. Each worker opens two more of
    /// its own for lease renewals and outcomes, so jobs that use this pool cannot starve
    /// them: a worker process at the defaults holds at most 4 connections, idle or draining.
    ///
    /// Raise it when the process does more on this pool than one worker's own work: jobs
    /// that use it ([`JobContext::complete_in`](crate::JobContext::complete_in), a
    /// `Data<MySqlPool>` of [`Queue::pool`]) need one connection each while they hold it,
    /// plus these 2 (a job that waits for a connection holds its slot meanwhile, and the
    /// claims and the heartbeat wait with it); a process that enqueues from many tasks at
    /// once (a web server) wants about as many as it has enqueues in flight. The deployment
    /// guide sizes a fleet's connections.
    pub max_connections: u32,
    /// How long to wait for a connection before an operation fails. Default 5 s. It is also
    /// how long a worker waits, while the server is unreachable, before it logs the outage
    /// and backs off (sqlx keeps trying to connect until then).
    pub acquire_timeout: Duration,
    /// Connections are closed and replaced after this long. Default 30 min.
    pub max_lifetime: Duration,
    /// The largest serialized payload accepted at enqueue, in bytes. Default 1 MiB.
    pub max_payload_bytes: usize,
    /// Refuse servers the queue cannot run on safely (see [`ServerInfo::check`]). Default
    /// true; turn off only for a server you have checked by hand.
    pub check_server: bool,
    /// Server-side prepared statements each connection of the pool keeps (least recently
    /// used ones are closed). Default 24. The server caps prepared statements across all
    /// clients (`max_prepared_stmt_count`, 16,382 by default), so a process holds at most
    /// `max_connections × statement_cache_capacity`, plus
    /// [`LEASE_STORE_STATEMENTS`](crate::Worker::LEASE_STORE_STATEMENTS) × 2 per worker it
    /// runs: 80 with the defaults and one worker. A queue warns at start-up when fewer than
    /// 20 more such processes fit under the server's cap.
    pub statement_cache_capacity: usize,
    /// How long the server lets a session of this pool sit idle inside a transaction before it
    /// ends the session and releases its locks. Default 30 s; `None` keeps the server's
    /// setting (none, by default). Without it, a client that dies or is cut off between a
    /// locking read and its commit (a host crash, a network partition) keeps up to a claim's
    /// worth of rows locked, and hidden from every claimer, for hours (until `wait_timeout` or
    /// TCP keepalive notices).
    ///
    /// On MariaDB it sets `idle_transaction_timeout`. MySQL has no such setting: there it sets
    /// `wait_timeout` (which also ends sessions idle outside a transaction) to this value but
    /// at least 5 min, and the pool closes its own idle connections after 4 min, before the
    /// server would. The bound on MySQL is therefore 5 min, or this value if it is longer.
    ///
    /// Applications that run their own transactions on [`Queue::pool`] are bound by it too:
    /// a transaction of this pool that waits longer than this between two statements loses
    /// its session, and its next statement fails.
    pub idle_transaction_timeout: Option<Duration>,
}

impl Default for QueueConfig {
    fn default() -> Self {
        QueueConfig {
            max_connections: 2,
            acquire_timeout: Duration::from_secs(5),
            max_lifetime: Duration::from_secs(30 * 60),
            max_payload_bytes: 1024 * 1024,
            check_server: true,
            statement_cache_capacity: 24,
            idle_transaction_timeout: Some(Duration::from_secs(30)),
        }
    }
}

impl QueueConfig {
    /// Sets [`QueueConfig::max_connections`].
    pub fn max_connections(mut self, n: u32) -> Self {
        self.max_connections = n;
        self
    }

    /// Sets [`QueueConfig::acquire_timeout`].
    pub fn acquire_timeout(mut self, d: Duration) -> Self {
        self.acquire_timeout = d;
        self
    }

    /// Sets [`QueueConfig::max_lifetime`].
    pub fn max_lifetime(mut self, d: Duration) -> Self {
        self.max_lifetime = d;
        self
    }

    /// Sets [`QueueConfig::max_payload_bytes`].
    pub fn max_payload_bytes(mut self, n: usize) -> Self {
        self.max_payload_bytes = n;
        self
    }

    /// Sets [`QueueConfig::check_server`].
    pub fn check_server(mut self, on: bool) -> Self {
        self.check_server = on;
        self
    }

    /// Sets [`QueueConfig::statement_cache_capacity`].
    pub fn statement_cache_capacity(mut self, n: usize) -> Self {
        self.statement_cache_capacity = n;
        self
    }

    /// Sets [`QueueConfig::idle_transaction_timeout`].
    pub fn idle_transaction_timeout(mut self, timeout: Option<Duration>) -> Self {
        self.idle_transaction_timeout = timeout;
        self
    }
}

/// Pool options for an application pool that a [`Queue`] shares, through
/// [`Queue::from_pool`], with the application's own queries: the session safety
/// [`Queue::connect`] gives its own pool, less what would change the application's
/// transactions.
///
/// What it sets, and why:
///
/// - a `ROLLBACK` before each connection is handed out, in place of sqlx's ping
///   (`test_before_acquire(false)`): a connection can come back to the pool inside a
///   transaction the driver does not know about (a future dropped between `BEGIN` and the
///   driver's bookkeeping), and the next user's autocommit statements, an enqueue among them,
///   would silently join it and be lost with it. The `ROLLBACK` costs the one round trip the
///   ping did, and fails as the ping would on a dead connection;
/// - a bound on how long a session may sit idle inside a transaction, 30 s (the default of
///   [`QueueConfig::idle_transaction_timeout`]): on MariaDB `idle_transaction_timeout`; on
///   MySQL, which has none, `wait_timeout` of 5 min (which ends any idle session), with the
///   pool closing its idle connections after 4 min, before the server does. Without it a
///   client that dies between a claim's locking read and its commit keeps those jobs locked
///   and out of every worker's reach until the server notices, which can take hours. It
///   binds the application's transactions too: one that waits longer than that between two
///   statements loses its session, and its next statement fails;
///
/// It does **not** set READ COMMITTED: the application's transactions keep the server's
/// level (REPEATABLE READ by default), and a queue made with [`Queue::from_pool`] sets READ
/// COMMITTED on each transaction of its own instead (one statement more per claim). Nor can
/// it bound the statement cache, which belongs to the connect options: set
/// [`MySqlConnectOptions::statement_cache_capacity`] there (sqlx keeps 100 prepared
/// statements per connection by default; the server caps them across all clients, see
/// [`QueueConfig::statement_cache_capacity`]).
///
/// Set the pool's size and timeouts on the result as usual. Its `after_connect` and
/// `before_acquire` hooks carry the settings above: replacing them drops those settings.
///
/// ```no_run
/// # extern crate jobqueue_runtime as jobqueue;
/// use jobqueue::Queue;
/// use sqlx::mysql::MySqlConnectOptions;
///
/// # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
/// let options: MySqlConnectOptions = "mysql://app:secret@127.0.0.1/shop".parse()?;
/// let pool = jobqueue::pool_options()
///     .max_connections(20)
///     .connect_with(options.statement_cache_capacity(24))
///     .await?;
/// let queue = Queue::from_pool(pool.clone()).await?;
/// // `pool` serves the application's own queries and transactions as before.
/// # Ok(()) }
/// ```
pub fn pool_options() -> MySqlPoolOptions {
    let idle = QueueConfig::default()
        .idle_transaction_timeout
        .map(|d| d.as_secs().max(1));
    crate::store::connect::app_pool_options(idle)
}

/// [`pool_options`] for PostgreSQL: pool options for an application `PgPool` that a
/// [`Queue`] shares through [`Queue::from_pool`]. Each session bounds how long it may sit
/// idle inside a transaction (`idle_in_transaction_session_timeout`, 30 s: the default of
/// [`QueueConfig::idle_transaction_timeout`]), so that a client that dies between a claim's
/// locking read and its commit does not keep those jobs locked; it binds the application's
/// transactions too. The sessions keep their isolation level: the queue's transactions set
/// READ COMMITTED each. sqlx's ping before each use stays (PostgreSQL's driver knows when a
/// dropped future left a transaction open and rolls it back).
///
/// Set the pool's size and timeouts on the result as usual; replacing its `after_connect`
/// hook drops the bound.
///
/// ```no_run
/// # extern crate jobqueue_runtime as jobqueue;
/// use jobqueue::Queue;
///
/// # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
/// let pool = jobqueue::postgres_pool_options()
///     .max_connections(20)
///     .connect("postgres://app:secret@127.0.0.1/shop")
///     .await?;
/// let queue = Queue::from_pool(pool.clone()).await?;
/// # Ok(()) }
/// ```
pub fn postgres_pool_options() -> sqlx::postgres::PgPoolOptions {
    let idle_ms = QueueConfig::default()
        .idle_transaction_timeout
        .map(|d| d.as_millis().clamp(1, i32::MAX as u128));
    let options = sqlx::postgres::PgPoolOptions::new();
    match idle_ms {
        None => options,
        Some(ms) => options.after_connect(move |conn, _meta| {
            Box::pin(async move {
                let set = format!("SET idle_in_transaction_session_timeout = {ms}");
                sqlx::Executor::execute(&mut *conn, set.as_str()).await?;
                Ok(())
            })
        }),
    }
}

/// The job table of one database, and everything done with it.
///
/// Cheap to clone: clones share the pool, the metrics and the in-process wake-up that lets
/// a local [`Worker`](crate::Worker) start a job the moment this process enqueues it.
#[derive(Clone)]
pub struct Queue {
    pub(crate) inner: Arc<QueueInner>,
}

pub(crate) struct QueueInner {
    pub(crate) pool: DatabasePool,
    pub(crate) config: QueueConfig,
    /// True when the pool is the caller's: its sessions may not be at READ COMMITTED, so
    /// every queue transaction sets the level itself (the queue's own pools set it once per
    /// session: an `after_connect` statement on MySQL, a startup parameter on PostgreSQL).
    pub(crate) set_isolation: bool,
    pub(crate) wake: watch::Sender<u64>,
    /// Bumped each time a worker of this process has recorded how jobs ended, so that
    /// [`Queue::wait`] looks at once instead of at its next poll.
    pub(crate) ended: watch::Sender<u64>,
    pub(crate) metrics: Arc<Metrics>,
    pub(crate) server: ServerInfo,
}

impl fmt::Debug for Queue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Queue")
            .field("server", &self.inner.server.version)
            .field("config", &self.inner.config)
            .finish_non_exhaustive()
    }
}

impl Queue {
    /// Connects to `url` (`mysql://user:password@host:port/database`) with the default
    /// [`QueueConfig`], and checks that the server is safe to run a queue on.
    ///
    /// The queue opens a pool of its own, set up for the queue: every session runs at READ
    /// COMMITTED, each connection gets a `ROLLBACK` before use, a bound on idle transactions
    /// ([`QueueConfig::idle_transaction_timeout`]) and a small statement cache. [`Queue::pool`]
    /// is that pool: an application that runs its own transactions on it runs them at READ
    /// COMMITTED too. To share one pool with the application and keep its isolation level,
    /// build it with [`pool_options`] and pass it to [`Queue::from_pool`].
    pub async fn connect(url: &str) -> Result<Queue> {
        Self::connect_with(url, QueueConfig::default()).await
    }

    /// Connects with explicit settings.
    pub async fn connect_with(url: &str, config: QueueConfig) -> Result<Queue> {
        match Backend::of_url(url) {
            Some(Backend::MySql) => {}
            Some(Backend::Postgres) => return Self::connect_postgres(url, config).await,
            None => {
                return Err(Error::InvalidUrl {
                    url: redact_url(url),
                    reason: "the scheme must be mysql://, mariadb://, postgres:// or postgresql://"
                        .into(),
                })
            }
        }
        let options: MySqlConnectOptions =
            url.parse().map_err(|e: sqlx::Error| Error::InvalidUrl {
                url: redact_url(url),
                reason: e.to_string(),
            })?;
        let options = options.statement_cache_capacity(config.statement_cache_capacity);
        let idle_secs = config
            .idle_transaction_timeout
            .map(|d| d.as_secs() + u64::from(d.subsec_nanos() > 0))
            .map(|s| s.max(1));
        let probe = options.clone();
        let pool = crate::store::connect::connect_pool(
            options,
            config.max_connections,
            config.acquire_timeout,
            config.max_lifetime,
            idle_secs,
        );
        let pool = match pool.await {
            Ok(pool) => pool,
            Err(e) => return Err(connect_error(e, url, probe).await),
        };
        Self::build(pool.into(), config, false).await
    }

    /// [`Queue::connect_with`] for a PostgreSQL URL: a pool of the queue's own whose sessions
    /// end a transaction left idle for [`QueueConfig::idle_transaction_timeout`]
    /// (`idle_in_transaction_session_timeout`).
    async fn connect_postgres(url: &str, config: QueueConfig) -> Result<Queue> {
        let options: PgConnectOptions =
            url.parse().map_err(|e: sqlx::Error| Error::InvalidUrl {
                url: redact_url(url),
                reason: e.to_string(),
            })?;
        let idle_ms = config
            .idle_transaction_timeout
            .map(|d| d.as_millis().clamp(1, i32::MAX as u128) as u64);
        let probe = options.clone();
        let pool = crate::store::connect::connect_postgres_pool(
            options,
            config.max_connections,
            config.acquire_timeout,
            config.max_lifetime,
            idle_ms,
        )
        .await;
        let pool = match pool {
            Ok(pool) => pool,
            Err(e) => return Err(postgres_connect_error(e, url, probe).await),
        };
        Self::build(pool.into(), config, false).await
    }

    /// Wraps a pool the application already has, to share it between the application's
    /// queries and the queue. Build it with [`pool_options`] ([`postgres_pool_options`] for
    /// a `PgPool`) to get the session safety
    /// [`Queue::connect`] gives its own pool: a `ROLLBACK` before each use, so that no
    /// connection is handed out inside a transaction left open by a dropped future, and a
    /// bound on transactions left idle (see [`QueueConfig::idle_transaction_timeout`]).
    ///
    /// The pool's sessions keep their own isolation level (REPEATABLE READ, the server's
    /// default, unless the application sets another): the queue sets READ COMMITTED on each
    /// transaction of its own (one statement more per claim than with [`Queue::connect`]),
    /// and the application's transactions are left as they are. Its statement cache is the
    /// pool's (sqlx's default is 100 per connection; see
    /// [`QueueConfig::statement_cache_capacity`]).
    ///
    /// A `PgPool` works the same way: the queue's transactions say READ COMMITTED each, and
    /// the application's keep their level.
    pub async fn from_pool(pool: impl Into<DatabasePool>) -> Result<Queue> {
        Self::build(pool.into(), QueueConfig::default(), true).await
    }

    /// [`Queue::from_pool`] with explicit settings (the pool settings in `config` are unused).
    pub async fn from_pool_with(
        pool: impl Into<DatabasePool>,
        config: QueueConfig,
    ) -> Result<Queue> {
        Self::build(pool.into(), config, true).await
    }

    async fn build(pool: DatabasePool, config: QueueConfig, set_isolation: bool) -> Result<Queue> {
        let pool = match pool {
            DatabasePool::MySql(pool) => pool,
            DatabasePool::Postgres(pool) => {
                return Self::build_postgres(pool, config, set_isolation).await
            }
        };
        let server = server::inspect(&pool).await?;
        if config.check_server {
            server.check()?;
        }
        // A pool of the caller's keeps sqlx's default cache of 100 statements per connection.
        let per_connection = if set_isolation {
            SQLX_DEFAULT_STATEMENT_CACHE
        } else {
            config.statement_cache_capacity
        };
        let per_process = u64::from(pool.options().get_max_connections()) * per_connection as u64
            + 2 * crate::store::LEASE_STORE_STATEMENTS as u64;
        server.warn_on_statement_headroom(per_process);
        // Connecting to a database that still needs `migrate` is the normal first step of
        // migrating it, so a missing or old schema is only logged here (a warning would
        // precede every `jobqueue migrate`); workers refuse it at start, and
        // `Queue::check_schema` refuses it for anyone who asks.
        let pool = DatabasePool::MySql(pool);
        match crate::store::migrate::state(&pool).await {
            Ok(state) => {
                if let Some(e) = state.error() {
                    tracing::info!("{e}");
                }
            }
            Err(e) => schema_unreadable(&e),
        }
        Ok(Self::assemble(pool, config, set_isolation, server))
    }

    /// A queue on a PostgreSQL pool: the server checked, the schema's state logged.
    /// `app_pool`: the pool is the caller's (kept as `set_isolation`: each transaction of the
    /// store then sets READ COMMITTED itself).
    async fn build_postgres(pool: PgPool, config: QueueConfig, app_pool: bool) -> Result<Queue> {
        let server = server::inspect_postgres(&pool).await?;
        if config.check_server {
            server.check()?;
        }
        let pool = DatabasePool::Postgres(pool);
        match crate::store::migrate::state(&pool).await {
            Ok(state) => {
                if let Some(e) = state.error() {
                    tracing::info!("{e}");
                }
            }
            Err(e) => schema_unreadable(&e),
        }
        Ok(Self::assemble(pool, config, app_pool, server))
    }

    fn assemble(
        pool: DatabasePool,
        config: QueueConfig,
        set_isolation: bool,
        server: ServerInfo,
    ) -> Queue {
        let (wake, _) = watch::channel(0);
        let (ended, _) = watch::channel(0);
        Queue {
            inner: Arc::new(QueueInner {
                pool,
                config,
                set_isolation,
                wake,
                ended,
                metrics: Arc::new(Metrics::default()),
                server,
            }),
        }
    }

    /// The store's view of this queue's database.
    pub(crate) fn db(&self) -> Db {
        match &self.inner.pool {
            DatabasePool::MySql(pool) => Db::MySql {
                pool: pool.clone(),
                set_isolation: self.inner.set_isolation,
            },
            DatabasePool::Postgres(pool) => Db::Postgres {
                pool: pool.clone(),
                set_isolation: self.inner.set_isolation,
            },
        }
    }

    /// Whether the pool is the application's ([`Queue::from_pool`]) rather than the queue's own.
    pub(crate) fn app_pool(&self) -> bool {
        self.inner.set_isolation
    }

    /// Which database the queue is on.
    pub fn backend(&self) -> Backend {
        self.inner.pool.backend()
    }

    /// Applies the embedded migrations (creates or upgrades `job_queue`). Needs a user with
    /// `CREATE`, `ALTER`, `INDEX` and `DROP` on the database; workers need only DML.
    ///
    /// jobqueue keeps its own history in `job_queue_migrations`, so it shares a database
    /// with an application's sqlx migrator (or any other tool) in either order. A database
    /// migrated by jobqueue 0.1 (history in `_sqlx_migrations`) is adopted without running
    /// its DDL again. Any number of processes may call this at once: they take turns on a
    /// named lock, and each migration is applied once.
    ///
    /// On a schema that is already up to date it only reads `job_queue_migrations` (no lock,
    /// no DDL), so every replica may call it at start-up as a user with DML rights and
    /// `SELECT` on that table; with a migration pending, such a user gets
    /// [`Error::MigratePermission`].
    pub async fn migrate(&self) -> Result<()> {
        crate::store::migrate::run(&self.inner.pool).await
    }

    /// Checks that the database has every migration this library needs, and says how to
    /// fix it if not ([`Error::Schema`]). If another process is migrating the database right
    /// now, waits for it first (up to two minutes). Workers call it when they start;
    /// producers may call it after [`Queue::connect`] to fail fast.
    pub async fn check_schema(&self) -> Result<()> {
        crate::store::migrate::wait_for_migration(&self.inner.pool).await?;
        match crate::store::migrate::state(&self.inner.pool).await {
            Ok(state) => state.error().map_or(Ok(()), Err),
            // A user granted rights on `job_queue` alone can still run jobs.
            Err(e) if e.database_class() == Some(DbErrorKind::TableDenied) => {
                schema_unreadable(&e);
                Ok(())
            }
            Err(e) => Err(e),
        }
    }

    /// The SQL of every embedded migration, with the statements that record each one in
    /// `job_queue_migrations`: what `jobqueue migrate --print-sql` prints, for teams that
    /// apply DDL with their own tool (Flyway, Liquibase, Atlas, gh-ost...).
    pub fn migration_sql() -> String {
        crate::store::migrate::script(Backend::MySql)
    }

    /// [`Queue::migration_sql`] for `backend`: the PostgreSQL schema for
    /// [`Backend::Postgres`].
    pub fn migration_sql_for(backend: Backend) -> String {
        crate::store::migrate::script(backend)
    }

    /// The store behind this queue: the protocol's steps (claim, renew, complete...), for
    /// this workspace's protocol tests. Not a stable API.
    #[doc(hidden)]
    pub fn store(&self) -> Store {
        Store::new(self.db(), self.inner.metrics.clone(), None)
    }

    /// A store on this queue's pool for a worker: its own counters, and every call bounded
    /// by `call_timeout`.
    pub(crate) fn worker_store(&self, metrics: Arc<Metrics>, call_timeout: Duration) -> Store {
        Store::new(self.db(), metrics, Some(call_timeout))
    }

    /// What a worker's lease store connects with: this pool's connect options, acquire
    /// timeout and connection lifetime.
    pub(crate) fn lease_connect_options(&self) -> LeaseConnect {
        LeaseConnect {
            options: match &self.inner.pool {
                DatabasePool::MySql(pool) => LeaseOptions::MySql((*pool.connect_options()).clone()),
                DatabasePool::Postgres(pool) => {
                    LeaseOptions::Postgres((*pool.connect_options()).clone())
                }
            },
            acquire_timeout: self.inner.config.acquire_timeout,
            max_lifetime: self.inner.config.max_lifetime,
        }
    }

    /// Subscribes to the in-process wake-ups sent by enqueues, retries and resumes.
    pub(crate) fn subscribe_wake(&self) -> watch::Receiver<u64> {
        self.inner.wake.subscribe()
    }

    /// Tells this process's [`Queue::wait`] calls that jobs have ended.
    pub(crate) fn jobs_ended(&self) {
        self.inner.ended.send_modify(|n| *n = n.wrapping_add(1));
    }

    /// Subscribes to [`Queue::jobs_ended`].
    pub(crate) fn subscribe_ended(&self) -> watch::Receiver<u64> {
        self.inner.ended.subscribe()
    }

    /// The embedded migrations not yet applied, as (version, description).
    pub async fn pending_migrations(&self) -> Result<Vec<(i64, String)>> {
        crate::store::migrate::pending(&self.inner.pool).await
    }

    /// The pool the queue uses: the application's, with [`Queue::from_pool`]; with
    /// [`Queue::connect`], the queue's own, whose sessions run at READ COMMITTED.
    /// [`DatabasePool::mysql`] and [`DatabasePool::postgres`] give the typed pool.
    pub fn pool(&self) -> &DatabasePool {
        &self.inner.pool
    }

    /// The queue's pool if it is on MySQL or MariaDB (see [`Queue::pool`]).
    pub fn mysql_pool(&self) -> Option<&MySqlPool> {
        self.inner.pool.mysql()
    }

    /// The queue's pool if it is on PostgreSQL (see [`Queue::pool`]).
    pub fn postgres_pool(&self) -> Option<&PgPool> {
        self.inner.pool.postgres()
    }

    /// What the server said about itself when the queue connected.
    pub fn server_info(&self) -> &ServerInfo {
        &self.inner.server
    }

    /// Enqueue-side counters (enqueued, duplicates) and the transaction conflicts retried by
    /// operations on this handle.
    pub fn metrics(&self) -> crate::MetricsSnapshot {
        self.inner.metrics.snapshot()
    }

    /// Wakes this process's workers now, e.g. after committing a transaction that enqueued
    /// jobs with [`Queue::enqueue_in`] (they would otherwise find them at their next poll).
    pub fn wake_workers(&self) {
        self.inner.wake.send_modify(|n| *n = n.wrapping_add(1));
    }
}

/// A connection error, with the URL option that fixes it where TLS is the cause.
async fn connect_error(e: Error, url: &str, options: MySqlConnectOptions) -> Error {
    use sqlx::ConnectOptions;
    let url = redact_url(url);
    let class = e.database_class();
    let Error::Database(e) = e else {
        return e;
    };
    // MySQL names the cause; MariaDB answers a connection without TLS to a server with
    // require_secure_transport=ON with "access denied", like a wrong password. Telling the
    // two apart takes one more try, with TLS.
    let insecure = class == Some(DbErrorKind::TlsRequired)
        || (class == Some(DbErrorKind::LoginDenied)
            && !requires_tls(&url)
            && options
                .ssl_mode(sqlx::mysql::MySqlSslMode::Required)
                .connect()
                .await
                .is_ok());
    if insecure {
        return Error::TlsRequired {
            url,
            source: e,
            fix: MYSQL_TLS_REQUIRED_FIX,
        };
    }
    if tls_failed(&e) {
        return Error::TlsFailed {
            url,
            source: e,
            fix: MYSQL_TLS_FAILED_FIX,
        };
    }
    Error::Database(e)
}

const MYSQL_TLS_REQUIRED_FIX: &str = "add `ssl-mode=VERIFY_CA&ssl-ca=/path/to/ca.pem` to the URL \
     (the CA that signed the server's certificate), or `ssl-mode=REQUIRED` to encrypt without \
     checking the certificate";
const MYSQL_TLS_FAILED_FIX: &str = "with `ssl-mode=VERIFY_CA` or `VERIFY_IDENTITY`, `ssl-ca` must \
     name the CA that signed the server's certificate (and VERIFY_IDENTITY needs the URL's host \
     in the certificate)";
const POSTGRES_TLS_REQUIRED_FIX: &str = "add `sslmode=verify-full&sslrootcert=/path/to/ca.pem` to \
     the URL (the CA that signed the server's certificate), or `sslmode=require` to encrypt \
     without checking the certificate";
const POSTGRES_TLS_FAILED_FIX: &str = "with `sslmode=verify-ca` or `verify-full`, `sslrootcert` \
     must name the CA that signed the server's certificate (and verify-full needs the URL's host \
     in the certificate)";

/// Whether `e` is a TLS handshake that failed (rustls reports a certificate it does not
/// trust as an I/O error).
fn tls_failed(e: &sqlx::Error) -> bool {
    matches!(e, sqlx::Error::Tls(_))
        || (matches!(e, sqlx::Error::Io(_)) && e.to_string().contains("certificate"))
}

/// A PostgreSQL connection error, with the URL option that fixes it where TLS is the cause.
/// A server whose `pg_hba.conf` admits only TLS connections refuses one without it with "no
/// pg_hba.conf entry ... no encryption" ("SSL off" before 14), which it also says of a
/// connection no line admits at all (a wrong user or database): that is TLS's doing only
/// when the URL asked for no TLS (`sslmode=disable` or `allow`; under the default `prefer` a
/// server that offers TLS gets it) and a second try with TLS gets past `pg_hba.conf`.
async fn postgres_connect_error(e: Error, url: &str, options: PgConnectOptions) -> Error {
    use sqlx::ConnectOptions;
    let Error::Database(e) = e else {
        return e;
    };
    let url = redact_url(url);
    let refused_plain = matches!(&e, sqlx::Error::Database(d)
        if d.message().contains("no encryption") || d.message().contains("SSL off"));
    let asked_plain = {
        let lower = url.to_ascii_lowercase();
        lower.contains("sslmode=disable") || lower.contains("sslmode=allow")
    };
    if refused_plain
        && asked_plain
        && options
            .ssl_mode(sqlx::postgres::PgSslMode::Require)
            .connect()
            .await
            .is_ok()
    {
        return Error::TlsRequired {
            url,
            source: e,
            fix: POSTGRES_TLS_REQUIRED_FIX,
        };
    }
    if tls_failed(&e) {
        return Error::TlsFailed {
            url,
            source: e,
            fix: POSTGRES_TLS_FAILED_FIX,
        };
    }
    Error::Database(e)
}

/// Whether the URL asks for TLS already (`ssl-mode` REQUIRED, VERIFY_CA, VERIFY_IDENTITY).
fn requires_tls(url: &str) -> bool {
    let url = url.to_ascii_lowercase().replace('_', "-");
    [
        "ssl-mode=required",
        "ssl-mode=verify-ca",
        "ssl-mode=verify-identity",
    ]
    .iter()
    .any(|mode| url.contains(mode))
}

fn schema_unreadable(e: &Error) {
    if e.database_class() == Some(DbErrorKind::TableDenied) {
        tracing::info!(
            "this user may not read `job_queue_migrations`, so the schema version is not checked; grant it SELECT on that table"
        );
    } else {
        tracing::warn!(error = %e, "cannot read the jobqueue schema version");
    }
}

/// The statement cache of a sqlx connection whose options do not set one.
const SQLX_DEFAULT_STATEMENT_CACHE: usize = 100;

/// `url` with its password replaced by `***`, for messages and logs.
///
/// Use it wherever a database URL is shown: the runtime's own errors do (a URL that does
/// not parse is named this way), and so does the `jobqueue` command-line tool. Only the
/// password of the `user:password@` part changes; a URL without one, or a string that is
/// not a URL, comes back as it is.
///
/// A password typed into a URL without percent-encoding may hold any character, `@`, `/`,
/// `?` and `#` included, so the password is taken to run from the first `:` after the user
/// name to the *last* `@` of the string. When a query or fragment holds an `@` too, more than
/// the password is hidden: the result can show less than it could, but never a password.
///
/// ```
/// # mod jobqueue { pub mod admin { pub use jobqueue_runtime::redact_url; } }
/// assert_eq!(
///     jobqueue::admin::redact_url("mysql://app:s3cr3t@db:3306/jobs"),
///     "mysql://app:***@db:3306/jobs"
/// );
/// assert_eq!(
///     jobqueue::admin::redact_url("mysql://app:pa/ss@w?rd@db/jobs"),
///     "mysql://app:***@db/jobs"
/// );
/// assert_eq!(jobqueue::admin::redact_url("mysql://root@db/jobs"), "mysql://root@db/jobs");
/// ```
pub fn redact_url(url: &str) -> String {
    // The user information starts after the scheme, or at the start of a string that lacks
    // one (`app:secret@db/jobs` is shown the same care).
    let start = url.find("://").map_or(0, |i| i + 3);
    let rest = &url[start..];
    let Some(at) = rest.rfind('@') else {
        return url.to_owned();
    };
    match rest[..at].find(':') {
        Some(colon) => format!("{}{}:***{}", &url[..start], &rest[..colon], &rest[at..]),
        None => url.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn passwords_are_redacted() {
        assert_eq!(
            redact_url("mysql://app:s3cr3t@db:3306/jobs"),
            "mysql://app:***@db:3306/jobs"
        );
        assert_eq!(redact_url("mysql://root@db/jobs"), "mysql://root@db/jobs");
        assert_eq!(redact_url("not a url"), "not a url");
        assert_eq!(
            redact_url("mysql://app:pa/ss@db/jobs"),
            "mysql://app:***@db/jobs"
        );
        assert_eq!(redact_url("app:pa?ss@db/jobs"), "app:***@db/jobs");
        assert_eq!(
            redact_url("mysql://u@corp:p@ss@db"),
            "mysql://u@corp:***@db"
        );
    }
}
