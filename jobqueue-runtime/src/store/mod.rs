//! The store: every SQL statement of the library, behind one boundary. The queue, the
//! worker, maintenance and the operator API reach the database only through [`Store`], so
//! another database is another store, not a rewrite. Not public API: the workspace's
//! protocol tests reach it through `__store`.
//!
//! Each outcome written after a claim is fenced: its `WHERE` names the job,
//! `status = 'running'`, the worker's `lease_owner` and the claim's `attempts`, and the caller
//! requires the rows it expected to match. Renewals name the owner only: an owner is one
//! worker, which holds at most one claim of a job at a time. `attempts` grows by one on every claim and never goes back, so a
//! worker that lost its lease can match nothing, whatever happened to the row since.
//! (sqlx's MySQL driver sets CLIENT_FOUND_ROWS, so `rows_affected` counts rows matched.)

use std::sync::Arc;
use std::time::Duration;

use chrono::NaiveDateTime;
use sqlx::mysql::{MySqlConnection, MySqlPool};
use sqlx::Executor;

use crate::error::{Error, Result};
use crate::metrics::Metrics;
use crate::retry::conflict_delay;
use errors::{classify, conflict_of};

/// Server-side prepared statements each of a worker's two lease-store connections
/// (renewals and outcomes) keeps: every statement they send fits, so none is prepared twice.
pub(crate) const LEASE_STORE_STATEMENTS: usize = 16;

/// How many times a transaction is retried after a deadlock or lock wait timeout.
pub(crate) const CONFLICT_RETRIES: u32 = 8;

/// Runs `$body` (which yields `(value, commit)`) in a transaction at READ COMMITTED, retrying
/// the whole transaction after a conflict ([`DbErrorKind::is_conflict`]: a deadlock, a lock
/// wait timeout or MariaDB's snapshot conflict). The transaction is always rolled back
/// explicitly on error: after a lock wait timeout the server has undone only the statement.
///
/// With a [`Store::call_timeout`], each try (`BEGIN` to `COMMIT`) must end within it. A try
/// that does not is dropped together with its connection, which is closed: a `BEGIN` or
/// `COMMIT` cut off half-way may have left a transaction open on it, and a pooled connection
/// waiting for a late reply would hang the next user.
macro_rules! transaction {
    ($store:expr, |$conn:ident| $body:block) => {{
        let store: &Store = $store;
        let mut retry = 0u32;
        loop {
            let mut pooled = acquire(store).await?;
            let one_try = async {
                if store.set_isolation() {
                    pooled
                        .execute("SET TRANSACTION ISOLATION LEVEL READ COMMITTED")
                        .await?;
                }
                let mut tx = sqlx::Connection::begin(&mut *pooled).await?;
                let result: sqlx::Result<_> = async {
                    let $conn: &mut MySqlConnection = &mut tx;
                    $body
                }
                .await;
                sqlx::Result::Ok(match result {
                    Ok((value, true)) => {
                        tx.commit().await?;
                        Ok(value)
                    }
                    Ok((value, false)) => {
                        tx.rollback().await?;
                        Ok(value)
                    }
                    Err(e) => {
                        let _ = tx.rollback().await;
                        Err(e)
                    }
                })
            };
            let outcome = match store.call_timeout {
                None => one_try.await,
                Some(limit) => {
                    let bounded = tokio::time::timeout(limit, one_try).await;
                    match bounded {
                        Ok(r) => r,
                        Err(_) => {
                            drop(pooled.detach());
                            Err(timed_out(limit))
                        }
                    }
                }
            };
            match outcome {
                Err(e) => break Err(Error::from(e)),
                Ok(Ok(value)) => break Ok(value),
                Ok(Err(e)) => {
                    if let Some(conflict) = conflict_of(&e).filter(|_| retry < CONFLICT_RETRIES) {
                        retry += 1;
                        store.metrics.conflict(conflict);
                        tokio::time::sleep(conflict_delay(retry)).await;
                        continue;
                    }
                    break Err(Error::from(e));
                }
            }
        }
    }};
}

/// Runs one autocommit statement (`$stmt` is re-evaluated each try), retrying it after a
/// transient conflict. In the `|conn|` form the statement runs on one connection of the pool
/// within the store's [`Store::call_timeout`] (see [`on_connection!`]).
macro_rules! autocommit {
    ($store:expr, |$conn:ident| $stmt:expr) => {
        autocommit!($store, on_connection!($store, |$conn| $stmt))
    };
    ($store:expr, $stmt:expr) => {{
        let store: &Store = $store;
        let mut retry = 0u32;
        loop {
            match $stmt.await {
                Ok(v) => break Ok(v),
                Err(e) => {
                    if let Some(conflict) = conflict_of(&e).filter(|_| retry < CONFLICT_RETRIES) {
                        retry += 1;
                        store.metrics.conflict(conflict);
                        tokio::time::sleep(conflict_delay(retry)).await;
                        continue;
                    }
                    break Err::<_, Error>(Error::from(e));
                }
            }
        }
    }};
}

