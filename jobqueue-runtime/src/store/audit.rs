//! The audit log of operator actions (`job_queue_audit`): written by the dashboard, read by
//! its pages, pruned by maintenance.

use chrono::NaiveDateTime;
use sqlx::Row;

use super::*;
use crate::audit::AuditEntry;

/// Rows deleted per pruning statement of the audit log.
pub(crate) const AUDIT_PRUNE_BATCH: u64 = 500;

const AUDIT_COLUMNS: &str = "id, at, actor, action, job_id, queue, detail";

/// One row to write: the job and queue it names, if any.
pub(crate) struct AuditRow<'a> {
    pub(crate) job_id: Option<u64>,
    pub(crate) queue: Option<&'a str>,
    pub(crate) detail: Option<&'a str>,
}

impl Store {
    /// Writes `rows` for one action of `actor` in one statement, all at the same time.
    pub(crate) async fn insert_audit(
        &self,
        actor: &str,
        action: &str,
        rows: &[AuditRow<'_>],
    ) -> Result<()> {
        on_postgres!(self, audit::insert_audit(actor, action, rows));
        if rows.is_empty() {
            return Ok(());
        }
        let sql = format!(
            "INSERT INTO job_queue_audit (at, actor, action, job_id, queue, detail) VALUES {}",
            vec!["(UTC_TIMESTAMP(6), ?, ?, ?, ?, ?)"; rows.len()].join(", ")
        );
        let mut q = sqlx::query(&sql).persistent(false);
        for r in rows {
            q = q
                .bind(actor)
                .bind(action)
                .bind(r.job_id)
                .bind(r.queue)
                .bind(r.detail);
        }
        on_connection!(self, |conn| q.execute(&mut *conn)).await?;
        Ok(())
    }

    /// The newest `limit` entries, for job `job_id` only when given.
    pub(crate) async fn audit_entries(
        &self,
        job_id: Option<u64>,
        limit: u32,
    ) -> Result<Vec<AuditEntry>> {
        on_postgres!(self, audit::audit_entries(job_id, limit));
        let rows = match job_id {
            Some(id) => {
                sqlx::query(&format!(
                    "SELECT {AUDIT_COLUMNS} FROM job_queue_audit WHERE job_id = ? ORDER BY id DESC LIMIT ?"
                ))
                .bind(id)
                .bind(limit)
                .fetch_all(self.mysql_pool()?)
                .await?
            }
            None => {
                sqlx::query(&format!(
                    "SELECT {AUDIT_COLUMNS} FROM job_queue_audit ORDER BY id DESC LIMIT ?"
                ))
                .bind(limit)
                .fetch_all(self.mysql_pool()?)
                .await?
            }
        };
        rows.iter()
            .map(|r| {
                Ok(AuditEntry {
                    id: r.try_get(0)?,
                    at: r.try_get::<NaiveDateTime, _>(1)?.and_utc(),
                    actor: text(r, 2)?,
                    action: text(r, 3)?,
                    job_id: r.try_get(4)?,
                    queue: opt_text(r, 5)?,
                    detail: opt_text(r, 6)?,
                })
            })
            .collect()
    }

    /// Deletes up to [`AUDIT_PRUNE_BATCH`] audit rows older than `older_than_us`
    /// microseconds, oldest first, through the `at` index.
    pub(crate) async fn prune_audit_batch(&self, older_than_us: i64) -> Result<u64> {
        on_postgres!(self, audit::prune_audit_batch(older_than_us));
        let n = on_connection!(self, |conn| sqlx::query(
            "DELETE FROM job_queue_audit WHERE at < UTC_TIMESTAMP(6) - INTERVAL ? MICROSECOND \
             ORDER BY at LIMIT ?"
        )
        .persistent(false)
        .bind(older_than_us)
        .bind(AUDIT_PRUNE_BATCH)
        .execute(&mut *conn))
        .await?
        .rows_affected();
        Ok(n)
    }
}
