//! The actions: retry, cancel, pause, resume, purge and bulk, each behind the anti-forgery check.

use super::*;

#[derive(Debug, Deserialize)]
pub(crate) struct Csrf {
    #[serde(default)]
    csrf: String,
}

/// The form of pause and resume: the token, and `to=queue` when the queue's own page sent
/// it (the action returns there rather than to the overview).
#[derive(Debug, Deserialize)]
pub(crate) struct QueueForm {
    #[serde(default)]
    csrf: String,
    #[serde(default)]
    to: String,
}

/// Where pause and resume of `q` return: the queue's page when it sent them, else the
/// overview.
fn after_queue_action(orig: &OriginalUri, uri: &Uri, q: &str, form: &QueueForm) -> String {
    let b = action_base(orig, uri);
    if form.to == "queue" {
        format!("{b}/queues/{}", url(q))
    } else if b.is_empty() {
        "/".into()
    } else {
        b
    }
}

/// Refuses an action in read-only mode, from another site, or without the token of the
/// browser's session. Three checks, so that none rests on one header alone:
/// - `Sec-Fetch-Site` (sent by current browsers) must not say `cross-site` or `same-site`;
/// - `Origin`, when sent (every current browser sends it on a POST), must be this dashboard:
///   the request's own host and port, or one of its configured host names;
/// - the form's token must be the one of the session cookie (HMAC under the dashboard's key),
///   which a page of another site can neither read nor compute.
pub(crate) async fn check_action(
    s: &Shared,
    headers: &HeaderMap,
    token: &str,
) -> Result<(), Failure> {
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
    let host = headers.get(header::HOST).and_then(|v| v.to_str().ok());
    let foreign_origin = headers
        .get(header::ORIGIN)
        .is_some_and(|o| !o.to_str().is_ok_and(|o| s.security.origin_allowed(o, host)));
    if cross || foreign_origin {
        tracing::warn!(
            origin = ?headers.get(header::ORIGIN),
            host = ?host,
            "dashboard action refused: it came from another site"
        );
        return Err(Failure(
            StatusCode::FORBIDDEN,
            "the action was refused: it was sent by a page of another site. Use the dashboard's own pages".into(),
        ));
    }
    let expected = crate::csrf();
    if token.is_empty() || expected.is_empty() || !crate::same(token, &expected) {
        return Err(Failure(
            StatusCode::FORBIDDEN,
            "the form expired: it came from an earlier session of this browser, another browser or a dashboard restarted since (or cookies are blocked). Reload the page and try again"
                .into(),
        ));
    }
    Ok(())
}

/// A redirect to `location` with `notice`, signed so that the page shows it (a notice in a
/// link someone else wrote is dropped).
pub(crate) fn back(location: String, notice: &str) -> Response {
    let sep = if location.contains('?') { '&' } else { '?' };
    let loc = format!(
        "{location}{sep}notice={}&nsig={}",
        url(notice),
        url(&crate::security::notice_sig(notice))
    );
    let mut res = Redirect::to(&loc).into_response();
    res.headers_mut().insert(
        header::CACHE_CONTROL,
        header::HeaderValue::from_static("no-store"),
    );
    res
}

pub(super) fn action_base(orig: &OriginalUri, uri: &Uri) -> String {
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
    if changed {
        crate::audit::record(&s, "retry", &[id], None, "").await;
    }
    let msg = if changed {
        format!("Job {id} retried: 1 job changed, it is ready to run.")
    } else {
        format!("Job {id} was not retried (only failed or cancelled jobs can be): 0 jobs changed.")
    };
    // What the action changed shows on the next page, not a second later.
    s.forget_figures().await;
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
    let outcome = s.queue.cancel(id).await?;
    match outcome {
        CancelOutcome::Cancelled => crate::audit::record(&s, "cancel", &[id], None, "").await,
        CancelOutcome::Requested => {
            crate::audit::record(&s, "cancel", &[id], None, "running: cancellation requested").await
        }
        _ => {}
    }
    let msg = match outcome {
        CancelOutcome::Cancelled => format!("Job {id} cancelled: 1 job changed."),
        CancelOutcome::Requested => format!("Job {id} is running: cancellation requested (1 job changed); its worker stops it within a third of its lease."),
        CancelOutcome::AlreadyFinished(st) => format!("Job {id} had already ended ({st}): 0 jobs changed."),
        other => format!("Job {id}: {other:?}."),
    };
    // What the action changed shows on the next page, not a second later.
    s.forget_figures().await;
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
    Form(c): Form<QueueForm>,
) -> Page {
    check_action(&s, &headers, &c.csrf).await?;
    let was = s.queue.paused_queues().await?.contains(&q);
    s.queue.pause(&q).await?;
    if !was {
        crate::audit::record(&s, "pause", &[], Some(&q), "").await;
    }
    let msg = if was {
        format!("Queue {q} was already paused: 0 queues changed.")
    } else {
        format!("Queue {q} paused: 1 queue changed.")
    };
    // What the action changed shows on the next page, not a second later.
    s.forget_figures().await;
    Ok(back(after_queue_action(&orig, &uri, &q, &c), &msg))
}