/// A future that runs `$stmt` (a future of a `sqlx::Result`, using `$conn`) on one connection
/// of the store's pool, within [`Store::call_timeout`] if it has one. A statement that runs out
/// of time is abandoned with its connection, which is closed instead of going back to the
/// pool: its reply may still arrive, or never (a dead peer), and the pool would test it with a
/// ping that waits as long.
macro_rules! on_connection {
    ($store:expr, |$conn:ident| $stmt:expr) => {
        async {
            let store: &Store = $store;
            let mut pooled = acquire(store).await?;
            let call = async {
                let $conn: &mut MySqlConnection = &mut pooled;
                $stmt.await
            };
            match store.call_timeout {
                None => call.await,
                Some(limit) => {
                    let bounded = tokio::time::timeout(limit, call).await;
                    match bounded {
                        Ok(r) => r,
                        Err(_) => {
                            drop(pooled.detach());
                            Err(timed_out(limit).into())
                        }
                    }
                }
            }
        }
    };
}

/// A connection of the store's pool, within [`Store::call_timeout`] when it has one (on top
/// of the pool's own acquire timeout).
pub(crate) async fn acquire(
    store: &Store,
) -> sqlx::Result<sqlx::pool::PoolConnection<sqlx::MySql>> {
    let pool = store.mysql_pool().map_err(Error::into_sqlx)?;
    match store.call_timeout {
        None => pool.acquire().await,
        Some(limit) => tokio::time::timeout(limit, pool.acquire())
            .await
            .unwrap_or_else(|_| Err(timed_out(limit))),
    }
}

/// The error of a call that got no reply within `limit`.
pub(crate) fn timed_out(limit: Duration) -> sqlx::Error {
    sqlx::Error::Io(std::io::Error::new(
        std::io::ErrorKind::TimedOut,
        format!(
            "no reply from the database within {limit:?}; the connection was closed and the call will be retried on a new one"
        ),
    ))
}

/// The database behind a store, and its backend's settings. Every store function takes the
/// branch of its backend: the MySQL/MariaDB statements are the functions of this module's
/// files; the PostgreSQL ones are in [`postgres`], each called from the top of the function
/// it stands for (see [`on_postgres!`]).
#[derive(Clone, Debug)]
pub(crate) enum Db {
    /// MySQL 8.0 or MariaDB 10.6+.
    MySql {
        /// The pool.
        pool: MySqlPool,
        /// True when the pool is the caller's: its sessions may not be at READ COMMITTED,
        /// so every transaction of the store sets the level itself.
        set_isolation: bool,
    },
    /// PostgreSQL 13+.
    Postgres {
        /// The pool.
        pool: sqlx::PgPool,
        /// True when the pool is the caller's: its sessions may not default to READ
        /// COMMITTED, so every transaction of the store sets the level itself. The queue's
        /// own pools set it once per session, as a startup parameter.
        set_isolation: bool,
    },
}

impl Db {
    /// Which database this is.
    pub(crate) fn backend(&self) -> crate::Backend {
        match self {
            Db::MySql { .. } => crate::Backend::MySql,
            Db::Postgres { .. } => crate::Backend::Postgres,
        }
    }
}

/// Runs the PostgreSQL version of a store function when the store is on PostgreSQL: put at
/// the top of the MySQL function it stands for, `on_postgres!(self, claim::claim(queue, owner,
/// limit))` returns `postgres::claim::claim(self, pool, queue, owner, limit).await`.
macro_rules! on_postgres {
    ($store:expr, $($f:ident)::+ ($($arg:expr),* $(,)?)) => {
        if let $crate::store::Db::Postgres { pool, .. } = &$store.db {
            return $crate::store::postgres::$($f)::+($store, pool, $($arg),*).await;
        }
    };
}

// The steps of the protocol, one file each. Declared after the macros above, which they use.
mod admin;
mod audit;
mod claim;
mod complete_in;
pub(crate) mod connect;
mod dashboard;
mod decode;
mod enqueue;
pub(crate) mod errors;
mod gauges;
mod kinds;
mod lease;
pub(crate) mod limits;
mod maintenance;
pub(crate) mod migrate;
pub(crate) mod operator;
mod outcome;
pub(crate) mod postgres;
mod progress;
pub(crate) mod server;
mod testing;
mod wake;
mod workers;

