//! The store on PostgreSQL 13+: the same protocol as the MySQL/MariaDB statements of the
//! parent module, in PostgreSQL's SQL. Each function here stands for the store function of the
//! same name and is called from its top (see `on_postgres!`); it takes the [`Store`] (for its
//! counters and its call timeout) and the store's pool.
//!
//! What differs from MySQL, and why the statements differ:
//! - `UPDATE ... RETURNING` and `INSERT ... RETURNING`: a claim locks and takes its rows in
//!   one statement, and an enqueue learns its id without `LAST_INSERT_ID()`.
//! - Placeholders are `$1, $2...`; unsigned integers are signed (`BIGINT`, `INTEGER`) in the
//!   schema and converted at the boundary.
//! - The clock is `job_queue_now()` (the statement's start, in UTC, as `UTC_TIMESTAMP(6)`
//!   is on MySQL), defined by the schema.
//! - Transactions run at PostgreSQL's default, READ COMMITTED, unless the pool's sessions
//!   were set otherwise: every transaction of the store says READ COMMITTED itself.
//! - Conflicts to retry are SQLSTATE 40P01 (deadlock), 40001 (serialization) and 55P03
//!   (lock not available), classified in `store/errors.rs`.

use std::time::Duration;

use chrono::NaiveDateTime;
use sqlx::postgres::PgPool;

use super::{timed_out, Store};
use crate::error::Result;

/// Runs `$body` (which yields `(value, commit)`) in a transaction at READ COMMITTED on
/// `$pool`, retrying the whole transaction after a conflict, within the store's call timeout:
/// the PostgreSQL twin of the parent module's `transaction!`.
macro_rules! pg_transaction {
    ($store:expr, $pool:expr, |$conn:ident| $body:block) => {{
        let store: &$crate::store::Store = $store;
        let pool: &sqlx::PgPool = $pool;
        let mut retry = 0u32;
        loop {
            let mut pooled = $crate::store::postgres::acquire(store, pool).await?;
            let one_try = async {
                let mut tx = sqlx::Connection::begin(&mut *pooled).await?;
                if store.set_isolation() {
                    sqlx::Executor::execute(
                        &mut *tx,
                        "SET TRANSACTION ISOLATION LEVEL READ COMMITTED",
                    )
                    .await?;
                }
                let result: sqlx::Result<_> = async {
                    let $conn: &mut sqlx::PgConnection = &mut tx;
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
                Some(limit) => match tokio::time::timeout(limit, one_try).await {
                    Ok(r) => r,
                    Err(_) => {
                        drop(pooled.detach());
                        Err($crate::store::timed_out(limit))
                    }
                },
            };
            match outcome {
                Err(e) => break Err($crate::error::Error::from(e)),
                Ok(Ok(value)) => break Ok(value),
                Ok(Err(e)) => {
                    if let Some(conflict) = $crate::store::errors::conflict_of(&e)
                        .filter(|_| retry < $crate::store::CONFLICT_RETRIES)
                    {
                        retry += 1;
                        store.metrics.conflict(conflict);
                        tokio::time::sleep($crate::retry::conflict_delay(retry)).await;
                        continue;
                    }
                    break Err($crate::error::Error::from(e));
                }
            }
        }
    }};
}

/// Runs one autocommit statement on a connection of `$pool` (`$stmt` uses `$conn` and is
/// re-evaluated each try) within the store's call timeout, retrying it after a conflict: the
/// PostgreSQL twin of the parent module's `autocommit!`.
macro_rules! pg_autocommit {
    ($store:expr, $pool:expr, |$conn:ident| $stmt:expr) => {{
        let store: &$crate::store::Store = $store;
        let pool: &sqlx::PgPool = $pool;
        let mut retry = 0u32;
        loop {
            let attempt = async {
                let mut pooled = $crate::store::postgres::acquire(store, pool).await?;
                let call = async {
                    let $conn: &mut sqlx::PgConnection = &mut pooled;
                    $stmt.await
                };
                match store.call_timeout {
                    None => call.await,
                    Some(limit) => match tokio::time::timeout(limit, call).await {
                        Ok(r) => r,
                        Err(_) => {
                            drop(pooled.detach());
                            Err($crate::store::timed_out(limit))
                        }
                    },
                }
            };
            match attempt.await {
                Ok(v) => break Ok(v),
                Err(e) => {
                    if let Some(conflict) = $crate::store::errors::conflict_of(&e)
                        .filter(|_| retry < $crate::store::CONFLICT_RETRIES)
                    {
                        retry += 1;
                        store.metrics.conflict(conflict);
                        tokio::time::sleep($crate::retry::conflict_delay(retry)).await;
                        continue;
                    }
                    break Err::<_, $crate::error::Error>($crate::error::Error::from(e));
                }
            }
        }
    }};
}

pub(crate) mod admin;
pub(crate) mod audit;
pub(crate) mod claim;
pub(crate) mod complete_in;
pub(crate) mod dashboard;
pub(crate) mod decode;
pub(crate) mod enqueue;
pub(crate) mod gauges;
pub(crate) mod kinds;
pub(crate) mod lease;
pub(crate) mod limits;
pub(crate) mod maintenance;
pub(crate) mod migrate;
pub(crate) mod operator;
pub(crate) mod outcome;
pub(crate) mod progress;
pub(crate) mod testing;
pub(crate) mod wake;
pub(crate) mod workers;

/// A connection of `pool`, within the store's call timeout when it has one.
pub(crate) async fn acquire(
    store: &Store,
    pool: &PgPool,
) -> sqlx::Result<sqlx::pool::PoolConnection<sqlx::Postgres>> {
    match store.call_timeout {
        None => pool.acquire().await,
        Some(limit) => tokio::time::timeout(limit, pool.acquire())
            .await
            .unwrap_or_else(|_| Err(timed_out(limit))),
    }
}

/// The database's clock: `job_queue_now()`, the statement's start in UTC.
pub(crate) async fn now(store: &Store, pool: &PgPool) -> Result<NaiveDateTime> {
    pg_autocommit!(store, pool, |conn| sqlx::query_scalar(
        "SELECT statement_timestamp() AT TIME ZONE 'UTC'"
    )
    .fetch_one(&mut *conn))
}

/// A signed id column as the library's `u64` id.
pub(crate) fn id_of(id: i64) -> u64 {
    id.max(0) as u64
}

/// The library's `u64` id as the schema's signed `BIGINT` (ids never reach `i64::MAX`).
pub(crate) fn db_id(id: u64) -> i64 {
    i64::try_from(id).unwrap_or(i64::MAX)
}

/// `d` as a PostgreSQL interval in whole microseconds, for `$n * INTERVAL '1 microsecond'`.
pub(crate) fn micros(d: Duration) -> i64 {
    super::micros(d)
}
