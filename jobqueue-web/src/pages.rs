//! The pages and actions.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::extract::{Form, OriginalUri, Path, Query, State};
use axum::http::{header, HeaderMap, StatusCode, Uri};
use axum::response::{Html, IntoResponse, Redirect, Response};
use chrono::{DateTime, NaiveDateTime, Utc};
use jobqueue::admin::{
    CancelOutcome, InvalidCursor, JobCursor, JobFilter, QueueOverview, ThroughputMinute,
    OVERVIEW_COUNT_CAP,
};
use jobqueue::JobStatus;
use serde::Deserialize;

use crate::html::{action, age, badge, esc, page, time, url};
use crate::Shared;

type St = State<Arc<Shared>>;

/// Jobs per page of the job list.
const PAGE_SIZE: u32 = 50;

/// A failure shown as a page: what went wrong, in words.
pub(crate) struct Failure(StatusCode, String);

impl IntoResponse for Failure {
    fn into_response(self) -> Response {
        (
            self.0,
            Html(format!(
                "<!doctype html><html lang=\"en\"><head><meta charset=\"utf-8\"><title>Error · jobqueue</title></head>\
                 <body><h1>{}</h1><p>{}</p></body></html>",
                self.0,
                esc(&self.1)
            )),
        )
            .into_response()
    }
}

impl From<jobqueue::Error> for Failure {
    fn from(e: jobqueue::Error) -> Self {
        tracing::warn!(error = %e, "dashboard request failed");
        Failure(StatusCode::INTERNAL_SERVER_ERROR, e.to_string())
    }
}

type Page = Result<Response, Failure>;

/// Where the dashboard is mounted: the original path minus the part the router matched.
fn base(orig: &OriginalUri, uri: &Uri) -> String {
    let full = orig.0.path();
    let inner = uri.path();
    let b = if inner == "/" {
        full.trim_end_matches('/')
    } else {
        full.strip_suffix(inner).unwrap_or("")
    };
    b.to_owned()
}

#[derive(Debug, Deserialize, Default)]
pub(crate) struct Notice {
    notice: Option<String>,
}

// ---------------------------------------------------------------------------------------
// Overview

pub(crate) async fn overview(
    State(s): St,
    orig: OriginalUri,
    uri: Uri,
    Query(n): Query<Notice>,
) -> Page {
    let base = base(&orig, &uri);
    let live = overview_body(&s, &base).await?;
    let purge = if s.read_only {
        String::new()
    } else {
        format!(
            "<section class=\"card\"><h2>Purge finished jobs</h2>\
             <form method=\"post\" action=\"{b}/purge\" class=\"row\"><input type=\"hidden\" name=\"csrf\" value=\"{csrf}\">\
             <label>Status <select name=\"status\"><option>done</option><option>failed</option><option>cancelled</option></select></label>\
             <label>finished more than <input type=\"number\" name=\"older_than_hours\" value=\"24\" min=\"0\" step=\"any\"> hours ago</label>\
             <button type=\"submit\" class=\"danger\">Purge</button></form></section>",
            b = esc(&base),
            csrf = esc(&crate::csrf())
        )
    };
    let body = format!(
        "<div id=\"live\" data-src=\"{}/live\">{live}</div>{purge}",
        esc(&base)
    );
    Ok(Html(page(
        &base,
        "Overview",
        "Overview",
        n.notice.as_deref(),
        &body,
    ))
    .into_response())
}

/// The overview's changing part, which the page's script fetches every 2 seconds.
pub(crate) async fn overview_live(State(s): St, orig: OriginalUri, uri: Uri) -> Page {
    let base = base(&orig, &uri);
    Ok(Html(overview_body(&s, &base).await?).into_response())
}

