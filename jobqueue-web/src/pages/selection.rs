//! Actions on jobs picked by hand: retry, cancel, delete or run now on the jobs ticked on
//! the list (`POST /jobs/selection`), and delete or run now on one job's page. Each goes
//! through the same anti-forgery check as the other actions, and comes back to the page it
//! was sent from with a notice of what changed.

use jobqueue::admin::{SelectionOutcome, MAX_SELECTION};

use super::actions::{action_base, back, check_action};
use super::*;

/// An action of the selection form.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Act {
    Retry,
    Cancel,
    Delete,
    RunNow,
}

impl Act {
    fn parse(s: &str) -> Result<Act, Failure> {
        Ok(match s {
            "retry" => Act::Retry,
            "cancel" => Act::Cancel,
            "delete" => Act::Delete,
            "run_now" => Act::RunNow,
            other => {
                return Err(Failure(
                    StatusCode::BAD_REQUEST,
                    format!("unknown action {other:?}: use retry, cancel, delete or run_now"),
                ))
            }
        })
    }

    /// What happened to a changed job, after its count: "3 retried".
    fn done(self) -> &'static str {
        match self {
            Act::Retry => "retried",
            Act::Cancel => "cancelled",
            Act::Delete => "deleted",
            Act::RunNow => "made ready to run now",
        }
    }

    /// Why a job in `status` was left alone.
    fn why_not(self, status: JobStatus) -> String {
        match self {
            Act::Retry => format!("{status}: only failed or cancelled jobs are retried"),
            Act::Cancel => format!("{status}: it had already ended"),
            Act::Delete => format!("{status}: cancel it first, and delete it once it has stopped"),
            Act::RunNow => format!("{status}: only scheduled jobs can be run now"),
        }
    }
}

/// The notice of a selection action: "3 retried; 1 left alone (ready: only failed or
/// cancelled jobs are retried)".
fn summary(act: Act, out: &SelectionOutcome) -> String {
    let mut parts = vec![format!("{} {}", out.changed.len(), act.done())];
    if !out.requested.is_empty() {
        parts.push(format!(
            "{} running: cancellation requested, {} within a third of {} lease",
            out.requested.len(),
            if out.requested.len() == 1 {
                "it stops"
            } else {
                "they stop"
            },
            if out.requested.len() == 1 {
                "its"
            } else {
                "their"
            },
        ));
    }
    // Grouped by status, in the order first met.
    let mut groups: Vec<(JobStatus, usize)> = Vec::new();
    for (_, status) in &out.skipped {
        match groups.iter_mut().find(|(s, _)| s == status) {
            Some((_, n)) => *n += 1,
            None => groups.push((*status, 1)),
        }
    }
    for (status, n) in groups {
        parts.push(format!("{n} left alone ({})", act.why_not(status)));
    }
    if !out.missing.is_empty() {
        parts.push(format!(
            "{} no longer {}",
            out.missing.len(),
            if out.missing.len() == 1 {
                "exists"
            } else {
                "exist"
            }
        ));
    }
    format!("{}.", parts.join("; "))
}

/// `POST /jobs/selection`: `action` (retry, cancel, delete, run_now) on every `id` given
/// (at most [`MAX_SELECTION`]), then back to the list at `back` (its query string).
pub(crate) async fn selection(
    State(s): St,
    orig: OriginalUri,
    uri: Uri,
    headers: HeaderMap,
    Form(pairs): Form<Vec<(String, String)>>,
) -> Page {
    let field = |name: &str| {
        pairs
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
            .unwrap_or("")
    };
    check_action(&s, &headers, field("csrf")).await?;
    let act = Act::parse(field("action"))?;
    let mut ids = Vec::new();
    for (k, v) in &pairs {
        if k == "id" {
            ids.push(v.parse::<u64>().map_err(|_| {
                Failure(
                    StatusCode::BAD_REQUEST,
                    format!("{v:?} is not a job id: ids are whole numbers"),
                )
            })?);
        }
    }
    if ids.len() > MAX_SELECTION {
        return Err(Failure(
            StatusCode::BAD_REQUEST,
            format!(
                "{} jobs were selected, and an action takes at most {MAX_SELECTION} at a time: \
                 select fewer, or use \"Retry all matching\" or \"Cancel all matching\"",
                ids.len()
            ),
        ));
    }
    // Back to the same list: its filter and page, read again from `back` so that nothing
    // but a filter of the list can be sent there.
    let list: Filter = format!("/?{}", field("back"))
        .parse::<Uri>()
        .ok()
        .and_then(|u| Query::<Filter>::try_from_uri(&u).ok())
        .map(|Query(f)| f)
        .unwrap_or_default();
    let mut location = format!("{}/jobs?{}", action_base(&orig, &uri), list.to_query());
    if !list.cursor.is_empty() {
        location.push_str(&format!("&cursor={}", url(&list.cursor)));
    }
    if ids.is_empty() {
        return Ok(back(
            location,
            "No job was selected: tick the jobs to act on, then choose the action.",
        ));
    }
    let queue = &s.queue;
    let out = match act {
        Act::Retry => queue.retry_selected(&ids).await,
        Act::Cancel => queue.cancel_selected(&ids).await,
        Act::Delete => queue.delete_selected(&ids).await,
        Act::RunNow => queue.run_now_selected(&ids).await,
    }
    .map_err(|e| match e {
        e @ jobqueue::Error::InvalidSetting { .. } => {
            Failure(StatusCode::BAD_REQUEST, e.to_string())
        }
        e => e.into(),
    })?;
    let verb = match act {
        Act::Retry => "retry",
        Act::Cancel => "cancel",
        Act::Delete => "delete",
        Act::RunNow => "run-now",
    };
    if !out.changed.is_empty() {
        crate::audit::record(&s, verb, &out.changed, None, "selected").await;
    }
    if !out.requested.is_empty() {
        let detail = "selected, running: cancellation requested";
        crate::audit::record(&s, verb, &out.requested, None, detail).await;
    }
    recount(&s).await;
    Ok(back(location, &summary(act, &out)))
}

