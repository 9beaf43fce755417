//! Connections: the pool of a queue and the lease store of a worker, with the session
//! settings every queue connection needs (READ COMMITTED, a bound on idle transactions, a
//! `ROLLBACK` before each use).

use std::sync::Arc;
use std::time::Duration;

use sqlx::mysql::{MySqlConnectOptions, MySqlPool, MySqlPoolOptions};
use sqlx::Executor;

use super::errors::{classify, DbErrorKind};
use super::{Store, LEASE_STORE_STATEMENTS};
use crate::metrics::Metrics;

/// The `wait_timeout` set on MySQL, which has no idle-transaction timeout, when
/// [`QueueConfig::idle_transaction_timeout`] is shorter.
const MYSQL_MIN_WAIT_TIMEOUT: Duration = Duration::from_secs(5 * 60);

/// How long a lease session may sit idle inside a transaction (MariaDB).
const LEASE_IDLE_TRANSACTION: Duration = Duration::from_secs(5);

/// How long a lease session may sit idle at all on MySQL, which cannot bound idle
/// transactions alone.
const LEASE_MYSQL_WAIT: Duration = Duration::from_secs(30);

/// How long an idle connection stays in the pool: below [`MYSQL_MIN_WAIT_TIMEOUT`], so that
/// the pool, not the server, closes idle connections.
const POOL_IDLE_TIMEOUT: Duration = Duration::from_secs(4 * 60);

/// How long an idle probe on a pool connection may take, like one on a connection of its
/// own (see `store/claim.rs`).
const PROBE_TIMEOUT: Duration = Duration::from_secs(5);

/// The connection a worker's idle probes read on: one of the queue's own pool, held while
/// the worker is idle and given back before each claim, or as soon as the pool has no other
/// connection to spare (the next probe then takes one only if one is idle, or skips its
/// slot), so that the probe counts in the pool's size instead of adding a connection and
/// never holds one that the application or the worker's other work waits for; or one of
/// its own outside the pool, on a pool of the application's ([`Queue::from_pool`](crate::Queue::from_pool)), which a
/// worker should not hold while it idles, and on a pool of one connection, which it would
/// take from the heartbeat and maintenance.
pub(crate) enum ProbeConn {
    Pooled(sqlx::pool::PoolConnection<sqlx::MySql>),
    Own(super::ProbeConnection),
}

impl std::fmt::Debug for ProbeConn {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            ProbeConn::Pooled(_) => "ProbeConn::Pooled",
            ProbeConn::Own(_) => "ProbeConn::Own",
        })
    }
}

/// The connect options of a queue's pool, for a worker's lease store.
#[derive(Debug, Clone)]
pub(crate) enum LeaseOptions {
    MySql(MySqlConnectOptions),
    Postgres(sqlx::postgres::PgConnectOptions),
}

/// The startup parameter that makes a PostgreSQL session's transactions READ COMMITTED (the
/// server's default, which `postgresql.conf` or the role may have changed), sent with the
/// connection instead of one `SET TRANSACTION` per transaction. The space is escaped: the
/// server splits its startup `options` at spaces.
fn pg_read_committed() -> (&'static str, String) {
    (
        "default_transaction_isolation",
        "read\\ committed".to_string(),
    )
}

/// What a worker's lease store connects with (see [`Store::lease_store`]).
#[derive(Debug, Clone)]
pub(crate) struct LeaseConnect {
    pub(crate) options: LeaseOptions,
    pub(crate) acquire_timeout: Duration,
    pub(crate) max_lifetime: Duration,
}

/// Opens a queue's pool on PostgreSQL. With `idle_ms`, the server ends a session that sits
/// idle that long inside a transaction (`idle_in_transaction_session_timeout`), so that a
/// client that died between a claim's lock and its commit does not keep those jobs locked.
pub(crate) async fn connect_postgres_pool(
    options: sqlx::postgres::PgConnectOptions,
    max_connections: u32,
    acquire_timeout: Duration,
    max_lifetime: Duration,
    idle_ms: Option<u64>,
) -> crate::Result<sqlx::PgPool> {
    let mut options = options
        .application_name("jobqueue")
        .options([pg_read_committed()]);
    if let Some(ms) = idle_ms {
        options = options.options([("idle_in_transaction_session_timeout", ms.to_string())]);
    }
    let pool = sqlx::postgres::PgPoolOptions::new()
        .max_connections(max_connections)
        .acquire_timeout(acquire_timeout)
        .max_lifetime(max_lifetime)
        .idle_timeout(POOL_IDLE_TIMEOUT)
        .connect_with(options)
        .await?;
    Ok(pool)
}