async fn overview_body(s: &Shared, base: &str) -> Result<String, Failure> {
    let (stats, minutes) = overview_figures(s).await?;
    let mut per_queue: HashMap<&str, (u64, u64)> = HashMap::new();
    for m in &minutes {
        let e = per_queue.entry(m.queue.as_str()).or_default();
        e.0 += m.done;
        e.1 += m.failed;
    }
    let mut rows = String::new();
    for q in &stats {
        rows.push_str(&queue_row(
            s,
            base,
            q,
            per_queue.get(q.queue.as_str()).copied().unwrap_or_default(),
        ));
    }
    if stats.is_empty() {
        rows.push_str("<tr><td colspan=\"12\" class=\"empty\">No jobs yet.</td></tr>");
    }
    let (done, failed) = per_queue
        .values()
        .fold((0, 0), |a, v| (a.0 + v.0, a.1 + v.1));
    let counted = match stats.iter().find_map(|q| q.counted_secs_ago) {
        Some(secs) => format!(
            "scheduled to failed: as counted {} ago; done and cancelled: up to {OVERVIEW_COUNT_CAP} counted now",
            age(secs)
        ),
        None => format!(
            "scheduled to failed: not counted yet (no worker has); done and cancelled: up to {OVERVIEW_COUNT_CAP} counted now"
        ),
    };
    Ok(format!(
        "<section class=\"card\"><h2>Throughput <small>jobs finished per minute, last hour: \
         <span class=\"key done\">{done} done</span> <span class=\"key failed\">{failed} failed</span></small></h2>{chart}</section>\
         <section class=\"card\"><h2>Queues <small id=\"counted\">{counted}</small></h2><table class=\"queues\"><thead><tr><th>Queue</th><th>State</th>\
         <th class=\"n\">Scheduled</th><th class=\"n\">Ready</th><th class=\"n\">Blocked</th><th class=\"n\">Running</th><th class=\"n\">Done</th>\
         <th class=\"n\">Failed</th><th class=\"n\">Cancelled</th><th class=\"n\">Oldest ready</th>\
         <th class=\"n\">Done/h</th><th class=\"n\">Failed/h</th><th></th></tr></thead><tbody>{rows}</tbody></table></section>",
        chart = chart(&minutes),
    ))
}

/// How long the overview's figures are shared between viewers. The page refreshes every
/// 2 s; an action of this dashboard drops them at once.
pub(crate) const OVERVIEW_MAX_AGE: Duration = Duration::from_secs(1);

/// The overview's figures, read at a time.
#[derive(Debug)]
pub(crate) struct OverviewFigures {
    read_at: Instant,
    stats: Vec<QueueOverview>,
    minutes: Vec<ThroughputMinute>,
}

/// The overview's figures: fresh ones, or those another viewer read less than
/// [`OVERVIEW_MAX_AGE`] ago. Viewers that come while they are read wait for that read.
async fn overview_figures(
    s: &Shared,
) -> Result<(Vec<QueueOverview>, Vec<ThroughputMinute>), Failure> {
    let mut cached = s.overview.lock().await;
    if let Some(f) = cached
        .as_ref()
        .filter(|f| f.read_at.elapsed() < OVERVIEW_MAX_AGE)
    {
        return Ok((f.stats.clone(), f.minutes.clone()));
    }
    let stats = s.queue.queue_overview().await?;
    let minutes = s.queue.throughput(60).await?;
    *cached = Some(OverviewFigures {
        read_at: Instant::now(),
        stats: stats.clone(),
        minutes: minutes.clone(),
    });
    Ok((stats, minutes))
}

fn queue_row(s: &Shared, base: &str, q: &QueueOverview, (done_h, failed_h): (u64, u64)) -> String {
    let name = url(&q.queue);
    let link = |status: JobStatus, n: u64| {
        if n == 0 {
            "<span class=\"zero\">0</span>".to_owned()
        } else {
            // A capped count is at least the cap: "10000+".
            let more = if q.capped.contains(&status) { "+" } else { "" };
            format!(
                "<a href=\"{}/jobs?queue={name}&amp;status={status}\">{n}{more}</a>",
                esc(base)
            )
        }
    };
    let state = if q.paused {
        "<span class=\"badge paused\">paused</span>"
    } else {
        "<span class=\"badge active\">active</span>"
    };
    let button = if s.read_only {
        String::new()
    } else if q.paused {
        action(
            base,
            &format!("/queues/{name}/resume"),
            &crate::csrf(),
            "Resume",
            "",
            &[],
        )
    } else {
        action(
            base,
            &format!("/queues/{name}/pause"),
            &crate::csrf(),
            "Pause",
            "",
            &[],
        )
    };
    let expired = if q.expired_leases > 0 {
        format!(
            " <span class=\"warn\" title=\"running jobs whose lease expired\">{} expired</span>",
            q.expired_leases
        )
    } else {
        String::new()
    };
    format!(
        "<tr><th><a href=\"{b}/jobs?queue={name}\">{qn}</a></th><td>{state}</td><td class=\"n\">{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td>\
         <td class=\"n\">{}{expired}</td><td class=\"n\">{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td>\
         <td class=\"n\">{done_h}</td><td class=\"n\">{failed_h}</td><td>{button}</td></tr>",
        link(JobStatus::Scheduled, q.counts.scheduled),
        link(JobStatus::Ready, q.counts.ready),
        link(JobStatus::Blocked, q.counts.blocked),
        link(JobStatus::Running, q.counts.running),
        link(JobStatus::Done, q.counts.done),
        link(JobStatus::Failed, q.counts.failed),
        link(JobStatus::Cancelled, q.counts.cancelled),
        q.oldest_ready_secs.map(age).unwrap_or_else(|| "–".into()),
        b = esc(base),
        qn = esc(&q.queue),
    )
}

