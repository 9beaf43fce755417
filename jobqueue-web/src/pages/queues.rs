//! One queue's page: its state with pause and resume, its counts with links to its jobs,
//! the limit keys its blocked jobs wait for (their limits and holders), and its workers.

use jobqueue::admin::{BlockingKey, LimitKind, QueueDetail};

use super::kinds::duration;
use super::*;

pub(crate) async fn queue_page(
    State(s): St,
    orig: OriginalUri,
    uri: Uri,
    Path(name): Path<String>,
    Query(n): Query<Notice>,
) -> Page {
    let base = base(&orig, &uri);
    let q = s.queue.queue_detail(&name).await.map_err(|e| match e {
        jobqueue::Error::InvalidQueue { .. } => Failure(StatusCode::NOT_FOUND, e.to_string()),
        other => Failure::from(other),
    })?;
    let body = format!(
        "{}{}{}{}",
        state_card(&s, &base, &q),
        counts_card(&base, &q),
        limits_card(&s, &base, &q),
        workers_card(&base, &q)
    );
    Ok(Html(page(
        &base,
        &format!("Queue {}", q.queue),
        "Overview",
        n.notice.as_deref(),
        &body,
    ))
    .into_response())
}

fn state_card(s: &Shared, base: &str, q: &QueueDetail) -> String {
    let name = url(&q.queue);
    let (state, button) = if q.paused {
        (
            "<span class=\"badge paused\">paused</span> no worker claims from it",
            action(
                base,
                &format!("/queues/{name}/resume"),
                &crate::csrf(),
                "Resume",
                "primary",
                &[("to", "queue")],
            ),
        )
    } else {
        (
            "<span class=\"badge active\">active</span>",
            action(
                base,
                &format!("/queues/{name}/pause"),
                &crate::csrf(),
                "Pause",
                "",
                &[("to", "queue")],
            ),
        )
    };
    let button = if s.read_only { String::new() } else { button };
    format!(
        "<section class=\"card\"><div class=\"actions\"><span id=\"queue-state\">{state}</span>{button}\
         <a class=\"button\" href=\"{b}/jobs?queue={name}\">All its jobs</a></div>\
         <dl class=\"fields\"><dt>Oldest ready job</dt><dd>{}</dd><dt>Counted</dt><dd>{}</dd></dl></section>",
        q.oldest_ready_secs
            .map(|s| format!("{} old", age(s)))
            .unwrap_or_else(|| "none ready".into()),
        q.counted_secs_ago
            .map(|s| {
                format!(
                    "scheduled to failed {} ago (the queue gauges); done and cancelled now, up to {}",
                    age(s),
                    jobqueue::admin::OVERVIEW_COUNT_CAP
                )
            })
            .unwrap_or_else(|| "not yet: no worker has counted the gauges".into()),
        b = esc(base),
    )
}

fn counts_card(base: &str, q: &QueueDetail) -> String {
    let name = url(&q.queue);
    let cells: String = [
        JobStatus::Scheduled,
        JobStatus::Ready,
        JobStatus::Blocked,
        JobStatus::Running,
        JobStatus::Done,
        JobStatus::Failed,
        JobStatus::Cancelled,
    ]
    .iter()
    .map(|&st| {
        let n = q.counts.get(st);
        let more = if q.capped.contains(&st) { "+" } else { "" };
        let value = if n == 0 {
            "<span class=\"zero\">0</span>".to_owned()
        } else {
            format!(
                "<a href=\"{}/jobs?queue={name}&amp;status={st}\">{n}{more}</a>",
                esc(base)
            )
        };
        format!("<td>{}<div class=\"count\">{value}</div></td>", badge(st))
    })
    .collect();
    format!(
        "<section class=\"card\"><h2>Jobs by status</h2><table class=\"counts\"><tbody><tr>{cells}</tr></tbody></table></section>"
    )
}

