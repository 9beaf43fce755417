//! Leases on PostgreSQL: renewal of every lease a worker holds, and the check of which it
//! still holds (the twins of the MySQL `lease.rs`).

use sqlx::postgres::PgPool;
use sqlx::Row;

use super::{db_id, id_of, Store};
use crate::error::Result;
use crate::model::LeaseState;

/// The renewal of `$1` (ids) held by `$2` (owner), in one statement: a locking read that
/// skips rows other sessions hold, and the update of exactly the rows it locked, which
/// returns them with how much of their lease was left before (µs, by the server's clock).
fn renew_sql(with_cancel_requested: bool) -> String {
    let cancel = if with_cancel_requested {
        ""
    } else {
        " AND cancel_requested = FALSE"
    };
    format!(
        "WITH c AS (SELECT id, \
           COALESCE((EXTRACT(EPOCH FROM (lease_until - job_queue_now())) * 1000000)::bigint, 0) AS left_us \
           FROM job_queue WHERE id = ANY($1) AND status = 'running' AND lease_owner = $2{cancel} \
           FOR UPDATE SKIP LOCKED) \
         UPDATE job_queue j SET lease_until = job_queue_now() + j.lease_ms * INTERVAL '1 millisecond' \
         FROM c WHERE j.id = c.id RETURNING j.id, c.left_us"
    )
}

/// `Store::renew_ids` on PostgreSQL. Where MySQL needs a transaction of two statements (a
/// locking read, then the update of the rows it locked), this is one autocommit statement:
/// the rows its `FOR UPDATE SKIP LOCKED` part locked are the rows it updates and returns, so
/// every row returned is a row extended, and a row finished meanwhile (its lock re-checks
/// `status` and the owner on the row's latest version) is not returned.
pub(crate) async fn renew_ids(
    store: &Store,
    pool: &PgPool,
    owner: &str,
    ids: &[u64],
    with_cancel_requested: bool,
) -> Result<Vec<(u64, i64)>> {
    let sql = renew_sql(with_cancel_requested);
    let mut renewed = Vec::with_capacity(ids.len());
    for chunk in ids.chunks(128) {
        let chunk: Vec<i64> = chunk.iter().map(|id| db_id(*id)).collect();
        let rows = pg_autocommit!(store, pool, |conn| sqlx::query(&sql)
            .bind(&chunk)
            .bind(owner)
            .fetch_all(&mut *conn))?;
        for r in &rows {
            renewed.push((id_of(r.try_get(0)?), r.try_get::<i64, _>(1)?));
        }
    }
    Ok(renewed)
}

/// `Store::lease_states` on PostgreSQL: whether `owner` still holds each of `claims` (id,
/// attempt), and whether its cancel was requested.
pub(crate) async fn lease_states(
    store: &Store,
    pool: &PgPool,
    owner: &str,
    claims: &[(u64, u32)],
) -> Result<Vec<LeaseState>> {
    let mut out = Vec::with_capacity(claims.len());
    for chunk in claims.chunks(128) {
        let ids: Vec<i64> = chunk.iter().map(|c| db_id(c.0)).collect();
        let rows = pg_autocommit!(store, pool, |conn| sqlx::query(
            "SELECT id, attempts, status = 'running' AND lease_owner IS NOT DISTINCT FROM $1, \
             cancel_requested FROM job_queue WHERE id = ANY($2)"
        )
        .bind(owner)
        .bind(&ids)
        .fetch_all(&mut *conn))?;
        let mut by_id = std::collections::HashMap::with_capacity(rows.len());
        for r in &rows {
            let (id, attempts, ours, cancel): (i64, i64, bool, bool) =
                (r.try_get(0)?, r.try_get(1)?, r.try_get(2)?, r.try_get(3)?);
            by_id.insert(id_of(id), (attempts, ours, cancel));
        }
        for &(id, attempt) in chunk {
            out.push(match by_id.get(&id) {
                Some(&(attempts, ours, cancel)) => LeaseState {
                    id,
                    held: attempts == i64::from(attempt) && ours,
                    cancel_requested: cancel,
                },
                None => LeaseState {
                    id,
                    held: false,
                    cancel_requested: false,
                },
            });
        }
    }
    Ok(out)
}