pub use admin::key_history_sql;
pub use admin::{prune_matching_count, prune_matching_select};
pub use admin::{ATTEMPT_LOG_SELECT, OUTPUT_SELECT};
pub(crate) use audit::{AuditRow, AUDIT_PRUNE_BATCH};
pub(crate) use claim::ProbeConnection;
pub use claim::{claim_lock_sql, ready_probe_sql, CLAIM_SELECT};
pub(crate) use complete_in::complete_in_on;
pub use complete_in::{
    complete_in_sql, CONCURRENCY_KEY_OF_JOB, OUTPUT_AFTER_COMMIT, SLOT_OF_CLAIM, SLOT_RELEASE,
};
pub(crate) use connect::{LeaseConnect, ProbeConn};
pub(crate) use dashboard::BulkBound;
pub use dashboard::{dashboard_statements, Arg};
pub(crate) use decode::{
    attempts_from_log, detail_from_row, fetch_job, job_detail_sql, opt_text, record_from_row,
    summary_columns, summary_from_row, text, utc, JobLookup, JOB_COLUMNS,
};
use enqueue::is_key_conflict;
pub use enqueue::release_sql;
pub(crate) use enqueue::{insert, insert_many_on, insert_on};
pub(crate) use errors::is_deterministic;
pub use errors::DbErrorKind;
pub use gauges::{count_gauges_sql, COUNT_THROUGHPUT, GAUGE_QUEUES};
pub(crate) use limits::MAX_SLOTS;
pub use limits::{
    BLOCKED_DELETE_JOB, BLOCKED_SELECT, FREE_CONCURRENCY_SLOT, FREE_RATE_SLOT, ORPHAN_SLOTS,
    WAKE_SCAN,
};
pub use maintenance::DEFAULT_MAX_LEASE_EXPIRIES;
pub use maintenance::{PROMOTE_PROBE, PROMOTE_SELECT, PRUNE_SELECT, RECLAIM_SELECT};
pub use operator::previous_statement;
pub use operator::{
    CAPPED_QUEUE_STATUS_COUNT, CAPPED_STATUS_COUNT, NEXT_KIND_NAME, NEXT_QUEUE_NAME, RUN_NOW_UPDATE,
};
pub use postgres::claim::pg_claim_sql;
pub use progress::PROGRESS_UPDATE;
pub use server::ServerInfo;
pub use testing::{BLOCKED_IN_QUEUE, BRING_FORWARD_SELECT};
pub use wake::{Listening, WakeSource};
#[cfg(test)]
pub(crate) use workers::LiveWorker;
pub(crate) use workers::{RosterRead, WorkerRow};

/// The low-level queue operations, with their conflict retries counted. Get one with
/// [`Queue::store`](crate::Queue::store).
#[derive(Clone, Debug)]
pub struct Store {
    pub(crate) db: Db,
    pub(crate) metrics: Arc<Metrics>,
    /// How long one call (a statement, or one try of a transaction) may wait for the server
    /// before it is given up and its connection closed. `None`: as long as it takes. The
    /// worker bounds every call of its own; a handle from [`Queue::store`](crate::Queue::store)
    /// does not.
    pub(crate) call_timeout: Option<Duration>,
}

impl Store {
    /// This store with every call bounded by `limit` (see [`Store::call_timeout`]).
    pub(crate) fn bounded(&self, limit: Duration) -> Store {
        Store {
            call_timeout: Some(limit),
            ..self.clone()
        }
    }

    /// The MySQL/MariaDB pool, or [`Error::Unsupported`] on another database: what a store
    /// function that has no version for that database yet answers there.
    pub(crate) fn mysql_pool(&self) -> Result<&MySqlPool> {
        match &self.db {
            Db::MySql { pool, .. } => Ok(pool),
            other => Err(Error::Unsupported {
                backend: other.backend(),
            }),
        }
    }

    /// Whether each transaction sets READ COMMITTED itself (a pool of the caller's, on either
    /// database).
    pub(crate) fn set_isolation(&self) -> bool {
        match self.db {
            Db::MySql { set_isolation, .. } | Db::Postgres { set_isolation, .. } => set_isolation,
        }
    }

    /// Which database the store is on.
    pub fn backend(&self) -> crate::Backend {
        self.db.backend()
    }

    /// The database's clock (`UTC_TIMESTAMP(6)`).
    pub(crate) async fn now(&self) -> Result<NaiveDateTime> {
        on_postgres!(self, now());
        Ok(
            on_connection!(self, |conn| sqlx::query_scalar("SELECT UTC_TIMESTAMP(6)")
                .fetch_one(&mut *conn))
            .await?,
        )
    }
}

/// `d` in whole microseconds, for `INTERVAL ? MICROSECOND`.
pub(crate) fn micros(d: Duration) -> i64 {
    d.as_micros().min(i64::MAX as u128) as i64
}

/// `?, ?, ?` with `n` marks.
pub(crate) fn placeholders(n: usize) -> String {
    let mut s = String::with_capacity(n * 3);
    for i in 0..n {
        if i > 0 {
            s.push_str(", ");
        }
        s.push('?');
    }
    s
}

/// Each `IN (...)` arity is its own prepared statement on the server, which caps how many
/// there may be; padding lists to a power of two keeps the arities to a handful.
pub(crate) fn padded_len(n: usize) -> usize {
    // Five sizes cover every list the worker sends (claims take at most 256 rows; writes,
    // renewals and lease checks go in chunks of at most 128).
    match n {
        0..=1 => 1,
        2..=8 => 8,
        9..=32 => 32,
        33..=128 => 128,
        _ => n.next_power_of_two(),
    }
}

/// `items` padded to [`padded_len`] by repeating the last item (harmless inside `IN`).
pub(crate) fn padded<T: Clone>(items: &[T]) -> Vec<T> {
    let mut v = items.to_vec();
    if let Some(last) = items.last() {
        v.resize(padded_len(items.len()), last.clone());
    }
    v
}
