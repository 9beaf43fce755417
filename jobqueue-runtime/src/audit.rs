//! The audit log: who did what to which jobs from an operator tool (the dashboard writes
//! it), kept in `job_queue_audit` and pruned with the finished jobs.

use chrono::{DateTime, Utc};

use crate::error::Result;
use crate::queue::Queue;
use crate::store::AuditRow;

/// One line of the audit log ([`Queue::audit_log`], [`Queue::audit_for_job`]): who did
/// what, when, to which job or queue.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[non_exhaustive]
pub struct AuditEntry {
    /// Its number, growing with time.
    pub id: u64,
    /// When, by the database's clock (UTC).
    pub at: DateTime<Utc>,
    /// Who: the dashboard's user name, `token` (whoever holds the dashboard's token),
    /// `upstream` (authenticated by the application in front of it; `upstream:<user>` when
    /// it names the user) or `loopback`
    /// (unauthenticated, on the loopback interface).
    pub actor: String,
    /// What: `retry`, `cancel`, `pause`, `resume`, `purge`, `bulk-retry`, `bulk-cancel`...
    pub action: String,
    /// The job it changed, on a row about one job.
    pub job_id: Option<u64>,
    /// The queue it was about, if one.
    pub queue: Option<String>,
    /// The filter and the count of an action over many jobs, or other detail, in words.
    pub detail: Option<String>,
}

/// The most rows, one per job, one action writes beside its summary row: a bulk action over
/// more jobs names the first ones only, and its summary row carries the count.
pub const AUDIT_JOB_ROWS: usize = 1_000;

/// The longest actor name kept (longer ones are cut).
const MAX_ACTOR_CHARS: usize = 128;

impl Queue {
    /// Records that `actor` did `action` (`retry`, `cancel`, `pause`, `purge`...).
    ///
    /// - On one job (`job_ids` of one id): one row naming it.
    /// - On several jobs, or on none that it can name (a bulk action by filter, a purge,
    ///   a pause): one summary row with `detail` (the filter and the count, in words), plus
    ///   one row per job of `job_ids`, at most [`AUDIT_JOB_ROWS`], so that each job's page
    ///   shows it.
    ///
    /// `queue` is the queue the action was about, if one. The time is the database's.
    pub async fn record_audit(
        &self,
        actor: &str,
        action: &str,
        job_ids: &[u64],
        queue: Option<&str>,
        detail: Option<&str>,
    ) -> Result<()> {
        let actor: String = actor.chars().take(MAX_ACTOR_CHARS).collect();
        // The column is ASCII of 64: a name that does not fit (only raw SQL can write one)
        // goes into the detail instead of failing the record.
        let (queue, detail) = match queue {
            Some(q) if q.len() > 64 || !q.is_ascii() => (
                None,
                Some(format!("queue {q:?}; {}", detail.unwrap_or_default())),
            ),
            q => (q, detail.map(str::to_owned)),
        };
        let detail = detail.as_deref();
        let rows: Vec<AuditRow<'_>> = if let [id] = job_ids {
            vec![AuditRow {
                job_id: Some(*id),
                queue,
                detail,
            }]
        } else {
            std::iter::once(AuditRow {
                job_id: None,
                queue,
                detail,
            })
            .chain(job_ids.iter().take(AUDIT_JOB_ROWS).map(|id| AuditRow {
                job_id: Some(*id),
                queue,
                detail,
            }))
            .collect()
        };
        self.store().insert_audit(&actor, action, &rows).await
    }

    /// The newest `limit` audit entries about job `id`, newest first.
    pub async fn audit_for_job(&self, id: u64, limit: u32) -> Result<Vec<AuditEntry>> {
        self.store().audit_entries(Some(id), limit).await
    }

    /// The newest `limit` audit entries, newest first.
    pub async fn audit_log(&self, limit: u32) -> Result<Vec<AuditEntry>> {
        self.store().audit_entries(None, limit).await
    }
}