/// `POST /jobs/{id}/delete`: deletes a job that is not running, then goes to the list.
pub(crate) async fn delete(
    State(s): St,
    orig: OriginalUri,
    uri: Uri,
    headers: HeaderMap,
    Path(id): Path<u64>,
    Form(c): Form<Token>,
) -> Page {
    check_action(&s, &headers, &c.csrf).await?;
    let base = action_base(&orig, &uri);
    let deleted = s.queue.delete(id).await.map_err(not_found(id))?;
    if deleted {
        crate::audit::record(&s, "delete", &[id], None, "").await;
    }
    recount(&s).await;
    if deleted {
        Ok(back(
            format!("{base}/jobs"),
            &format!("Job {id} deleted: 1 job changed."),
        ))
    } else {
        Ok(back(
            format!("{base}/jobs/{id}"),
            &format!(
                "Job {id} is running and was not deleted (0 jobs changed): cancel it first, \
                 and delete it once it has stopped."
            ),
        ))
    }
}

/// `POST /jobs/{id}/run-now`: makes a scheduled job ready now.
pub(crate) async fn run_now(
    State(s): St,
    orig: OriginalUri,
    uri: Uri,
    headers: HeaderMap,
    Path(id): Path<u64>,
    Form(c): Form<Token>,
) -> Page {
    check_action(&s, &headers, &c.csrf).await?;
    let changed = s.queue.run_now(id).await.map_err(not_found(id))?;
    let msg = if changed {
        crate::audit::record(&s, "run-now", &[id], None, "").await;
        format!("Job {id} is ready to run now: 1 job changed.")
    } else {
        let status = s
            .queue
            .job_status(id)
            .await?
            .map(|st| st.to_string())
            .unwrap_or_else(|| "gone".into());
        format!("Job {id} is {status}, not scheduled: it was not changed (0 jobs changed).")
    };
    recount(&s).await;
    Ok(back(
        format!("{}/jobs/{id}", action_base(&orig, &uri)),
        &msg,
    ))
}

/// What an action changed shows on the next page, not a few seconds later: the overview's
/// kept figures are dropped and the queue gauges (the list's tabs) counted again, unless
/// that count would be long (see `Queue::recount_gauges`). A user without the right to write
/// the gauges sees them as the workers count them.
async fn recount(s: &Shared) {
    s.forget_figures().await;
    if let Err(e) = s.queue.recount_gauges().await {
        tracing::debug!(error = %e, "cannot count the queue gauges");
    }
}

/// The anti-forgery token of a one-button form.
#[derive(Debug, Deserialize)]
pub(crate) struct Token {
    #[serde(default)]
    csrf: String,
}

/// A missing job as a 404 page; any other error as it is.
fn not_found(id: u64) -> impl Fn(jobqueue::Error) -> Failure {
    move |e| match e {
        jobqueue::Error::JobNotFound(_) => Failure(
            StatusCode::NOT_FOUND,
            format!("there is no job with id {id} (it may have been deleted or pruned)"),
        ),
        e => e.into(),
    }
}

/// The single-job buttons of a job's page that this module serves: run now (a scheduled
/// job) and delete (any job that is not running).
pub(crate) fn job_buttons(base: &str, id: u64, status: JobStatus) -> String {
    let mut out = String::new();
    if status == JobStatus::Scheduled {
        out.push_str(&action(
            base,
            &format!("/jobs/{id}/run-now"),
            &crate::csrf(),
            "Run now",
            "",
            &[],
        ));
    }
    if status != JobStatus::Running {
        out.push_str(&action(
            base,
            &format!("/jobs/{id}/delete"),
            &crate::csrf(),
            "Delete",
            "danger",
            &[],
        ));
    }
    out
}
