//! The job list with its filters, and one job's page.

use jobqueue::admin::{StoredJson, StoredText, DETAIL_TEXT_BYTES};

use super::*;

#[derive(Debug, Deserialize, Default, Clone)]
pub(crate) struct Filter {
    #[serde(default)]
    pub(super) queue: String,
    #[serde(default)]
    pub(super) kind: String,
    #[serde(default)]
    pub(super) status: String,
    #[serde(default)]
    pub(super) key: String,
    /// `key=value` over the jobs' metadata.
    #[serde(default)]
    pub(super) meta: String,
    #[serde(default)]
    pub(super) from: String,
    #[serde(default)]
    pub(super) to: String,
    /// Where the page starts: the cursor of the page before ([`JobCursor`] as text).
    #[serde(default)]
    pub(super) cursor: String,
    /// The `before=<id>` of earlier releases' links: a cursor of a listing by id.
    #[serde(default)]
    pub(super) before: String,
    pub(super) notice: Option<String>,
    #[serde(default)]
    pub(super) action: String,
}

impl Filter {
    pub(super) fn query(&self) -> Result<JobFilter, Failure> {
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
    pub(super) fn cursor(&self) -> Result<Option<JobCursor>, Failure> {
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
    pub(super) fn to_query(&self) -> String {
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

    pub(super) fn hidden_fields(&self) -> Vec<(&'static str, &str)> {
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
    let (page_, stopped) = match s
        .queue
        .list_summaries(&query, cursor.as_ref(), PAGE_SIZE)
        .await
    {
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

pub(crate) async fn job(
    State(s): St,
    orig: OriginalUri,
    uri: Uri,
    Path(id): Path<u64>,
    Query(n): Query<Notice>,
) -> Page {
    let base = base(&orig, &uri);
    // Every large column comes as capped text, each read on its own: a value this library
    // cannot parse is shown as stored, and the page (with its actions) still renders.
    let Some(j) = s.queue.job_detail(id).await? else {
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
        format!(
            "<p class=\"muted\">Payloads are hidden on this dashboard ({} bytes).</p>",
            j.payload.bytes
        )
    } else {
        stored_json("payload", &j.payload)
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
            match &j.progress {
                Some(p) => {
                    let shown = match p.json() {
                        StoredJson::Parsed(v) => format!("<code>{}</code>", esc(&v.to_string())),
                        _ => stored_json("progress", p),
                    };
                    format!("{shown} at {}", opt_time(&j.progress_at))
                }
                None => "–".into(),
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
            "<section class=\"card\"><h2>Last error <small>attempt {}</small></h2>{}<pre class=\"error\">{}</pre></section>",
            j.attempts,
            cut_note(e),
            esc(&e.text)
        ),
        None => String::new(),
    };
    let metadata = match &j.metadata {
        Some(m) => format!(
            "<section class=\"card\"><h2>Metadata</h2>{}</section>",
            stored_json("metadata", m)
        ),
        None => String::new(),
    };
    let history = match &j.history {
        Ok(attempts) if attempts.is_empty() => {
            "<p class=\"muted\">No attempt has ended yet.</p>".to_owned()
        }
        Ok(attempts) => {
            let rows: String = attempts
                .iter()
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
        }
        Err(reason) => {
            let raw = j.attempt_log.as_ref().map_or("", |l| head(&l.text));
            format!(
                "<p class=\"warn unreadable\">The attempt history cannot be read: {}; it is shown as stored{}.</p>\
                 <pre class=\"payload raw\">{}</pre>",
                esc(reason),
                j.attempt_log
                    .as_ref()
                    .filter(|l| l.bytes as usize > raw.len())
                    .map(|l| format!(", {} bytes, the first {} KiB", l.bytes, DETAIL_TEXT_BYTES / 1024))
                    .unwrap_or_default(),
                esc(raw)
            )
        }
    };
    let history = format!(
        "<section class=\"card\"><h2>Attempts <small>the last {}, newest first</small></h2>{history}</section>",
        jobqueue::limits::MAX_ATTEMPT_HISTORY
    );
    // A done job's output is what it returned; the column means nothing in other statuses.
    let output = match j.output.as_ref().filter(|_| j.status == JobStatus::Done) {
        Some(_) if s.hide_payloads => {
            "<section class=\"card\"><h2>Output</h2><p class=\"muted\">Outputs are hidden on this dashboard.</p></section>".to_owned()
        }
        Some(o) => format!(
            "<section class=\"card\"><h2>Output</h2>{}</section>",
            stored_json("output", o)
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

/// A JSON column of a job for the page: pretty-printed when it parses; else as stored,
/// under a line that says why (too long to show whole, or not JSON this library reads).
fn stored_json(what: &str, t: &StoredText) -> String {
    match t.json() {
        StoredJson::Parsed(v) => format!(
            "<pre class=\"payload\">{}</pre>",
            esc(&serde_json::to_string_pretty(&v).unwrap_or_default())
        ),
        StoredJson::Unreadable(reason) => format!(
            "<p class=\"warn unreadable\">This {what} cannot be read as JSON ({}); it is shown as stored{}.</p>\
             <pre class=\"payload raw\">{}</pre>",
            esc(&reason),
            if t.is_cut() { cut_words(t) } else { String::new() },
            esc(head(&t.text))
        ),
        // `Cut`, and whatever a later release adds: the text as stored.
        _ => format!(
            "{}<pre class=\"payload raw\">{}</pre>",
            cut_note(t),
            esc(head(&t.text))
        ),
    }
}

/// ", N bytes, the first 64 KiB": how much of a long column the page shows.
fn cut_words(t: &StoredText) -> String {
    format!(
        ", {} bytes, the first {} KiB",
        t.bytes,
        DETAIL_TEXT_BYTES / 1024
    )
}

/// A line saying that a column is longer than what the page shows, if it is.
fn cut_note(t: &StoredText) -> String {
    if t.is_cut() || t.text.len() > DETAIL_TEXT_BYTES {
        format!(
            "<p class=\"muted cut\">{} bytes; showing the first {} KiB as stored.</p>",
            t.bytes,
            DETAIL_TEXT_BYTES / 1024
        )
    } else {
        String::new()
    }
}

/// The first [`DETAIL_TEXT_BYTES`] of `text` (at a character boundary): what a page shows of
/// a column.
fn head(text: &str) -> &str {
    if text.len() <= DETAIL_TEXT_BYTES {
        return text;
    }
    let mut end = DETAIL_TEXT_BYTES;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    &text[..end]
}
