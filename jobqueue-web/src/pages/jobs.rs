//! The job list with its filters, and one job's page.

use jobqueue::admin::{ListCounts, StoredJson, StoredText, DETAIL_TEXT_BYTES, LIST_COUNT_CAP};

use super::*;
use crate::html::{thousands, time_ago};

/// The longest text the error filter searches for.
const MAX_ERROR_TEXT: usize = 200;

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
    /// Text the last error contains.
    #[serde(default)]
    pub(super) error: String,
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
    /// The filter for the store. With job data redacted, a filter over a redacted field
    /// (task key, metadata, error text) is refused, wherever it came from (a link, a form's
    /// body): what it matches, or how many jobs an action changed, would tell what they hold.
    pub(super) fn query(&self, s: &Shared) -> Result<JobFilter, Failure> {
        if s.redact {
            let hidden = [
                ("key", &self.key),
                ("meta", &self.meta),
                ("error", &self.error),
            ];
            if let Some((field, _)) = hidden.iter().find(|(_, v)| !v.is_empty()) {
                return Err(Failure(
                    StatusCode::BAD_REQUEST,
                    format!(
                        "this dashboard redacts job data, so it does not filter on {field:?} \
                         either; filter by queue, kind, status or time"
                    ),
                ));
            }
        }
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
        if !self.error.is_empty() {
            // A substring search costs the text's length per character of each error read:
            // a short text keeps a row's test short, so that the list's time limit holds.
            let n = self.error.chars().count();
            if n > MAX_ERROR_TEXT {
                return Err(Failure(
                    StatusCode::BAD_REQUEST,
                    format!("the error text to find is {n} characters long: search with at most {MAX_ERROR_TEXT}"),
                ));
            }
            q = q.error_contains(self.error.clone());
        }
        // With a status, the times bound the job's time in it (the When column, the
        // listing's order: a range of its index); without one, when it was enqueued.
        let (from, to) = (parse_time(&self.from)?, parse_time(&self.to)?);
        Ok(if q.status.is_some() {
            q.status_time(from, to)
        } else {
            q.created(from, to)
        })
    }

    /// What the time fields bound, as their label says it: the When column's time with a
    /// status, the enqueue time without.
    fn time_label(&self) -> &'static str {
        match self.status.parse::<JobStatus>() {
            Ok(JobStatus::Done | JobStatus::Failed | JobStatus::Cancelled) => "Finished",
            Ok(JobStatus::Running) => "Lease ends",
            Ok(_) => "Due",
            Err(_) => "Enqueued",
        }
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
            ("error", &self.error),
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
            ("error", &self.error),
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

/// The statuses of the list's tabs, in the order a job goes through them.
const TABS: [JobStatus; 7] = [
    JobStatus::Scheduled,
    JobStatus::Ready,
    JobStatus::Blocked,
    JobStatus::Running,
    JobStatus::Failed,
    JobStatus::Done,
    JobStatus::Cancelled,
];

/// The header the page's own refresh sends: its reply is read only for the live part, so
/// the pickers' names are not looked up again.
const REFRESH_HEADER: &str = "x-jobqueue-refresh";

