//! The audit trail of the dashboard's actions: each is written to `job_queue_audit` (who,
//! what, which jobs) and logged at INFO as `dashboard action`; the job page and `/audit` show
//! the rows.

use std::sync::Arc;

use axum::extract::{OriginalUri, State};
use axum::http::Uri;
use axum::response::{Html, IntoResponse};
use jobqueue::admin::AuditEntry;

use crate::html::{esc, page, time};
use crate::pages::{base, Failure};
use crate::Shared;

/// Entries the `/audit` page shows.
const AUDIT_PAGE_ROWS: u32 = 100;

/// Entries a job's page shows.
const JOB_AUDIT_ROWS: u32 = 20;

/// Records an action of the request's actor: the log line always, the audit rows when the
/// database takes them. The action has happened by then, so a failure to write its row is
/// logged (WARN, with everything the row would hold) rather than reported as the action's.
pub(crate) async fn record(
    s: &Shared,
    action: &str,
    job_ids: &[u64],
    queue: Option<&str>,
    detail: &str,
) {
    let actor = crate::security::actor();
    let shown: Vec<u64> = job_ids.iter().take(20).copied().collect();
    tracing::info!(
        actor = %actor,
        action,
        jobs = ?shown,
        jobs_count = job_ids.len(),
        queue = queue.unwrap_or(""),
        detail,
        "dashboard action"
    );
    let detail = (!detail.is_empty()).then_some(detail);
    if let Err(e) = s
        .queue
        .record_audit(&actor, action, job_ids, queue, detail)
        .await
    {
        tracing::warn!(
            error = %e,
            actor = %actor,
            action,
            jobs = ?shown,
            "the dashboard action was done but its audit row could not be written (job_queue_audit: migrate, and grant INSERT on it to the dashboard's user)"
        );
    }
}

fn rows(base: &str, entries: &[AuditEntry], with_job: bool) -> String {
    entries
        .iter()
        .map(|e| {
            let job = match e.job_id {
                Some(id) if with_job => {
                    format!(
                        "<td class=\"n\"><a href=\"{}/jobs/{id}\">{id}</a></td>",
                        esc(base)
                    )
                }
                None if with_job => "<td class=\"n\">–</td>".to_owned(),
                _ => String::new(),
            };
            format!(
                "<tr><td>{}</td><td>{}</td><td>{}</td>{job}<td>{}</td><td>{}</td></tr>",
                time(&e.at),
                esc(&e.actor),
                esc(&e.action),
                esc(e.queue.as_deref().unwrap_or("–")),
                esc(e.detail.as_deref().unwrap_or("")),
            )
        })
        .collect()
}

/// The job page's card of the operator actions on job `id`, newest first.
pub(crate) async fn audit_section(s: &Shared, id: u64) -> String {
    let body = match s.queue.audit_for_job(id, JOB_AUDIT_ROWS).await {
        Ok(entries) if entries.is_empty() => {
            "<p class=\"muted\">No action from the dashboard yet.</p>".to_owned()
        }
        Ok(entries) => format!(
            "<table class=\"audit\"><thead><tr><th>When (UTC)</th><th>Who</th><th>Action</th><th>Queue</th>\
             <th>Detail</th></tr></thead><tbody>{}</tbody></table>",
            rows("", &entries, false)
        ),
        // The job's page stays useful without its audit rows.
        Err(e) => {
            tracing::warn!(error = %e, job = id, "cannot read the audit log");
            "<p class=\"muted\">The audit log could not be read; see the dashboard's log.</p>"
                .to_owned()
        }
    };
    format!(
        "<section class=\"card\" id=\"audit\"><h2>Operator actions <small>the last {JOB_AUDIT_ROWS}, newest first</small></h2>{body}</section>"
    )
}

/// `/audit`: the latest actions of every operator.
pub(crate) async fn audit_page(
    State(s): State<Arc<Shared>>,
    orig: OriginalUri,
    uri: Uri,
) -> Result<axum::response::Response, Failure> {
    let base = base(&orig, &uri);
    let entries = s.queue.audit_log(AUDIT_PAGE_ROWS).await?;
    let table = if entries.is_empty() {
        "<p class=\"muted\">No action from the dashboard yet.</p>".to_owned()
    } else {
        format!(
            "<table class=\"audit\"><thead><tr><th>When (UTC)</th><th>Who</th><th>Action</th><th class=\"n\">Job</th>\
             <th>Queue</th><th>Detail</th></tr></thead><tbody>{}</tbody></table>",
            rows(&base, &entries, true)
        )
    };
    let body = format!(
        "<section class=\"card\"><h2>Actions <small>the last {AUDIT_PAGE_ROWS}, newest first; a bulk action has a summary row \
         and a row per job it named</small></h2>{table}</section>"
    );
    Ok(Html(page(&base, "Audit log", "Audit", None, &body)).into_response())
}
