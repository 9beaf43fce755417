//! The actions: retry, cancel, pause, resume, purge and bulk, each behind the anti-forgery check.

use super::*;

#[derive(Debug, Deserialize)]
pub(crate) struct Csrf {
    #[serde(default)]
    csrf: String,
}

/// Refuses an action in read-only mode, from another site, or without the page's token.
async fn check_action(s: &Shared, headers: &HeaderMap, token: &str) -> Result<(), Failure> {
    if s.read_only {
        return Err(Failure(
            StatusCode::FORBIDDEN,
            "this dashboard is read-only: actions are disabled".into(),
        ));
    }
    let cross = headers
        .get("sec-fetch-site")
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v == "cross-site" || v == "same-site");
    let expected = crate::csrf();
    if cross || expected.is_empty() || !crate::same(token, &expected) {
        return Err(Failure(
            StatusCode::FORBIDDEN,
            "the action was refused: its form did not come from this dashboard in this browser (or cookies are blocked); reload the page and try again".into(),
        ));
    }
    Ok(())
}

fn back(location: String, notice: &str) -> Response {
    let sep = if location.contains('?') { '&' } else { '?' };
    let loc = format!("{location}{sep}notice={}", url(notice));
    let mut res = Redirect::to(&loc).into_response();
    res.headers_mut().insert(
        header::CACHE_CONTROL,
        header::HeaderValue::from_static("no-store"),
    );
    res
}

fn action_base(orig: &OriginalUri, uri: &Uri) -> String {
    let full = orig.0.path();
    full.strip_suffix(uri.path()).unwrap_or("").to_owned()
}

fn plural(n: u64, what: &str) -> String {
    if n == 1 {
        format!("1 {what}")
    } else {
        format!("{n} {what}s")
    }
}

pub(crate) async fn retry(
    State(s): St,
    orig: OriginalUri,
    uri: Uri,
    headers: HeaderMap,
    Path(id): Path<u64>,
    Form(c): Form<Csrf>,
) -> Page {
    check_action(&s, &headers, &c.csrf).await?;
    let changed = s.queue.retry(id).await?;
    let msg = if changed {
        format!("Job {id} retried: 1 job changed, it is ready to run.")
    } else {
        format!("Job {id} was not retried (only failed or cancelled jobs can be): 0 jobs changed.")
    };
    // What the action changed shows on the next page, not a second later.
    s.overview.lock().await.take();
    Ok(back(
        format!("{}/jobs/{id}", action_base(&orig, &uri)),
        &msg,
    ))
}

pub(crate) async fn cancel(
    State(s): St,
    orig: OriginalUri,
    uri: Uri,
    headers: HeaderMap,
    Path(id): Path<u64>,
    Form(c): Form<Csrf>,
) -> Page {
    check_action(&s, &headers, &c.csrf).await?;
    let msg = match s.queue.cancel(id).await? {
        CancelOutcome::Cancelled => format!("Job {id} cancelled: 1 job changed."),
        CancelOutcome::Requested => format!("Job {id} is running: cancellation requested (1 job changed); its worker stops it within a third of its lease."),
        CancelOutcome::AlreadyFinished(st) => format!("Job {id} had already ended ({st}): 0 jobs changed."),
        other => format!("Job {id}: {other:?}."),
    };
    // What the action changed shows on the next page, not a second later.
    s.overview.lock().await.take();
    Ok(back(
        format!("{}/jobs/{id}", action_base(&orig, &uri)),
        &msg,
    ))
}

pub(crate) async fn pause(
    State(s): St,
    orig: OriginalUri,
    uri: Uri,
    headers: HeaderMap,
    Path(q): Path<String>,
    Form(c): Form<Csrf>,
) -> Page {
    check_action(&s, &headers, &c.csrf).await?;
    let was = s.queue.paused_queues().await?.contains(&q);
    s.queue.pause(&q).await?;
    let msg = if was {
        format!("Queue {q} was already paused: 0 queues changed.")
    } else {
        format!("Queue {q} paused: 1 queue changed.")
    };
    let b = action_base(&orig, &uri);
    // What the action changed shows on the next page, not a second later.
    s.overview.lock().await.take();
    Ok(back(if b.is_empty() { "/".into() } else { b }, &msg))
}