pub(crate) async fn resume(
    State(s): St,
    orig: OriginalUri,
    uri: Uri,
    headers: HeaderMap,
    Path(q): Path<String>,
    Form(c): Form<QueueForm>,
) -> Page {
    check_action(&s, &headers, &c.csrf).await?;
    let was = s.queue.paused_queues().await?.contains(&q);
    s.queue.resume(&q).await?;
    if was {
        crate::audit::record(&s, "resume", &[], Some(&q), "").await;
    }
    let msg = if was {
        format!("Queue {q} resumed: 1 queue changed.")
    } else {
        format!("Queue {q} was not paused: 0 queues changed.")
    };
    // What the action changed shows on the next page, not a second later.
    s.forget_figures().await;
    Ok(back(after_queue_action(&orig, &uri, &q, &c), &msg))
}

#[derive(Debug, Deserialize)]
pub(crate) struct PurgeForm {
    #[serde(default)]
    csrf: String,
    #[serde(default)]
    status: String,
    /// Read as text: a number the form cannot hold is a 400 that says so.
    #[serde(default)]
    older_than_hours: String,
}

/// The oldest age a purge takes: 100 years. Past it (or for what is not a number) the
/// answer is a 400, not a time arithmetic overflow.
const MAX_PURGE_HOURS: f64 = 100.0 * 366.0 * 24.0;

/// The purge form's age in hours, as a duration.
fn purge_age(text: &str) -> Result<Duration, Failure> {
    let bad = || {
        Failure(
            StatusCode::BAD_REQUEST,
            format!(
                "the age {text:?} is not a number of hours from 0 to {MAX_PURGE_HOURS}; write e.g. 24 or 0.5"
            ),
        )
    };
    let hours: f64 = text.trim().parse().map_err(|_| bad())?;
    if !(0.0..=MAX_PURGE_HOURS).contains(&hours) {
        return Err(bad());
    }
    Duration::try_from_secs_f64(hours * 3600.0).map_err(|_| bad())
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
    if !matches!(
        status,
        JobStatus::Done | JobStatus::Failed | JobStatus::Cancelled
    ) {
        return Err(Failure(
            StatusCode::BAD_REQUEST,
            format!("cannot purge {status} jobs: purge done, failed or cancelled jobs"),
        ));
    }
    let age = purge_age(&f.older_than_hours)?;
    let n = s.queue.prune(status, age).await?;
    crate::audit::record(
        &s,
        "purge",
        &[],
        None,
        &format!(
            "{status} jobs finished more than {} hours ago: {} deleted",
            f.older_than_hours.trim(),
            plural(n, "job")
        ),
    )
    .await;
    let b = action_base(&orig, &uri);
    // What the action changed shows on the next page, not a second later.
    s.forget_figures().await;
    Ok(back(
        if b.is_empty() { "/".into() } else { b },
        &format!(
            "Purged {} {status} more than {} hours old.",
            plural(n, "job"),
            f.older_than_hours.trim()
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
    let query = f.query(&s)?;
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
    let query = form.filter.query(&s)?;
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
    crate::audit::record(
        &s,
        &format!("bulk-{}", form.filter.action),
        &done.changed_ids,
        (!form.filter.queue.is_empty()).then_some(form.filter.queue.as_str()),
        &format!(
            "jobs matching {}: {} changed",
            if qs.is_empty() { "every job" } else { &qs },
            plural(done.changed, "job")
        ),
    )
    .await;
    // What the action changed shows on the next page, not a second later.
    s.forget_figures().await;
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