/// Done and failed jobs per minute over the last hour, as stacked bars in SVG.
fn chart(minutes: &[ThroughputMinute]) -> String {
    let mut done = [0u64; 60];
    let mut failed = [0u64; 60];
    for m in minutes {
        if let Some(i) = 59usize.checked_sub(m.minutes_ago as usize) {
            done[i] += m.done;
            failed[i] += m.failed;
        }
    }
    let max = (0..60)
        .map(|i| done[i] + failed[i])
        .max()
        .unwrap_or(0)
        .max(1);
    let (w, h) = (600.0, 120.0);
    let bar = w / 60.0;
    let mut bars = String::new();
    for i in 0..60 {
        let x = i as f64 * bar;
        let hd = done[i] as f64 / max as f64 * h;
        let hf = failed[i] as f64 / max as f64 * h;
        let ago = 59 - i;
        if done[i] + failed[i] > 0 {
            bars.push_str(&format!(
                "<g><title>{ago} min ago: {} done, {} failed</title>\
                 <rect class=\"done\" x=\"{x:.1}\" y=\"{:.1}\" width=\"{:.1}\" height=\"{hd:.1}\"/>\
                 <rect class=\"failed\" x=\"{x:.1}\" y=\"{:.1}\" width=\"{:.1}\" height=\"{hf:.1}\"/></g>",
                done[i],
                failed[i],
                h - hd,
                bar - 1.0,
                h - hd - hf,
                bar - 1.0
            ));
        }
    }
    format!(
        "<svg class=\"chart\" viewBox=\"0 0 {w} {h2}\" preserveAspectRatio=\"none\" role=\"img\" aria-label=\"throughput per minute\">\
         <line x1=\"0\" y1=\"{h}\" x2=\"{w}\" y2=\"{h}\" class=\"axis\"/>{bars}</svg>\
         <div class=\"chart-axis\"><span>60 min ago</span><span>peak {max}/min</span><span>now</span></div>",
        h2 = h + 1.0,
    )
}

// ---------------------------------------------------------------------------------------
// Jobs

#[derive(Debug, Deserialize, Default, Clone)]
pub(crate) struct Filter {
    #[serde(default)]
    queue: String,
    #[serde(default)]
    kind: String,
    #[serde(default)]
    status: String,
    #[serde(default)]
    key: String,
    /// `key=value` over the jobs' metadata.
    #[serde(default)]
    meta: String,
    #[serde(default)]
    from: String,
    #[serde(default)]
    to: String,
    /// Where the page starts: the cursor of the page before ([`JobCursor`] as text).
    #[serde(default)]
    cursor: String,
    /// The `before=<id>` of earlier releases' links: a cursor of a listing by id.
    #[serde(default)]
    before: String,
    notice: Option<String>,
    #[serde(default)]
    action: String,
}

impl Filter {
    fn query(&self) -> Result<JobFilter, Failure> {
        let mut q = JobFilter::default();
        if !self.queue.is_empty() {
            q = q.queue(self.queue.clone());
        }
        if !self.kind.is_empty() {
            q = q.kind(self.kind.clone());
        }
        if !self.status.is_empty() {
            let status: JobStatus = self.status.parse().map_err(|_| {
                Failure(
                    StatusCode::BAD_REQUEST,
                    format!("unknown status {:?}: use scheduled, ready, blocked, running, done, failed or cancelled", self.status),
                )
            })?;
            q = q.status(status);
        }
        if !self.key.is_empty() {
            q = q.key_prefix(self.key.clone());
        }
        if !self.meta.is_empty() {
            let Some((key, value)) = self.meta.split_once('=') else {
                return Err(Failure(
                    StatusCode::BAD_REQUEST,
                    format!(
                        "metadata filter {:?} is not key=value; write e.g. tenant=acme",
                        self.meta
                    ),
                ));
            };
            q = q.meta(key, value);
        }
        Ok(q.created(parse_time(&self.from)?, parse_time(&self.to)?))
    }

