//! The workers serving the queues.

use super::*;

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
        let state = match (w.gone, w.maintains) {
            (true, _) => "<span class=\"badge failed\">gone</span>",
            (false, true) => {
                "<span class=\"badge active\">live</span> <span class=\"badge\" \
                 title=\"holds the maintenance turn: runs reclaim, promotion, pruning and the \
                 counts for every worker\">maintenance</span>"
            }
            (false, false) => "<span class=\"badge active\">live</span>",
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
         <tbody>{rows}</tbody></table><p class=\"muted\">Workers write a heartbeat every {}s; one silent for {}s is shown as gone. \
         One worker at a time holds the maintenance turn and runs the passes for all.</p></section>",
        jobqueue::admin::HEARTBEAT_INTERVAL.as_secs(),
        jobqueue::admin::WORKER_GONE_AFTER.as_secs()
    );
    Ok(Html(page(&base, "Workers", "Workers", None, &body)).into_response())
}
