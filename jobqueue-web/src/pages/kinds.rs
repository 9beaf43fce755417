//! Per-kind figures: jobs done and failed, failure rate, runtime percentiles and mean wait,
//! over the last hour and the last day.

use jobqueue::admin::KindStats;

use super::*;

#[derive(Debug, Deserialize, Default)]
pub(crate) struct KindsQuery {
    /// The column to sort by (over the day, largest first), or `kind` (by name).
    #[serde(default)]
    sort: String,
}

/// The columns the page sorts by: (query value, header, the day's figure to sort on).
type SortKey = fn(&KindStats) -> f64;
const SORTS: [(&str, &str, SortKey); 6] = [
    ("done", "Done", |k| k.done as f64),
    ("failed", "Failed", |k| k.failed as f64),
    ("rate", "Failure rate", |k| k.failure_rate().unwrap_or(0.0)),
    ("p50", "p50 runtime", |k| {
        k.runtime_percentile(0.5).map_or(0.0, |d| d.as_secs_f64())
    }),
    ("p95", "p95 runtime", |k| {
        k.runtime_percentile(0.95).map_or(0.0, |d| d.as_secs_f64())
    }),
    ("wait", "Mean wait", |k| {
        k.mean_wait().map_or(0.0, |d| d.as_secs_f64())
    }),
];

/// A duration for a table cell: `850 µs`, `12 ms`, `1.4 s`, `3m 5s`, with no-break spaces
/// so that a narrow column does not wrap it.
pub(crate) fn duration(d: Duration) -> String {
    duration_text(d).replace(' ', "\u{a0}")
}

fn duration_text(d: Duration) -> String {
    let s = d.as_secs_f64();
    if s < 0.001 {
        format!("{} µs", d.as_micros())
    } else if s < 1.0 {
        format!("{} ms", d.as_millis())
    } else if s < 60.0 {
        format!("{s:.1} s")
    } else {
        age(s)
    }
}

pub(crate) async fn kinds(
    State(s): St,
    orig: OriginalUri,
    uri: Uri,
    Query(q): Query<KindsQuery>,
) -> Page {
    let base = base(&orig, &uri);
    let hour = s.queue.kind_stats(1).await?;
    let mut day = s.queue.kind_stats(24).await?;
    match SORTS.iter().find(|(name, ..)| *name == q.sort) {
        Some((_, _, key)) => day.sort_by(|a, b| key(b).total_cmp(&key(a))),
        None => day.sort_by(|a, b| a.kind.cmp(&b.kind)),
    }
    let b = esc(&base);
    let cells = |k: Option<&KindStats>| -> String {
        let Some(k) = k else {
            return "<td class=\"n zero\">0</td><td class=\"n zero\">0</td><td class=\"n\">–</td>\
                    <td class=\"n\">–</td><td class=\"n\">–</td><td class=\"n\">–</td>"
                .into();
        };
        let failed = if k.failed > 0 {
            format!(
                "<a href=\"{b}/jobs?kind={}&amp;status=failed\">{}</a>",
                url(&k.kind),
                k.failed
            )
        } else {
            "<span class=\"zero\">0</span>".into()
        };
        let rate = k
            .failure_rate()
            .map(|r| {
                let class = if r >= 0.05 { " class=\"warn\"" } else { "" };
                format!("<span{class}>{:.1}%</span>", r * 100.0)
            })
            .unwrap_or_else(|| "–".into());
        let opt = |d: Option<Duration>| d.map(duration).unwrap_or_else(|| "–".into());
        // The last bucket has no upper bound: its estimate is a floor.
        let pct = |q: f64| match k.runtime_percentile(q) {
            Some(d) if d >= jobqueue::admin::KIND_RUNTIME_BOUNDS[10] => {
                format!("≥\u{a0}{}", duration(d))
            }
            other => opt(other),
        };
        format!(
            "<td class=\"n\">{}</td><td class=\"n\">{failed}</td><td class=\"n\">{rate}</td>\
             <td class=\"n\">{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td>",
            k.done,
            pct(0.5),
            pct(0.95),
            opt(k.mean_wait()),
        )
    };
    let mut rows = String::new();
    for k in &day {
        let queues = k
            .queues
            .iter()
            .map(|q| format!("<a href=\"{b}/queues/{}\">{}</a>", url(q), esc(q)))
            .collect::<Vec<_>>()
            .join(", ");
        rows.push_str(&format!(
            "<tr><th><a href=\"{b}/jobs?kind={}\">{}</a></th><td>{queues}</td>{}<td class=\"sep\"></td>{}</tr>",
            url(&k.kind),
            esc(&k.kind),
            cells(hour.iter().find(|h| h.kind == k.kind)),
            cells(Some(k)),
        ));
    }
    if day.is_empty() {
        rows.push_str(
            "<tr><td colspan=\"15\" class=\"empty\">No job has finished in the last 24 hours \
             (or no worker of this release has counted them yet).</td></tr>",
        );
    }
    let head = |sortable: bool| -> String {
        SORTS
            .iter()
            .map(|(name, label, _)| {
                if sortable && *name == q.sort {
                    format!("<th class=\"n\">{label} ▾</th>")
                } else if sortable {
                    format!("<th class=\"n\"><a href=\"{b}/kinds?sort={name}\" title=\"sort by the last 24 hours\">{label}</a></th>")
                } else {
                    format!("<th class=\"n\">{label}</th>")
                }
            })
            .collect()
    };
    let kind_head = if q.sort.is_empty() || q.sort == "kind" {
        "Kind".to_owned()
    } else {
        format!("<a href=\"{b}/kinds\">Kind</a>")
    };
    let body = format!(
        "<section class=\"card\"><table class=\"kinds\"><thead>\
         <tr><th></th><th></th><th colspan=\"6\">Last hour</th><th class=\"sep\"></th><th colspan=\"6\">Last 24 hours</th></tr>\
         <tr><th>{kind_head}</th><th>Queues</th>{}<th class=\"sep\"></th>{}</tr></thead>\
         <tbody>{rows}</tbody></table>\
         <p class=\"muted\">Jobs that finished done or failed, counted as they finish in 5-minute buckets \
         (so each window is up to 5 minutes longer, and ends 15 to 20 seconds ago); pruned jobs stay counted. \
         Runtime: from a job's last claim to its end; p50 and p95 are estimated from runtime buckets \
         (10 ms, 30 ms, 100 ms … 1000 s). Wait: from when it was due to its claim.</p></section>",
        head(false),
        head(true),
    );
    Ok(Html(page(&base, "Kinds", "Kinds", None, &body)).into_response())
}