pub(crate) async fn jobs(
    State(s): St,
    orig: OriginalUri,
    uri: Uri,
    headers: HeaderMap,
    Query(f): Query<Filter>,
) -> Page {
    let base = base(&orig, &uri);
    let query = f.query(&s)?;
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
    let now = s.queue.now().await?;
    let selectable = !s.read_only;
    let jobs = page_.as_ref().map_or(&[][..], |p| &p.jobs[..]);
    let mut rows = String::new();
    for j in jobs {
        let check = if selectable {
            format!(
                "<td class=\"check\"><input type=\"checkbox\" name=\"id\" value=\"{id}\" aria-label=\"Select job {id}\"></td>",
                id = j.id
            )
        } else {
            String::new()
        };
        // The time the job's status waits on: when it is due, when its lease ends, when
        // it finished.
        let when = match j.status {
            JobStatus::Scheduled | JobStatus::Ready | JobStatus::Blocked => {
                format!("due {}", time_ago(&j.run_at, &now))
            }
            JobStatus::Running => j
                .lease_until
                .as_ref()
                .map(|t| format!("lease ends {}", time_ago(t, &now)))
                .unwrap_or_default(),
            _ => j
                .finished_at
                .as_ref()
                .map(|t| format!("ended {}", time_ago(t, &now)))
                .unwrap_or_default(),
        };
        rows.push_str(&format!(
            "<tr>{check}<td class=\"n\"><a href=\"{b}/jobs/{id}\">{id}</a></td><td>{}</td><td>{}</td><td class=\"key\">{}</td>\
             <td>{}</td><td class=\"n\">{}/{}</td><td>{}</td><td class=\"when\">{when}</td><td class=\"error\">{}</td></tr>",
            esc(&j.queue),
            esc(&j.kind),
            esc(&shown_key(&s, &j.task_key)),
            badge(j.status),
            j.attempts,
            j.max_attempts,
            time_ago(&j.created_at, &now),
            esc(&shown(&s, &j.last_error.as_deref().map(first_line).unwrap_or_default())),
            id = j.id,
        ));
    }
    let columns = if selectable { 10 } else { 9 };
    let searched = page_.as_ref().and_then(|p| p.searched);
    if let Some(n) = searched {
        // A filter no index serves whole: the page tested a bounded number of jobs.
        let what = if jobs.is_empty() {
            "No job matches"
        } else {
            "These are the jobs that match"
        };
        rows.push_str(&format!(
            "<tr><td colspan=\"{columns}\" class=\"empty searched\">{what} among the next {} jobs of this list \
             (no index serves the whole filter, so its jobs are tested one by one, at most {} a page); \
             the rest was not searched. The link below searches on; or narrow the list by status, \
             queue, kind or time.</td></tr>",
            thousands(n),
            thousands(n),
        ));
    } else if let Some(e) = &stopped {
        rows.push_str(&format!(
            "<tr><td colspan=\"{columns}\" class=\"empty warn\">{}</td></tr>",
            esc(&e.to_string())
        ));
    } else if jobs.is_empty() {
        rows.push_str(&format!(
            "<tr><td colspan=\"{columns}\" class=\"empty\">No job matches.</td></tr>"
        ));
    }
    let qs = f.to_query();
    let mut pager = String::new();
    if let (Some(c), Some(_)) = (&cursor, &page_) {
        pager.push_str(&format!("<a href=\"{b}/jobs?{}\">« First</a>", esc(&qs)));
        // The page before this one, read backwards from where this one starts (nothing
        // when that read runs into the time limit).
        if let Some(prev) = s.queue.previous_cursor(&query, c, PAGE_SIZE).await? {
            let href = match prev {
                Some(p) if qs.is_empty() => format!("cursor={}", url(&p.to_string())),
                Some(p) => format!("{qs}&cursor={}", url(&p.to_string())),
                None => qs.clone(),
            };
            let label = if query.order().starts_with("newest") {
                "‹ Newer"
            } else {
                "‹ Earlier"
            };
            pager.push_str(&format!(
                "<a href=\"{b}/jobs?{}\" rel=\"prev\">{label}</a>",
                esc(&href)
            ));
        }
    } else if cursor.is_some() {
        pager.push_str(&format!("<a href=\"{b}/jobs?{}\">« First</a>", esc(&qs)));
    }
    if let Some(next) = page_.as_ref().and_then(|p| p.next.as_ref()) {
        let sep = if qs.is_empty() { "" } else { "&" };
        let label = match (query.order().starts_with("newest"), searched.is_some()) {
            (true, false) => "Older »",
            (false, false) => "Later »",
            (true, true) => "Search older »",
            (false, true) => "Search later »",
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
    let tabs = tabs(&s, &base, &f).await?;
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
    let table = format!(
        "<table class=\"jobs\"><thead><tr>{check}<th class=\"n\">Id</th><th>Queue</th><th>Kind</th><th>Key</th>\
         <th>Status</th><th class=\"n\">Attempts</th><th>Enqueued</th><th>When</th><th>Last error</th></tr></thead>\
         <tbody>{rows}</tbody></table><nav class=\"pager\">{pager}</nav>",
        check = if selectable {
            // Shown by the script, which is what makes it work.
            "<th class=\"check\"><input type=\"checkbox\" class=\"select-all\" hidden aria-label=\"Select every job on this page\"></th>"
        } else {
            ""
        },
    );
    let heading = format!("<h2>Jobs <small>{}</small></h2>", esc(query.order()));
    let list = if selectable {
        // A plain form: the checkboxes and buttons work without the script. `back` is
        // where the action returns to: this page.
        let back = match &cursor {
            Some(c) if !qs.is_empty() => format!("{qs}&cursor={}", url(&c.to_string())),
            Some(c) => format!("cursor={}", url(&c.to_string())),
            None => qs.clone(),
        };
        format!(
            "<form method=\"post\" action=\"{b}/jobs/selection\" class=\"card selection\">\
             <input type=\"hidden\" name=\"csrf\" value=\"{csrf}\"><input type=\"hidden\" name=\"back\" value=\"{back}\">\
             <div class=\"list-head\">{heading}<div class=\"selection-actions\"><span class=\"muted\">With the selected jobs:</span>\
             <button type=\"submit\" name=\"action\" value=\"retry\">Retry</button>\
             <button type=\"submit\" name=\"action\" value=\"run_now\">Run now</button>\
             <button type=\"submit\" name=\"action\" value=\"cancel\" class=\"danger\">Cancel</button>\
             <button type=\"submit\" name=\"action\" value=\"delete\" class=\"danger\">Delete</button></div></div>\
             {table}</form>",
            csrf = esc(&crate::csrf()),
            back = esc(&back),
        )
    } else {
        format!("<section class=\"card\">{heading}{table}</section>")
    };
    // The pickers' names are read by the page's script when a picker is first used
    // (`/jobs/names`), unless this dashboard has them already: the page reads none. The
    // page's own refresh reads only the live part.
    let names = if headers.contains_key(REFRESH_HEADER) {
        None
    } else {
        s.list.cached_names().await
    };
    let datalist = |id: &str, field: &str, names: Option<&Vec<String>>| match names {
        Some(names) => {
            let options: String = names
                .iter()
                .map(|n| format!("<option value=\"{}\"></option>", esc(n)))
                .collect();
            format!("<datalist id=\"{id}\" data-loaded=\"1\">{options}</datalist>")
        }
        None => format!(
            "<datalist id=\"{id}\" data-src=\"{b}/jobs/names\" data-field=\"{field}\"></datalist>"
        ),
    };
    let body = format!(
        "<form method=\"get\" action=\"{b}/jobs\" class=\"filters card\">\
         <label>Queue <input name=\"queue\" list=\"queue-names\" value=\"{}\" autocomplete=\"off\"></label>\
         <label>Kind <input name=\"kind\" list=\"kind-names\" value=\"{}\" autocomplete=\"off\"></label>\
         <label>Status <select name=\"status\">{statuses}</select></label>\
         <label>Key prefix <input name=\"key\" value=\"{}\"></label>\
         <label>Error contains <input name=\"error\" value=\"{}\"></label>\
         <label>Metadata <input name=\"meta\" placeholder=\"tenant=acme\" value=\"{}\"></label>\
         <label title=\"{time_title}\">{time_label} from <input type=\"datetime-local\" name=\"from\" value=\"{}\"></label>\
         <label title=\"{time_title}\">to <input type=\"datetime-local\" name=\"to\" value=\"{}\"></label>\
         <button type=\"submit\">Filter</button>{}{}</form>{bulk}\
         <div id=\"live\" data-refresh=\"page\">{tabs}{list}</div>",
        esc(&f.queue),
        esc(&f.kind),
        esc(&f.key),
        esc(&f.error),
        esc(&f.meta),
        esc(&f.from),
        esc(&f.to),
        datalist("queue-names", "queues", names.as_ref().map(|n| &n.0)),
        datalist("kind-names", "kinds", names.as_ref().map(|n| &n.1)),
        time_label = f.time_label(),
        time_title = "With a status: the time in the When column (finished, due, or lease end); \
                      without: when the job was enqueued. UTC.",
    );
    Ok(Html(page(&base, "Jobs", "Jobs", f.notice.as_deref(), &body)).into_response())
}

/// The most queue and kind names each picker offers (each is one index lookup); other names
/// can still be typed.
const PICKER_NAMES: usize = 200;

/// How long the pickers' names serve every viewer: 400 index lookups, for names that change
/// when a queue or a kind is first used.
const NAMES_MAX_AGE: Duration = Duration::from_secs(30);

/// How long a tab's counts serve every viewer (and every refresh): the capped counts read up
/// to 10,000 index entries each, and the gauges they show change every few seconds anyway.
/// An action of this dashboard forgets them.
const COUNTS_MAX_AGE: Duration = Duration::from_secs(2);

/// The queue names and the kind names the pickers offer.
type PickerNames = (Vec<String>, Vec<String>);

/// Counts kept for at most this many queue filters; past it, all are forgotten.
const COUNTS_KEPT: usize = 256;

/// The job list's figures that do not depend on the page: the pickers' names and the tabs'
/// counts per queue filter, each read once for all viewers within its age.
#[derive(Debug, Default)]
pub(crate) struct ListFigures {
    names: tokio::sync::Mutex<Option<(Instant, PickerNames)>>,
    counts: tokio::sync::Mutex<HashMap<Option<String>, (Instant, ListCounts)>>,
}

impl ListFigures {
    /// The queue and kind names of the pickers.
    async fn names(&self, queue: &jobqueue::Queue) -> Result<PickerNames, Failure> {
        let mut kept = self.names.lock().await;
        if let Some((at, names)) = &*kept {
            if at.elapsed() < NAMES_MAX_AGE {
                return Ok(names.clone());
            }
        }
        let names = (
            queue.queue_names(PICKER_NAMES).await?,
            queue.kind_names(PICKER_NAMES).await?,
        );
        *kept = Some((Instant::now(), names.clone()));
        Ok(names)
    }

    /// The pickers' names if they were read within [`NAMES_MAX_AGE`], without reading them.
    async fn cached_names(&self) -> Option<PickerNames> {
        let kept = self.names.lock().await;
        kept.as_ref()
            .filter(|(at, _)| at.elapsed() < NAMES_MAX_AGE)
            .map(|(_, names)| names.clone())
    }

    /// The tabs' counts, in `queue_filter` or in every queue.
    async fn counts(
        &self,
        queue: &jobqueue::Queue,
        queue_filter: Option<&str>,
    ) -> Result<ListCounts, Failure> {
        let key = queue_filter.map(str::to_owned);
        let mut kept = self.counts.lock().await;
        if let Some((at, counts)) = kept.get(&key) {
            if at.elapsed() < COUNTS_MAX_AGE {
                return Ok(counts.clone());
            }
        }
        let counts = queue.list_counts(queue_filter).await?;
        if kept.len() >= COUNTS_KEPT {
            kept.clear();
        }
        kept.insert(key, (Instant::now(), counts.clone()));
        Ok(counts)
    }

    /// Forgets what was read.
    pub(crate) async fn forget(&self) {
        self.names.lock().await.take();
        self.counts.lock().await.clear();
    }
}

/// The names the job list's pickers offer, as JSON (`{"queues": [...], "kinds": [...]}`):
/// what the page's script reads when a picker is first used. Read once for every viewer
/// within [`NAMES_MAX_AGE`]: one index lookup per name, up to [`PICKER_NAMES`] of each.
pub(crate) async fn picker_names(State(s): St) -> Result<Response, Failure> {
    let (queues, kinds) = s.list.names(&s.queue).await?;
    let body = serde_json::json!({ "queues": queues, "kinds": kinds }).to_string();
    Ok((
        [(header::CONTENT_TYPE, "application/json; charset=utf-8")],
        body,
    )
        .into_response())
}

/// One tab per status with its count, in the filter's queue when it names one (an index
/// serves that); links keep the other filters.
async fn tabs(s: &Shared, base: &str, f: &Filter) -> Result<String, Failure> {
    let queue = Some(f.queue.as_str()).filter(|q| !q.is_empty());
    let counts = s.list.counts(&s.queue, queue).await?;
    let others = Filter {
        status: String::new(),
        ..f.clone()
    }
    .to_query();
    let link = |status: &str| {
        let mut q = others.clone();
        if !status.is_empty() {
            if !q.is_empty() {
                q.push('&');
            }
            q.push_str("status=");
            q.push_str(status);
        }
        format!("{}/jobs?{}", esc(base), esc(&q))
    };
    let mut out = format!(
        "<a href=\"{}\"{}>All</a>",
        link(""),
        if f.status.is_empty() {
            " class=\"active\" aria-current=\"page\""
        } else {
            ""
        }
    );
    for status in TABS {
        let n = counts.counts.get(status);
        let shown = if counts.capped.contains(&status) {
            format!("{}+", thousands(n))
        } else {
            thousands(n)
        };
        let active = f.status == status.as_str();
        out.push_str(&format!(
            "<a href=\"{}\" class=\"tab {st}{}\"{}>{st} <span class=\"count{}\">{shown}</span></a>",
            link(status.as_str()),
            if active { " active" } else { "" },
            if active { " aria-current=\"page\"" } else { "" },
            if n == 0 { " zero" } else { "" },
            st = status.as_str(),
        ));
    }
    let scope = match queue {
        Some(q) => format!("counts of queue {}", esc(q)),
        None => "counts of every queue".to_owned(),
    };
    let narrowed = !(f.kind.is_empty()
        && f.key.is_empty()
        && f.meta.is_empty()
        && f.error.is_empty()
        && f.from.is_empty()
        && f.to.is_empty());
    let scope = if narrowed {
        format!("{scope}, before the other filters")
    } else {
        scope
    };
    let age = counts
        .counted_secs_ago
        .map(|a| format!("; waiting, running and failed jobs counted {} ago", age(a)))
        .unwrap_or_default();
    Ok(format!(
        "<nav class=\"tabs\" aria-label=\"Statuses\">{out}<span class=\"muted scope\" title=\"done and cancelled jobs are counted up to {cap}{age}\">{scope}</span></nav>",
        cap = thousands(LIST_COUNT_CAP),
    ))
}

/// Finds a job from the search box of every page: a number is a job id (or, if no job has
/// it, a task key), other text a task key; with no job of that exact key, the list of
/// the jobs whose key starts with it.
pub(crate) async fn search(
    State(s): St,
    orig: OriginalUri,
    uri: Uri,
    Query(q): Query<SearchQuery>,
) -> Page {
    let base = base(&orig, &uri);
    let text = q.q.trim();
    if text.is_empty() {
        return Ok(Redirect::to(&format!("{base}/jobs")).into_response());
    }
    let id = text.strip_prefix('#').unwrap_or(text).parse::<u64>().ok();
    // The status alone: a job whose stored values this library cannot decode is found too.
    if let Some(id) = id {
        if s.queue.job_status(id).await?.is_some() {
            return Ok(Redirect::to(&format!("{base}/jobs/{id}")).into_response());
        }
    }
    // Task keys are the producers' data: with redaction on, the box finds jobs by id only,
    // or it would tell whether a job with a guessed key exists.
    if s.redact {
        return Err(Failure(
            StatusCode::BAD_REQUEST,
            format!(
                "{text:?} is not the id of a job: while job data is redacted, the search box \
                 finds jobs by id only"
            ),
        ));
    }
    match s.queue.job_by_key(text).await {
        Ok(Some(job)) => {
            return Ok(Redirect::to(&format!("{base}/jobs/{}", job.id)).into_response());
        }
        Ok(None) => {}
        // A job this library cannot decode: its id from the listing, which reads none of
        // the values that failed.
        Err(e) => {
            let filter = JobFilter::default().key_prefix(text);
            let page = s.queue.list_summaries(&filter, None, PAGE_SIZE).await?;
            let Some(job) = page.jobs.iter().find(|j| j.task_key == text) else {
                return Err(e.into());
            };
            return Ok(Redirect::to(&format!("{base}/jobs/{}", job.id)).into_response());
        }
    }
    if let Some(id) = id {
        return Err(Failure(
            StatusCode::NOT_FOUND,
            format!("there is no job with id {id} (it may have been deleted or pruned), and no job has the task key {text:?}"),
        ));
    }
    Ok(Redirect::to(&format!("{base}/jobs?key={}", url(text))).into_response())
}

/// The search box's query.
#[derive(Debug, Deserialize, Default)]
pub(crate) struct SearchQuery {
    #[serde(default)]
    q: String,
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
        (
            "Task key",
            format!("<code>{}</code>", esc(&shown_key(&s, &j.task_key))),
        ),
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
                Some(_) if s.redact => format!("(redacted) at {}", opt_time(&j.progress_at)),
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
            if s.redact { String::new() } else { cut_note(e) },
            esc(&shown(&s, &e.text))
        ),
        None => String::new(),
    };
    let metadata = match &j.metadata {
        Some(_) if s.redact => {
            "<section class=\"card\"><h2>Metadata</h2><p class=\"muted\">(redacted)</p></section>"
                .to_owned()
        }
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
                            Some(e) if !e.is_empty() => format!("<pre class=\"error\">{}</pre>", esc(&shown(&s, e))),
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
            // Stored as it is, the history holds the attempts' errors.
            let raw = j.attempt_log.as_ref().map_or("", |l| head(&l.text));
            let raw = &*shown(&s, raw);
            format!(
                "<p class=\"warn unreadable\">The attempt history cannot be read: {}; it is shown as stored{}.</p>\
                 <pre class=\"payload raw\">{}</pre>",
                esc(&shown(&s, reason)),
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
        actions.push_str(&job_buttons(&base, id, j.status));
    }
    let body = format!(
        "<div id=\"live\" data-refresh=\"page\"><div class=\"actions\">{actions}</div><section class=\"card\"><dl class=\"fields\">{dl}</dl></section>\
         {error}{history}{output}{metadata}<section class=\"card\"><h2>Payload</h2>{payload}</section></div>"
    );
    let body = body + &crate::audit::audit_section(&s, id).await;
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