    /// Where the page starts, if it is not the first.
    fn cursor(&self) -> Result<Option<JobCursor>, Failure> {
        let text = if self.cursor.is_empty() {
            &self.before
        } else {
            &self.cursor
        };
        if text.is_empty() {
            return Ok(None);
        }
        text.parse()
            .map(Some)
            .map_err(|e: InvalidCursor| Failure(StatusCode::BAD_REQUEST, e.to_string()))
    }

    /// The filter as a query string (without the cursor).
    fn to_query(&self) -> String {
        [
            ("queue", &self.queue),
            ("kind", &self.kind),
            ("status", &self.status),
            ("key", &self.key),
            ("meta", &self.meta),
            ("from", &self.from),
            ("to", &self.to),
        ]
        .iter()
        .filter(|(_, v)| !v.is_empty())
        .map(|(k, v)| format!("{k}={}", url(v)))
        .collect::<Vec<_>>()
        .join("&")
    }

    fn hidden_fields(&self) -> Vec<(&'static str, &str)> {
        vec![
            ("queue", &self.queue),
            ("kind", &self.kind),
            ("status", &self.status),
            ("key", &self.key),
            ("meta", &self.meta),
            ("from", &self.from),
            ("to", &self.to),
        ]
    }
}

fn parse_time(s: &str) -> Result<Option<DateTime<Utc>>, Failure> {
    if s.is_empty() {
        return Ok(None);
    }
    for f in [
        "%Y-%m-%dT%H:%M",
        "%Y-%m-%dT%H:%M:%S",
        "%Y-%m-%d %H:%M:%S",
        "%Y-%m-%d %H:%M",
    ] {
        if let Ok(t) = NaiveDateTime::parse_from_str(s, f) {
            return Ok(Some(t.and_utc()));
        }
    }
    Err(Failure(
        StatusCode::BAD_REQUEST,
        format!("cannot read the time {s:?}: write it as 2026-12-01T08:30 (UTC)"),
    ))
}