/// Opens a queue's pool. Every session runs at READ COMMITTED, and with `idle_secs` the
/// server ends a session that sits idle that long inside a transaction.
pub(crate) async fn connect_pool(
    options: MySqlConnectOptions,
    max_connections: u32,
    acquire_timeout: Duration,
    max_lifetime: Duration,
    idle_secs: Option<u64>,
) -> crate::Result<MySqlPool> {
    let pool = session_safety(MySqlPoolOptions::new(), idle_secs, true)
        .max_connections(max_connections)
        .acquire_timeout(acquire_timeout)
        .max_lifetime(max_lifetime)
        .connect_with(options)
        .await?;
    Ok(pool)
}

/// The session settings of [`crate::pool_options`]: those of a queue's own pool but READ
/// COMMITTED, which a queue on a pool of the caller's sets on each of its transactions.
pub(crate) fn app_pool_options(idle_secs: Option<u64>) -> MySqlPoolOptions {
    session_safety(MySqlPoolOptions::new(), idle_secs, false)
}

/// `options` with a `ROLLBACK` before each use, the idle-transaction bound of `idle_secs`,
/// and, with `read_committed`, every session at READ COMMITTED.
fn session_safety(
    options: MySqlPoolOptions,
    idle_secs: Option<u64>,
    read_committed: bool,
) -> MySqlPoolOptions {
    options
        .idle_timeout(POOL_IDLE_TIMEOUT)
        .after_connect(move |conn, _meta| {
            Box::pin(async move {
                // Claims and maintenance must run at READ COMMITTED: under REPEATABLE
                // READ their range scans take gap locks that deadlock with concurrent
                // inserts.
                if read_committed {
                    conn.execute("SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED")
                        .await?;
                }
                if let Some(secs) = idle_secs {
                    set_idle_transaction_timeout(conn, secs).await?;
                }
                Ok(())
            })
        })
        // A connection can come back to the pool inside a transaction the driver does
        // not know about (a future dropped between `BEGIN` and the driver's
        // bookkeeping). A ROLLBACK before each use ends any such transaction, so that a
        // later autocommit statement is not swallowed by it; it costs the same one round
        // trip as the ping it replaces, and fails just as a ping would on a dead
        // connection.
        .test_before_acquire(false)
        .before_acquire(|conn, _meta| {
            Box::pin(async move {
                conn.execute("ROLLBACK").await?;
                Ok(true)
            })
        })
}

/// Bounds how long a session may sit idle inside a transaction: MariaDB's
/// `idle_transaction_timeout` where it exists; on MySQL, which lacks it (an unknown
/// variable), `wait_timeout`, which ends any idle session, so never below 5 min.
async fn set_idle_transaction_timeout(
    conn: &mut sqlx::MySqlConnection,
    secs: u64,
) -> sqlx::Result<()> {
    set_idle_timeouts(conn, secs, MYSQL_MIN_WAIT_TIMEOUT).await
}

/// [`set_idle_transaction_timeout`], with `mysql_floor` as the least `wait_timeout` set on
/// MySQL.
async fn set_idle_timeouts(
    conn: &mut sqlx::MySqlConnection,
    secs: u64,
    mysql_floor: Duration,
) -> sqlx::Result<()> {
    let mariadb = conn
        .execute(format!("SET SESSION idle_transaction_timeout = {secs}").as_str())
        .await;
    match mariadb {
        Err(e) if classify(&e) == Some(DbErrorKind::UnknownVariable) => {
            let secs = secs.max(mysql_floor.as_secs());
            conn.execute(format!("SET SESSION wait_timeout = {secs}").as_str())
                .await?;
            Ok(())
        }
        other => other.map(|_| ()),
    }
}

impl Store {
    /// A store over `db` (whose `set_isolation` says whether each transaction sets READ
    /// COMMITTED itself). `call_timeout`: see [`Store::call_timeout`].
    pub(crate) fn new(
        db: super::Db,
        metrics: Arc<Metrics>,
        call_timeout: Option<Duration>,
    ) -> Store {
        Store {
            db,
            metrics,
            call_timeout,
        }
    }