pub(crate) async fn resume(
    State(s): St,
    orig: OriginalUri,
    uri: Uri,
    headers: HeaderMap,
    Path(q): Path<String>,
    Form(c): Form<Csrf>,
) -> Page {
    check_action(&s, &headers, &c.csrf).await?;
    let was = s.queue.paused_queues().await?.contains(&q);
    s.queue.resume(&q).await?;
    let msg = if was {
        format!("Queue {q} resumed: 1 queue changed.")
    } else {
        format!("Queue {q} was not paused: 0 queues changed.")
    };
    let b = action_base(&orig, &uri);
    // What the action changed shows on the next page, not a second later.
    s.overview.lock().await.take();
    Ok(back(if b.is_empty() { "/".into() } else { b }, &msg))
}

#[derive(Debug, Deserialize)]
pub(crate) struct PurgeForm {
    #[serde(default)]
    csrf: String,
    status: String,
    older_than_hours: f64,
}

pub(crate) async fn purge(
    State(s): St,
    orig: OriginalUri,
    uri: Uri,
    headers: HeaderMap,
    Form(f): Form<PurgeForm>,
) -> Page {
    check_action(&s, &headers, &f.csrf).await?;
    let status: JobStatus = f.status.parse().map_err(|_| {
        Failure(
            StatusCode::BAD_REQUEST,
            format!(
                "unknown status {:?}: purge done, failed or cancelled jobs",
                f.status
            ),
        )
    })?;
    if !(f.older_than_hours >= 0.0 && f.older_than_hours.is_finite()) {
        return Err(Failure(
            StatusCode::BAD_REQUEST,
            "the age must be a number of hours, 0 or more".into(),
        ));
    }
    let n = s
        .queue
        .prune(status, Duration::from_secs_f64(f.older_than_hours * 3600.0))
        .await?;
    let b = action_base(&orig, &uri);
    // What the action changed shows on the next page, not a second later.
    s.overview.lock().await.take();
    Ok(back(
        if b.is_empty() { "/".into() } else { b },
        &format!(
            "Purged {} {status} more than {} hours old.",
            plural(n, "job"),
            f.older_than_hours
        ),
    ))
}

pub(crate) async fn bulk_confirm(
    State(s): St,
    orig: OriginalUri,
    uri: Uri,
    Query(f): Query<Filter>,
) -> Page {
    let base = base(&orig, &uri);
    if s.read_only {
        return Err(Failure(
            StatusCode::FORBIDDEN,
            "this dashboard is read-only: actions are disabled".into(),
        ));
    }
    // The statuses each action changes: those of `retry_matching` and `cancel_matching`.
    let (verb, statuses): (&str, &[JobStatus]) = match f.action.as_str() {
        "retry" => ("Retry", &[JobStatus::Failed, JobStatus::Cancelled]),
        "cancel" => (
            "Cancel",
            &[JobStatus::Scheduled, JobStatus::Ready, JobStatus::Blocked],
        ),
        other => {
            return Err(Failure(
                StatusCode::BAD_REQUEST,
                format!("unknown action {other:?}: use retry or cancel"),
            ))
        }
    };
    let query = f.query()?;
    // Counted up to a cap, each within the listing's time limit: the count shows what the
    // action would meet, not a reason to read the whole table.
    let mut n = 0;
    let mut slow = None;
    for &st in statuses {
        if query.status.is_none() || query.status == Some(st) {
            let mut q = query.clone();
            q.status = Some(st);
            match s.queue.count_capped(&q, BULK_COUNT_CAP).await {
                Ok(c) => n += c.min(BULK_COUNT_CAP + 1),
                Err(e @ jobqueue::Error::FilterTooSlow { .. }) => slow = Some(e),
                Err(e) => return Err(e.into()),
            }
        }
    }
    let counted = match &slow {
        Some(e) => format!("<p class=\"warn\">{}</p>", esc(&e.to_string())),
        None => String::new(),
    };
    let shown_n = if n > BULK_COUNT_CAP {
        format!("more than {BULK_COUNT_CAP}")
    } else if slow.is_some() {
        "the".to_owned()
    } else {
        n.to_string()
    };
    let mut fields = f.hidden_fields();
    fields.push(("action", &f.action));
    let which = if verb == "Retry" {
        "failed or cancelled"
    } else {
        "scheduled, ready or blocked"
    };
    let button = action(
        &base,
        "/bulk",
        &crate::csrf(),
        &if n > BULK_COUNT_CAP || slow.is_some() {
            format!("{verb} matching jobs")
        } else {
            format!("{verb} {}", plural(n, "job"))
        },
        if verb == "Retry" { "primary" } else { "danger" },
        &fields,
    );
    let qs = f.to_query();
    let body = format!(
        "<section class=\"card confirm\">{counted}<p>{verb} <strong id=\"bulk-count\">{shown_n}</strong> {which} {} matching \
         <code>{}</code>?</p><p class=\"muted\">At most {BULK_ROWS_PER_REQUEST} jobs change per request; \
         if more match, this page comes back to go on.</p><div class=\"actions\">{button}<a class=\"button\" href=\"{}/jobs?{}\">Back</a></div></section>",
        if n == 1 { "job" } else { "jobs" },
        esc(if qs.is_empty() { "every job" } else { &qs }),
        esc(&base),
        esc(&qs)
    );
    Ok(Html(page(
        &base,
        &format!("{verb} matching jobs"),
        "Jobs",
        f.notice.as_deref(),
        &body,
    ))
    .into_response())
}