pub(crate) async fn jobs(
    State(s): St,
    orig: OriginalUri,
    uri: Uri,
    Query(f): Query<Filter>,
) -> Page {
    let base = base(&orig, &uri);
    let query = f.query()?;
    let cursor = f.cursor()?;
    let b = esc(&base);
    let (page_, stopped) = match s.queue.list(&query, cursor.as_ref(), PAGE_SIZE).await {
        Ok(page_) => (Some(page_), None),
        // Not served by an index: say so, and keep the form to narrow the filter.
        Err(e @ jobqueue::Error::FilterTooSlow { .. }) => (None, Some(e)),
        Err(e @ jobqueue::Error::InvalidSetting { .. }) => {
            return Err(Failure(StatusCode::BAD_REQUEST, e.to_string()))
        }
        Err(e) => return Err(e.into()),
    };
    let jobs = page_.as_ref().map_or(&[][..], |p| &p.jobs[..]);
    let mut rows = String::new();
    for j in jobs {
        rows.push_str(&format!(
            "<tr><td class=\"n\"><a href=\"{b}/jobs/{id}\">{id}</a></td><td>{}</td><td>{}</td><td class=\"key\">{}</td>\
             <td>{}</td><td class=\"n\">{}/{}</td><td>{}</td><td class=\"error\">{}</td></tr>",
            esc(&j.queue),
            esc(&j.kind),
            esc(&j.task_key),
            badge(j.status),
            j.attempts,
            j.max_attempts,
            time(&j.created_at),
            esc(&j.last_error.as_deref().map(first_line).unwrap_or_default()),
            id = j.id,
        ));
    }
    if let Some(e) = &stopped {
        rows.push_str(&format!(
            "<tr><td colspan=\"8\" class=\"empty warn\">{}</td></tr>",
            esc(&e.to_string())
        ));
    } else if jobs.is_empty() {
        rows.push_str("<tr><td colspan=\"8\" class=\"empty\">No job matches.</td></tr>");
    }
    let qs = f.to_query();
    let mut pager = String::new();
    if cursor.is_some() {
        pager.push_str(&format!("<a href=\"{b}/jobs?{}\">« First</a>", esc(&qs)));
    }
    if let Some(next) = page_.as_ref().and_then(|p| p.next.as_ref()) {
        let sep = if qs.is_empty() { "" } else { "&" };
        let label = if query.order().starts_with("newest") {
            "Older »"
        } else {
            "Later »"
        };
        pager.push_str(&format!(
            "<a href=\"{b}/jobs?{}{sep}cursor={}\" rel=\"next\">{label}</a>",
            esc(&qs),
            url(&next.to_string())
        ));
    }
    let statuses: String = [
        "",
        "scheduled",
        "ready",
        "blocked",
        "running",
        "done",
        "failed",
        "cancelled",
    ]
    .iter()
    .map(|st| {
        let sel = if *st == f.status { " selected" } else { "" };
        let label = if st.is_empty() { "any status" } else { st };
        format!("<option value=\"{st}\"{sel}>{label}</option>")
    })
    .collect();
    let bulk = if s.read_only {
        String::new()
    } else {
        let sep = if qs.is_empty() { "" } else { "&" };
        format!(
            "<div class=\"bulk\"><a class=\"button\" href=\"{b}/bulk?{q}{sep}action=retry\">Retry all matching…</a>\
             <a class=\"button danger\" href=\"{b}/bulk?{q}{sep}action=cancel\">Cancel all matching…</a></div>",
            q = esc(&qs)
        )
    };
    let body = format!(
        "<form method=\"get\" action=\"{b}/jobs\" class=\"filters card\">\
         <label>Queue <input name=\"queue\" value=\"{}\"></label>\
         <label>Kind <input name=\"kind\" value=\"{}\"></label>\
         <label>Status <select name=\"status\">{statuses}</select></label>\
         <label>Key prefix <input name=\"key\" value=\"{}\"></label>\
         <label>Metadata <input name=\"meta\" placeholder=\"tenant=acme\" value=\"{}\"></label>\
         <label>Enqueued from <input type=\"datetime-local\" name=\"from\" value=\"{}\"></label>\
         <label>to <input type=\"datetime-local\" name=\"to\" value=\"{}\"></label>\
         <button type=\"submit\">Filter</button></form>{bulk}\
         <section class=\"card\"><h2>Jobs <small>{order}</small></h2><table class=\"jobs\"><thead><tr><th class=\"n\">Id</th><th>Queue</th><th>Kind</th><th>Key</th>\
         <th>Status</th><th class=\"n\">Attempts</th><th>Enqueued (UTC)</th><th>Last error</th></tr></thead>\
         <tbody>{rows}</tbody></table><nav class=\"pager\">{pager}</nav></section>",
        esc(&f.queue),
        esc(&f.kind),
        esc(&f.key),
        esc(&f.meta),
        esc(&f.from),
        esc(&f.to),
        order = query.order(),
    );
    Ok(Html(page(&base, "Jobs", "Jobs", f.notice.as_deref(), &body)).into_response())
}

fn first_line(s: &str) -> String {
    let line = s.lines().next().unwrap_or("");
    if line.chars().count() > 120 {
        format!("{}…", line.chars().take(120).collect::<String>())
    } else {
        line.to_owned()
    }
}