    /// A worker's lease store: a pool of two connections of its own for renewals and
    /// outcomes, opened lazily (on the runtime that calls this). Sessions run at READ
    /// COMMITTED, with lock waits that end after 1 s: a renewal skips rows other sessions
    /// lock, and a statement abandoned after a timeout must not go on holding locks of its
    /// own for long on the server.
    pub(crate) fn lease_store(connect: LeaseConnect, metrics: Arc<Metrics>) -> Store {
        let options = match connect.options {
            LeaseOptions::MySql(options) => options,
            LeaseOptions::Postgres(options) => {
                // Lock waits end after 1 s; a session idle inside a transaction ends after 5 s.
                let options = options.options([
                    pg_read_committed(),
                    ("lock_timeout", "1000".to_string()),
                    (
                        "idle_in_transaction_session_timeout",
                        LEASE_IDLE_TRANSACTION.as_millis().to_string(),
                    ),
                ]);
                let pool = sqlx::postgres::PgPoolOptions::new()
                    .max_connections(2)
                    .acquire_timeout(connect.acquire_timeout)
                    .max_lifetime(connect.max_lifetime)
                    .idle_timeout(POOL_IDLE_TIMEOUT)
                    .connect_lazy_with(options);
                let db = super::Db::Postgres {
                    pool,
                    set_isolation: false,
                };
                return Store::new(db, metrics, None);
            }
        };
        let pool = MySqlPoolOptions::new()
            .max_connections(2)
            .acquire_timeout(connect.acquire_timeout)
            .max_lifetime(connect.max_lifetime)
            // Before MySQL's `wait_timeout` below closes them.
            .idle_timeout(LEASE_MYSQL_WAIT - Duration::from_secs(10))
            .after_connect(|conn, _meta| {
                Box::pin(async move {
                    conn.execute("SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED")
                        .await?;
                    conn.execute("SET SESSION innodb_lock_wait_timeout = 1")
                        .await?;
                    // A renewal holds the rows it renews locked from its read to its
                    // commit, a few milliseconds. A worker frozen (or cut off) in between
                    // would keep them locked, and out of every other worker's reclaim, for
                    // as long as the server keeps its session: the server ends a session
                    // idle inside a transaction after 5 s (MariaDB), or any session idle
                    // for 30 s (MySQL, which has no such bound: the pool then reconnects
                    // after a quiet spell).
                    set_idle_timeouts(conn, LEASE_IDLE_TRANSACTION.as_secs(), LEASE_MYSQL_WAIT)
                        .await?;
                    Ok(())
                })
            })
            .connect_lazy_with(options.statement_cache_capacity(LEASE_STORE_STATEMENTS));
        Store::new(
            super::Db::MySql {
                pool,
                set_isolation: false,
            },
            metrics,
            None,
        )
    }

    /// A connection for the idle probe: see [`ProbeConn`].
    /// None when the pool has no connection to spare now: the probe then skips its slot
    /// rather than wait for one, or take the last one from those who wait.
    pub(crate) async fn probe_conn(&self) -> crate::Result<Option<ProbeConn>> {
        // A pool of one connection would have none left for the heartbeat and maintenance
        // while the worker idles.
        let pool = self.mysql_pool()?;
        if self.set_isolation() || pool.options().get_max_connections() < 2 {
            return Ok(Some(ProbeConn::Own(self.probe_connection().await?)));
        }
        if self.pool_exhausted() {
            return Ok(None);
        }
        match tokio::time::timeout(PROBE_TIMEOUT, pool.acquire()).await {
            Ok(conn) => Ok(Some(ProbeConn::Pooled(conn?))),
            Err(_) => Err(super::timed_out(PROBE_TIMEOUT).into()),
        }
    }

    /// Whether every connection of the pool is open and in use: a probe that holds one of
    /// them gives it back, for the application, the heartbeat or maintenance.
    pub(crate) fn pool_exhausted(&self) -> bool {
        let (idle, size, max) = match &self.db {
            super::Db::MySql { pool, .. } => (
                pool.num_idle(),
                pool.size(),
                pool.options().get_max_connections(),
            ),
            super::Db::Postgres { pool, .. } => (
                pool.num_idle(),
                pool.size(),
                pool.options().get_max_connections(),
            ),
        };
        idle == 0 && size >= max
    }

    /// Whether any of `queues` (not paused) has a ready job, on `conn` (`sql` from
    /// [`ready_probe_sql`](super::ready_probe_sql)). On an error, drop the connection.
    pub(crate) async fn probe_on(
        &self,
        conn: &mut ProbeConn,
        sql: &str,
        queues: &[String],
    ) -> crate::Result<bool> {
        let pooled = match conn {
            ProbeConn::Own(own) => return self.probe_ready(own, sql, queues).await,
            ProbeConn::Pooled(p) => p,
        };
        let mut q = sqlx::query_scalar::<_, bool>(sql);
        for queue in queues {
            q = q.bind(queue).bind(queue);
        }
        let result = match tokio::time::timeout(PROBE_TIMEOUT, q.fetch_one(&mut **pooled)).await {
            Ok(r) => r.map_err(Into::into),
            Err(_) => Err(super::timed_out(PROBE_TIMEOUT).into()),
        };
        if result.is_err() {
            // After a failed or abandoned read the connection's state is unknown: it is
            // closed when dropped rather than handed to the next user of the pool.
            pooled.close_on_drop();
        }
        result
    }

    /// Closes the store's pool, waiting for its connections to be returned.
    pub(crate) async fn close(&self) {
        match &self.db {
            super::Db::MySql { pool, .. } => pool.close().await,
            super::Db::Postgres { pool, .. } => pool.close().await,
        }
    }
}
