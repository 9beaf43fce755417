//! The statements of the testing API on PostgreSQL (the twins of the MySQL `testing.rs`).

use sqlx::postgres::PgPool;
use sqlx::Row;

use super::Store;
use crate::error::Result;

/// How many jobs one round of `bring_forward` moves.
const BATCH: i64 = 500;

/// The `scheduled` jobs of queue `$1` after (`$3` priority, `$4` id) in claim order, at most
/// `$2`, made due now in the same statement. Returns how many were read and how many moved
/// (a job that changed meanwhile is left alone) and the last one read, where the next round
/// goes on: the jobs stay `scheduled` until the next promotion, so each round starts after
/// the previous one.
const BRING_FORWARD: &str = "WITH c AS (\
       SELECT id, priority FROM job_queue \
       WHERE queue = $1 AND status = 'scheduled' AND (priority, id) > ($3, $4) \
       ORDER BY priority, id LIMIT $2), \
     u AS (\
       UPDATE job_queue j SET run_at = job_queue_now(), updated_at = job_queue_now() \
       FROM c WHERE j.id = c.id AND j.status = 'scheduled' RETURNING j.id) \
     SELECT (SELECT COUNT(*) FROM c), (SELECT COUNT(*) FROM u), \
       (SELECT priority FROM c ORDER BY priority DESC, id DESC LIMIT 1), \
       (SELECT id FROM c ORDER BY priority DESC, id DESC LIMIT 1)";

/// The MySQL `BLOCKED_IN_QUEUE` in PostgreSQL's SQL: the claim index serves the jobs in
/// their order.
pub(crate) const PG_BLOCKED_IN_QUEUE: &str =
    "SELECT job_queue.id, job_queue.kind, job_queue_blocked.slot_key \
     FROM job_queue LEFT JOIN job_queue_blocked ON job_queue_blocked.job_id = job_queue.id \
     WHERE job_queue.queue = $1 AND job_queue.status = 'blocked' \
     ORDER BY job_queue.priority, job_queue.id LIMIT $2";

/// `Store::bring_forward` on PostgreSQL: makes every `scheduled` job of `queue` due now.
pub(crate) async fn bring_forward(store: &Store, pool: &PgPool, queue: &str) -> Result<u64> {
    let mut moved = 0;
    let (mut priority, mut id) = (i16::MIN, -1i64);
    loop {
        let row = pg_autocommit!(store, pool, |conn| sqlx::query(BRING_FORWARD)
            .bind(queue)
            .bind(BATCH)
            .bind(priority)
            .bind(id)
            .fetch_one(&mut *conn))?;
        let read: i64 = row.try_get(0)?;
        let done: i64 = row.try_get(1)?;
        moved += done.max(0) as u64;
        if read < BATCH {
            return Ok(moved);
        }
        priority = row.try_get(2)?;
        id = row.try_get(3)?;
    }
}

/// `Store::blocked_in_queue` on PostgreSQL.
pub(crate) async fn blocked_in_queue(
    store: &Store,
    pool: &PgPool,
    queue: &str,
    limit: u32,
) -> Result<Vec<(u64, String, Option<String>)>> {
    let rows = pg_autocommit!(store, pool, |conn| sqlx::query(PG_BLOCKED_IN_QUEUE)
        .bind(queue)
        .bind(i64::from(limit))
        .fetch_all(&mut *conn))?;
    let mut out = Vec::with_capacity(rows.len());
    for r in &rows {
        out.push((super::id_of(r.try_get(0)?), r.try_get(1)?, r.try_get(2)?));
    }
    Ok(out)
}

/// `Store::free_rate_slots` on PostgreSQL: every slot of the rate keys the `blocked` jobs of
/// `queue` wait for may start a job now.
pub(crate) async fn free_rate_slots(store: &Store, pool: &PgPool, queue: &str) -> Result<u64> {
    let mut keys: Vec<String> = blocked_in_queue(store, pool, queue, BATCH as u32)
        .await?
        .into_iter()
        .filter_map(|(_, _, key)| key)
        .filter(|key| key.starts_with("r:"))
        .collect();
    keys.sort();
    keys.dedup();
    if keys.is_empty() {
        return Ok(0);
    }
    let done = pg_autocommit!(store, pool, |conn| sqlx::query(
        "UPDATE job_queue_slot SET free_at = job_queue_now() \
         WHERE slot_key = ANY($1) AND free_at > job_queue_now()"
    )
    .bind(&keys)
    .execute(&mut *conn))?;
    Ok(done.rows_affected())
}