pub(crate) async fn job(
    State(s): St,
    orig: OriginalUri,
    uri: Uri,
    Path(id): Path<u64>,
    Query(n): Query<Notice>,
) -> Page {
    let base = base(&orig, &uri);
    let Some(j) = s.queue.job(id).await? else {
        return Err(Failure(
            StatusCode::NOT_FOUND,
            format!("there is no job with id {id} (it may have been pruned)"),
        ));
    };
    let now = s.queue.now().await?;
    let opt_time = |t: &Option<DateTime<Utc>>| t.as_ref().map(time).unwrap_or_else(|| "–".into());
    let lease = match (&j.lease_owner, &j.lease_until) {
        (Some(owner), Some(until)) => {
            let left = (*until - now).num_milliseconds() as f64 / 1000.0;
            let left = if left >= 0.0 {
                format!("{} left", age(left))
            } else {
                format!("expired {} ago", age(-left))
            };
            format!("{} until {} ({left})", esc(owner), time(until))
        }
        _ => "–".into(),
    };
    let payload = if s.hide_payloads {
        let size = j.payload.to_string().len();
        format!("<p class=\"muted\">Payloads are hidden on this dashboard ({size} bytes).</p>")
    } else {
        format!(
            "<pre class=\"payload\">{}</pre>",
            esc(&serde_json::to_string_pretty(&j.payload).unwrap_or_default())
        )
    };
    let fields = [
        ("Status", badge(j.status)),
        (
            "Queue",
            format!(
                "<a href=\"{}/jobs?queue={}\">{}</a>",
                esc(&base),
                url(&j.queue),
                esc(&j.queue)
            ),
        ),
        (
            "Kind",
            format!(
                "<a href=\"{}/jobs?kind={}\">{}</a>",
                esc(&base),
                url(&j.kind),
                esc(&j.kind)
            ),
        ),
        ("Task key", format!("<code>{}</code>", esc(&j.task_key))),
        ("Priority", j.priority.to_string()),
        ("Attempts", format!("{} of {}", j.attempts, j.max_attempts)),
        ("Run at", time(&j.run_at)),
        ("Lease", lease),
        (
            "Cancel requested",
            if j.cancel_requested {
                "yes".into()
            } else {
                "no".into()
            },
        ),
        ("Lease expiries", j.lease_expiries.to_string()),
        ("Snoozes", j.snoozes.to_string()),
        ("Waiting for a worker since", opt_time(&j.unrunnable_since)),
        (
            "Progress",
            match (&j.progress, &j.progress_at) {
                (Some(p), Some(at)) => {
                    format!("<code>{}</code> at {}", esc(&p.to_string()), time(at))
                }
                _ => "–".into(),
            },
        ),
        (
            "Key",
            if j.key_released {
                "given up to a newer job of the same key".into()
            } else {
                "held".into()
            },
        ),
        ("Enqueued", time(&j.created_at)),
        ("Updated", time(&j.updated_at)),
        ("Finished", opt_time(&j.finished_at)),
    ];
    let dl: String = fields
        .iter()
        .map(|(k, v)| format!("<dt>{k}</dt><dd>{v}</dd>"))
        .collect();
    let error = match &j.last_error {
        Some(e) => format!(
            "<section class=\"card\"><h2>Last error <small>attempt {}</small></h2><pre class=\"error\">{}</pre></section>",
            j.attempts,
            esc(e)
        ),
        None => String::new(),
    };
    let metadata = match &j.metadata {
        Some(m) => format!(
            "<section class=\"card\"><h2>Metadata</h2><pre class=\"payload\">{}</pre></section>",
            esc(&serde_json::to_string_pretty(m).unwrap_or_default())
        ),
        None => String::new(),
    };
    let attempts = s.queue.attempts(id).await?;
    let history = if attempts.is_empty() {
        "<p class=\"muted\">No attempt has ended yet.</p>".to_owned()
    } else {
        let rows: String = attempts
            .iter()
            .rev()
            .map(|a| {
                let took = a
                    .started_at
                    .map(|st| age((a.ended_at - st).num_milliseconds() as f64 / 1000.0))
                    .unwrap_or_else(|| "–".into());
                format!(
                    "<tr><td class=\"n\">{}</td><td>{}</td><td>{}</td><td class=\"n\">{took}</td><td>{}</td>\
                     <td class=\"outcome-{outcome}\">{outcome}</td><td>{error}</td></tr>",
                    a.attempt,
                    opt_time(&a.started_at),
                    time(&a.ended_at),
                    esc(a.worker.as_deref().unwrap_or("–")),
                    error = match a.error.as_deref() {
                        Some(e) if !e.is_empty() => format!("<pre class=\"error\">{}</pre>", esc(e)),
                        // No error to show (a lease that ran out, a success): no empty box.
                        _ => "<span class=\"muted\">–</span>".to_owned(),
                    },
                    outcome = a.outcome.as_str(),
                )
            })
            .collect();
        format!(
            "<table class=\"attempts\"><thead><tr><th class=\"n\">Attempt</th><th>Started</th><th>Ended</th>\
             <th class=\"n\">Took</th><th>Worker</th><th>Outcome</th><th>Error</th></tr></thead><tbody>{rows}</tbody></table>"
        )
    };
    let history = format!(
        "<section class=\"card\"><h2>Attempts <small>the last {}, newest first</small></h2>{history}</section>",
        jobqueue::limits::MAX_ATTEMPT_HISTORY
    );
    let output = match s.queue.output_json(id).await? {
        Some(_) if s.hide_payloads => {
            "<section class=\"card\"><h2>Output</h2><p class=\"muted\">Outputs are hidden on this dashboard.</p></section>".to_owned()
        }
        Some(v) => format!(
            "<section class=\"card\"><h2>Output</h2><pre class=\"payload\">{}</pre></section>",
            esc(&serde_json::to_string_pretty(&v).unwrap_or_default())
        ),
        None => String::new(),
    };
    let mut actions = String::new();
    if !s.read_only {
        if matches!(j.status, JobStatus::Failed | JobStatus::Cancelled) {
            actions.push_str(&action(
                &base,
                &format!("/jobs/{id}/retry"),
                &crate::csrf(),
                "Retry",
                "primary",
                &[],
            ));
        }
        if matches!(
            j.status,
            JobStatus::Scheduled | JobStatus::Ready | JobStatus::Blocked | JobStatus::Running
        ) && !j.cancel_requested
        {
            actions.push_str(&action(
                &base,
                &format!("/jobs/{id}/cancel"),
                &crate::csrf(),
                "Cancel",
                "danger",
                &[],
            ));
        }
    }
    let body = format!(
        "<div class=\"actions\">{actions}</div><section class=\"card\"><dl class=\"fields\">{dl}</dl></section>\
         {error}{history}{output}{metadata}<section class=\"card\"><h2>Payload</h2>{payload}</section>"
    );
    Ok(Html(page(
        &base,
        &format!("Job {id}"),
        "Jobs",
        n.notice.as_deref(),
        &body,
    ))
    .into_response())
}

