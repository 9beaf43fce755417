//! The audit log of operator actions on PostgreSQL (the twins of the MySQL `audit.rs`).

use chrono::NaiveDateTime;
use sqlx::postgres::PgPool;
use sqlx::Row;

use super::{db_id, id_of, Store};
use crate::audit::AuditEntry;
use crate::error::Result;
use crate::store::{AuditRow, AUDIT_PRUNE_BATCH};

const AUDIT_COLUMNS: &str = "id, at, actor, action, job_id, queue, detail";

/// `Store::insert_audit` on PostgreSQL: `rows` for one action of `actor` in one statement
/// (from arrays, in their order), all at the same time.
pub(crate) async fn insert_audit(
    store: &Store,
    pool: &PgPool,
    actor: &str,
    action: &str,
    rows: &[AuditRow<'_>],
) -> Result<()> {
    if rows.is_empty() {
        return Ok(());
    }
    let jobs: Vec<Option<i64>> = rows.iter().map(|r| r.job_id.map(db_id)).collect();
    let queues: Vec<Option<&str>> = rows.iter().map(|r| r.queue).collect();
    let details: Vec<Option<&str>> = rows.iter().map(|r| r.detail).collect();
    pg_autocommit!(store, pool, |conn| sqlx::query(
        "INSERT INTO job_queue_audit (at, actor, action, job_id, queue, detail) \
         SELECT job_queue_now(), $1, $2, u.job_id, u.queue, u.detail \
         FROM unnest($3::bigint[], $4::text[], $5::text[]) WITH ORDINALITY \
           AS u(job_id, queue, detail, ord) \
         ORDER BY u.ord"
    )
    .bind(actor)
    .bind(action)
    .bind(&jobs)
    .bind(&queues)
    .bind(&details)
    .execute(&mut *conn))?;
    Ok(())
}

/// `Store::audit_entries` on PostgreSQL: the newest `limit` entries, for job `job_id` only
/// when given.
pub(crate) async fn audit_entries(
    _store: &Store,
    pool: &PgPool,
    job_id: Option<u64>,
    limit: u32,
) -> Result<Vec<AuditEntry>> {
    let rows = match job_id {
        Some(id) => {
            sqlx::query(&format!(
                "SELECT {AUDIT_COLUMNS} FROM job_queue_audit WHERE job_id = $1 ORDER BY id DESC LIMIT $2"
            ))
            .bind(db_id(id))
            .bind(i64::from(limit))
            .fetch_all(pool)
            .await?
        }
        None => {
            sqlx::query(&format!(
                "SELECT {AUDIT_COLUMNS} FROM job_queue_audit ORDER BY id DESC LIMIT $1"
            ))
            .bind(i64::from(limit))
            .fetch_all(pool)
            .await?
        }
    };
    rows.iter()
        .map(|r| {
            Ok(AuditEntry {
                id: id_of(r.try_get(0)?),
                at: r.try_get::<NaiveDateTime, _>(1)?.and_utc(),
                actor: r.try_get(2)?,
                action: r.try_get(3)?,
                job_id: r.try_get::<Option<i64>, _>(4)?.map(id_of),
                queue: r.try_get(5)?,
                detail: r.try_get(6)?,
            })
        })
        .collect()
}

/// `Store::prune_audit_batch` on PostgreSQL: deletes up to `AUDIT_PRUNE_BATCH` rows older
/// than `older_than_us` microseconds, oldest first, through the `at` index. PostgreSQL's
/// `DELETE` has no `ORDER BY ... LIMIT`: the rows are chosen by a subquery.
pub(crate) async fn prune_audit_batch(
    store: &Store,
    pool: &PgPool,
    older_than_us: i64,
) -> Result<u64> {
    let done = pg_autocommit!(store, pool, |conn| sqlx::query(
        "DELETE FROM job_queue_audit WHERE id IN (\
           SELECT id FROM job_queue_audit \
           WHERE at < job_queue_now() - $1 * INTERVAL '1 microsecond' \
           ORDER BY at LIMIT $2)"
    )
    .bind(older_than_us)
    .bind(AUDIT_PRUNE_BATCH as i64)
    .execute(&mut *conn))?;
    Ok(done.rows_affected())
}