fn limits_card(s: &Shared, base: &str, q: &QueueDetail) -> String {
    let b = esc(base);
    if q.limits.is_empty() {
        return format!(
            "<section class=\"card\"><h2>Limits</h2><p class=\"muted\" id=\"no-limits\">{}</p></section>",
            if q.counts.blocked == 0 {
                "No job of this queue waits for a concurrency or rate limit."
            } else {
                "Its blocked jobs wait for no key any more (a wake is under way)."
            }
        );
    }
    let mut rows = String::new();
    for k in &q.limits {
        rows.push_str(&limit_row(s, base, k));
    }
    let read = if q.blocked_read >= 500 {
        format!("of the first {} blocked jobs of this queue", q.blocked_read)
    } else {
        format!("of its {} blocked jobs", q.blocked_read)
    };
    format!(
        "<section class=\"card\"><h2>Limits holding its jobs <small>the keys {read} wait for, most waiting first</small></h2>\
         <table class=\"limits\"><thead><tr><th>Key</th><th>Limit</th><th class=\"n\">In use</th><th class=\"n\">Blocked here</th>\
         <th class=\"n\">Waiting (all queues)</th><th>Held by</th></tr></thead><tbody>{rows}</tbody></table>\
         <p class=\"muted\"><a href=\"{b}/jobs?queue={}&amp;status=blocked\">List its blocked jobs</a></p></section>",
        url(&q.queue)
    )
}

fn limit_row(s: &Shared, base: &str, k: &BlockingKey) -> String {
    let (limit, in_use) = match k.limit_kind {
        LimitKind::Rate => (
            format!(
                "rate: {} per {}",
                k.limit,
                k.window.map(duration).unwrap_or_default()
            ),
            match k.next_start_secs {
                Some(s) => format!(
                    "{} / {} <small class=\"muted\">next start in {}</small>",
                    k.busy,
                    k.limit,
                    age(s)
                ),
                None => format!("{} / {}", k.busy, k.limit),
            },
        ),
        _ => (
            format!("concurrency: {}", k.limit),
            format!("{} / {}", k.busy, k.limit),
        ),
    };
    let holders = k
        .holders
        .iter()
        .map(|h| {
            let what = match &h.job {
                Some((kind, queue, status)) => format!(
                    " <small>{} in {} {}</small>",
                    esc(kind),
                    esc(queue),
                    badge(*status)
                ),
                None => " <small class=\"muted\">pruned</small>".into(),
            };
            let owner = h
                .lease_owner
                .as_deref()
                .map(|o| format!(" <small class=\"muted\">on {}</small>", esc(o)))
                .unwrap_or_default();
            format!(
                "<div><a href=\"{}/jobs/{id}\">#{id}</a>{what}{owner}</div>",
                esc(base),
                id = h.id
            )
        })
        .collect::<String>();
    let holders = match k.limit_kind {
        LimitKind::Rate => "<span class=\"muted\">starts, not holders</span>".to_owned(),
        _ if holders.is_empty() => "<span class=\"muted\">none</span>".to_owned(),
        _ => holders,
    };
    format!(
        "<tr><td class=\"key\">{}</td><td>{limit}</td><td class=\"n\">{in_use}</td><td class=\"n\">{}</td>\
         <td class=\"n\">{}{}</td><td>{holders}</td></tr>",
        esc(&shown(s, &k.key)),
        k.blocked_here,
        k.waiting,
        if k.waiting_capped { "+" } else { "" },
    )
}

fn workers_card(base: &str, q: &QueueDetail) -> String {
    let mut rows = String::new();
    for w in &q.workers {
        let state = if w.gone {
            "<span class=\"badge failed\">gone</span>"
        } else {
            "<span class=\"badge active\">live</span>"
        };
        rows.push_str(&format!(
            "<tr><td>{state}</td><td class=\"key\">{}</td><td>{}</td><td class=\"n\">{} / {}</td><td>{}</td><td>{} ago</td></tr>",
            esc(&w.owner),
            esc(&w.host),
            w.running,
            w.concurrency,
            esc(&w.queues.join(", ")),
            age(w.seen_secs_ago),
        ));
    }
    if q.workers.is_empty() {
        rows.push_str("<tr><td colspan=\"6\" class=\"empty\">No worker's heartbeat lists this queue.</td></tr>");
    }
    format!(
        "<section class=\"card\"><h2>Workers serving it <small><a href=\"{}/workers\">all workers</a></small></h2>\
         <table class=\"workers\"><thead><tr><th>State</th><th>Owner</th><th>Host</th><th class=\"n\">Running / slots</th>\
         <th>Queues</th><th>Last heartbeat</th></tr></thead><tbody>{rows}</tbody></table></section>",
        esc(base)
    )
}