// ---------------------------------------------------------------------------------------
// Workers and periodic jobs

pub(crate) async fn workers(State(s): St, orig: OriginalUri, uri: Uri) -> Page {
    let base = base(&orig, &uri);
    let workers = s.queue.workers().await?;
    let running = s.queue.running(None, 500).await?;
    let mut by_owner: BTreeMap<&str, Vec<&jobqueue::admin::RunningJob>> = BTreeMap::new();
    for r in &running {
        by_owner.entry(r.lease_owner.as_str()).or_default().push(r);
    }
    let mut rows = String::new();
    for w in &workers {
        let jobs: String = by_owner
            .get(w.owner.as_str())
            .map(|js| {
                js.iter()
                    .map(|r| {
                        format!(
                            "<a href=\"{}/jobs/{id}\" title=\"{}\">#{id}</a> <small>{}</small>",
                            esc(&base),
                            esc(&r.kind),
                            if r.lease_left_secs >= 0.0 {
                                format!("{} left", age(r.lease_left_secs))
                            } else {
                                "expired".into()
                            },
                            id = r.id
                        )
                    })
                    .collect::<Vec<_>>()
                    .join(", ")
            })
            .unwrap_or_default();
        let state = if w.gone {
            "<span class=\"badge failed\">gone</span>"
        } else {
            "<span class=\"badge active\">live</span>"
        };
        rows.push_str(&format!(
            "<tr><td>{state}</td><td class=\"key\">{}</td><td>{}</td><td class=\"n\">{}</td><td>{}</td><td>{}</td>\
             <td class=\"n\">{} / {}</td><td>{} ago</td><td>{}</td><td>{jobs}</td></tr>",
            esc(&w.owner),
            esc(&w.host),
            w.pid,
            esc(&w.version),
            esc(&w.queues.join(", ")),
            w.running,
            w.concurrency,
            age(w.seen_secs_ago),
            time(&w.started_at),
        ));
    }
    if workers.is_empty() {
        rows.push_str(
            "<tr><td colspan=\"10\" class=\"empty\">No worker has written a heartbeat.</td></tr>",
        );
    }
    let body = format!(
        "<section class=\"card\"><table><thead><tr><th>State</th><th>Owner</th><th>Host</th><th class=\"n\">Pid</th>\
         <th>Version</th><th>Queues</th><th class=\"n\">Running</th><th>Last heartbeat</th><th>Started (UTC)</th><th>Jobs and leases</th></tr></thead>\
         <tbody>{rows}</tbody></table><p class=\"muted\">Workers write a heartbeat every {}s; one silent for {}s is shown as gone.</p></section>",
        jobqueue::admin::HEARTBEAT_INTERVAL.as_secs(),
        jobqueue::admin::WORKER_GONE_AFTER.as_secs()
    );
    Ok(Html(page(&base, "Workers", "Workers", None, &body)).into_response())
}