pub(crate) async fn bulk(
    State(s): St,
    orig: OriginalUri,
    uri: Uri,
    headers: HeaderMap,
    Form(form): Form<BulkForm>,
) -> Page {
    check_action(&s, &headers, &form.csrf).await?;
    let query = form.filter.query()?;
    // Bounded per request: a filter matching many jobs is gone through over several
    // requests, each reporting how far it got (see BULK_ROWS_PER_REQUEST).
    let done = match form.filter.action.as_str() {
        "retry" => {
            s.queue
                .retry_matching_within(&query, BULK_ROWS_PER_REQUEST, BULK_TIME_PER_REQUEST)
                .await
        }
        "cancel" => {
            s.queue
                .cancel_matching_within(&query, BULK_ROWS_PER_REQUEST, BULK_TIME_PER_REQUEST)
                .await
        }
        other => {
            return Err(Failure(
                StatusCode::BAD_REQUEST,
                format!("unknown action {other:?}: use retry or cancel"),
            ))
        }
    };
    let done = match done {
        Ok(p) => p,
        Err(e @ jobqueue::Error::FilterTooSlow { .. }) => {
            return Err(Failure(StatusCode::BAD_REQUEST, e.to_string()))
        }
        Err(e) => return Err(e.into()),
    };
    let verb = if form.filter.action == "retry" {
        "Retried"
    } else {
        "Cancelled"
    };
    let qs = form.filter.to_query();
    // What the action changed shows on the next page, not a second later.
    s.overview.lock().await.take();
    let b = action_base(&orig, &uri);
    if !done.complete {
        let sep = if qs.is_empty() { "" } else { "&" };
        return Ok(back(
            format!("{b}/bulk?{qs}{sep}action={}", url(&form.filter.action)),
            &format!(
                "{verb} {} in this step; more jobs match: confirm again to go on.",
                plural(done.changed, "job")
            ),
        ));
    }
    Ok(back(
        format!("{b}/jobs?{qs}"),
        &format!("{verb} {}.", plural(done.changed, "job")),
    ))
}

/// How many jobs the bulk confirmation counts at most (per status).
const BULK_COUNT_CAP: u64 = 10_000;

/// How many jobs one request of a bulk action changes at most, and for how long it goes
/// on: a larger set is gone through in several requests, each answering in bounded time.
const BULK_ROWS_PER_REQUEST: u64 = 10_000;
const BULK_TIME_PER_REQUEST: Duration = Duration::from_secs(5);

#[derive(Debug, Deserialize)]
pub(crate) struct BulkForm {
    #[serde(default)]
    csrf: String,
    #[serde(flatten)]
    filter: Filter,
}
