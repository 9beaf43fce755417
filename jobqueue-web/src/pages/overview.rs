//! The overview: queues with their counts, throughput and the live refresh.

use jobqueue::admin::QueueOverviewPage;

use super::*;

/// How many queues the overview shows at most: the busiest, or those a search finds.
pub(crate) const OVERVIEW_QUEUES: usize = 50;

/// The overview's query string: a notice, and the start of the queue names to show.
#[derive(Debug, Deserialize, Default)]
pub(crate) struct OverviewQuery {
    notice: Option<String>,
    /// Show the queues whose names start with this, instead of the busiest.
    #[serde(default)]
    queue: String,
}

pub(crate) async fn overview(
    State(s): St,
    orig: OriginalUri,
    uri: Uri,
    Query(n): Query<OverviewQuery>,
) -> Page {
    let base = base(&orig, &uri);
    let live = overview_body(&s, &base, &n.queue).await?;
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
    let search = if n.queue.is_empty() {
        String::new()
    } else {
        format!("?queue={}", url(&n.queue))
    };
    let body = format!(
        "<div id=\"live\" data-src=\"{}/live{}\">{live}</div>{purge}",
        esc(&base),
        esc(&search)
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
pub(crate) async fn overview_live(
    State(s): St,
    orig: OriginalUri,
    uri: Uri,
    Query(n): Query<OverviewQuery>,
) -> Page {
    let base = base(&orig, &uri);
    Ok(Html(overview_body(&s, &base, &n.queue).await?).into_response())
}

async fn overview_body(s: &Shared, base: &str, search: &str) -> Result<String, Failure> {
    let (page_, minutes) = overview_figures(s, search).await?;
    let stats = &page_.queues;
    let mut per_queue: HashMap<&str, (u64, u64)> = HashMap::new();
    for m in &minutes {
        let e = per_queue.entry(m.queue.as_str()).or_default();
        e.0 += m.done;
        e.1 += m.failed;
    }
    let mut rows = String::new();
    for q in stats {
        rows.push_str(&queue_row(
            s,
            base,
            q,
            per_queue.get(q.queue.as_str()).copied().unwrap_or_default(),
        ));
    }
    if stats.is_empty() && !search.is_empty() {
        rows.push_str(&format!(
            "<tr><td colspan=\"13\" class=\"empty\">No queue name starts with {}.</td></tr>",
            esc(search)
        ));
    } else if stats.is_empty() {
        rows.push_str("<tr><td colspan=\"13\" class=\"empty\">No jobs yet.</td></tr>");
    }
    // The overview's own address: the mount point, or `/` at the root.
    let home = if base.is_empty() {
        "/".to_owned()
    } else {
        esc(base)
    };
    let shown = if !search.is_empty() {
        format!(
            "the first {} queues whose names start with <code>{}</code>{}; <a href=\"{home}\">the busiest</a>",
            stats.len(),
            esc(search),
            if page_.more_idle { " (more match)" } else { "" }
        )
    } else if page_.more > 0 {
        format!(
            "the {} busiest queues (by jobs waiting, running or failed); {} more queues with such jobs \
             are not shown, nor queues that hold only finished jobs",
            stats.len(),
            page_.more
        )
    } else if page_.more_idle {
        format!(
            "{} queues; queues that hold only finished jobs may not all be shown",
            stats.len()
        )
    } else {
        String::new()
    };
    let find = format!(
        "<form method=\"get\" action=\"{home}\" class=\"row queue-search\">\
         <label>Find a queue <input name=\"queue\" value=\"{}\" placeholder=\"name starts with\"></label>\
         <button type=\"submit\">Find</button></form>{}",
        esc(search),
        if shown.is_empty() {
            String::new()
        } else {
            format!("<p class=\"muted\" id=\"more-queues\">Showing {shown}.</p>")
        }
    );
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
         <th class=\"n\">Done/h</th><th class=\"n\">Failed/h</th><th></th></tr></thead><tbody>{rows}</tbody></table>{find}</section>",
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
    stats: QueueOverviewPage,
    minutes: Vec<ThroughputMinute>,
}

/// The overview's figures: fresh ones, or those another viewer read less than
/// [`OVERVIEW_MAX_AGE`] ago. Viewers that come while they are read wait for that read. A
/// search is read for its viewer alone.
async fn overview_figures(
    s: &Shared,
    search: &str,
) -> Result<(QueueOverviewPage, Vec<ThroughputMinute>), Failure> {
    if !search.is_empty() {
        let stats = s
            .queue
            .queue_overview_page(OVERVIEW_QUEUES, Some(search))
            .await?;
        let minutes = s.queue.throughput(60).await?;
        return Ok((stats, minutes));
    }
    let mut cached = s.overview.lock().await;
    if let Some(f) = cached
        .as_ref()
        .filter(|f| f.read_at.elapsed() < OVERVIEW_MAX_AGE)
    {
        return Ok((f.stats.clone(), f.minutes.clone()));
    }
    let stats = s.queue.queue_overview_page(OVERVIEW_QUEUES, None).await?;
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
        "<tr><th><a href=\"{b}/queues/{name}\">{qn}</a></th><td>{state}</td><td class=\"n\">{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td>\
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