pub(crate) async fn periodic(State(s): St, orig: OriginalUri, uri: Uri) -> Page {
    let base = base(&orig, &uri);
    let list = s.queue.periodic_jobs().await?;
    let mut rows = String::new();
    for p in &list {
        let last_job = match p.last_job_id {
            Some(id) => format!("<a href=\"{}/jobs/{id}\">#{id}</a>", esc(&base)),
            None => "–".into(),
        };
        let outcome = match p.last_job_status {
            Some(st) => badge(st),
            None if p.last_job_id.is_some() => "<span class=\"muted\">pruned</span>".into(),
            None => "–".into(),
        };
        rows.push_str(&format!(
            "<tr><td>{}</td><td><code>{}</code></td><td>{}</td><td>{}</td><td>{last_job}</td><td>{outcome}</td><td class=\"error\">{}</td></tr>",
            esc(&p.kind),
            esc(p.schedule.as_deref().unwrap_or("unknown")),
            p.next_tick.as_ref().map(time).unwrap_or_else(|| "–".into()),
            time(&p.last_tick),
            esc(&p.last_job_error.as_deref().map(first_line).unwrap_or_default()),
        ));
    }
    if list.is_empty() {
        rows.push_str(
            "<tr><td colspan=\"7\" class=\"empty\">No periodic job has ticked yet.</td></tr>",
        );
    }
    let body = format!(
        "<section class=\"card\"><table><thead><tr><th>Kind</th><th>Schedule</th><th>Next tick (UTC)</th><th>Last tick (UTC)</th>\
         <th>Last job</th><th>Outcome</th><th>Its error</th></tr></thead><tbody>{rows}</tbody></table></section>"
    );
    Ok(Html(page(&base, "Periodic jobs", "Periodic", None, &body)).into_response())
}

// ---------------------------------------------------------------------------------------
// Actions

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
    let mut n = 0;
    for &st in statuses {
        if query.status.is_none() || query.status == Some(st) {
            let mut q = query.clone();
            q.status = Some(st);
            n += s.queue.count(&q).await?;
        }
    }
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
        &format!("{verb} {}", plural(n, "job")),
        if verb == "Retry" { "primary" } else { "danger" },
        &fields,
    );
    let qs = f.to_query();
    let body = format!(
        "<section class=\"card confirm\"><p>{verb} <strong id=\"bulk-count\">{n}</strong> {which} {} matching \
         <code>{}</code>?</p><div class=\"actions\">{button}<a class=\"button\" href=\"{}/jobs?{}\">Back</a></div></section>",
        if n == 1 { "job" } else { "jobs" },
        esc(if qs.is_empty() { "every job" } else { &qs }),
        esc(&base),
        esc(&qs)
    );
    Ok(Html(page(
        &base,
        &format!("{verb} matching jobs"),
        "Jobs",
        None,
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
    let n = match form.filter.action.as_str() {
        "retry" => s.queue.retry_matching(&query).await?,
        "cancel" => s.queue.cancel_matching(&query).await?,
        other => {
            return Err(Failure(
                StatusCode::BAD_REQUEST,
                format!("unknown action {other:?}: use retry or cancel"),
            ))
        }
    };
    let verb = if form.filter.action == "retry" {
        "Retried"
    } else {
        "Cancelled"
    };
    let qs = form.filter.to_query();
    // What the action changed shows on the next page, not a second later.
    s.overview.lock().await.take();
    Ok(back(
        format!("{}/jobs?{qs}", action_base(&orig, &uri)),
        &format!("{verb} {}.", plural(n, "job")),
    ))
}

#[derive(Debug, Deserialize)]
pub(crate) struct BulkForm {
    #[serde(default)]
    csrf: String,
    #[serde(flatten)]
    filter: Filter,
}
