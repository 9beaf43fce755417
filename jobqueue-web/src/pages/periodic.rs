//! The periodic schedules: next and last tick, pause, recent ticks, and the actions "run
//! now", pause and resume.

use jobqueue::admin::TickJob;
use jobqueue::Enqueued;

use super::kinds::duration;
use super::*;

/// An action's form: its anti-forgery token.
#[derive(Debug, Deserialize)]
pub(crate) struct Token {
    #[serde(default)]
    csrf: String,
}

/// How many of each kind's newest jobs the page shows.
const RECENT_TICKS: u32 = 10;

pub(crate) async fn periodic(
    State(s): St,
    orig: OriginalUri,
    uri: Uri,
    Query(n): Query<Notice>,
) -> Page {
    let base = base(&orig, &uri);
    let b = esc(&base);
    let list = s.queue.periodic_ticks(RECENT_TICKS).await?;
    let csrf = crate::csrf();
    let mut cards = String::new();
    for p in &list {
        let j = &p.schedule;
        let kind = url(&j.kind);
        let state = match &p.paused_at {
            Some(at) => format!(
                "<span class=\"badge paused\">paused</span> <small class=\"muted\">since {}</small>",
                time(at)
            ),
            None => "<span class=\"badge active\">active</span>".into(),
        };
        let next = match (&p.paused_at, &j.next_tick) {
            (Some(_), _) => "<span class=\"muted\">none while paused</span>".into(),
            (None, Some(t)) => time(t),
            (None, None) => "–".into(),
        };
        let buttons = if s.read_only {
            String::new()
        } else {
            let toggle = if p.paused_at.is_some() {
                action(
                    &base,
                    &format!("/periodic/{kind}/resume"),
                    &csrf,
                    "Resume",
                    "",
                    &[],
                )
            } else {
                action(
                    &base,
                    &format!("/periodic/{kind}/pause"),
                    &csrf,
                    "Pause",
                    "",
                    &[],
                )
            };
            format!(
                "<div class=\"actions\">{}{toggle}</div>",
                action(
                    &base,
                    &format!("/periodic/{kind}/run"),
                    &csrf,
                    "Run now",
                    "primary",
                    &[]
                )
            )
        };
        // The latest tick's job as the schedulers recorded it: in the list below unless it
        // was pruned or more jobs of the kind came since.
        let last_job = match (j.last_job_id, j.last_job_status) {
            (Some(id), Some(st)) => format!("<a href=\"{b}/jobs/{id}\">#{id}</a> {}", badge(st)),
            (Some(id), None) => format!("#{id} <span class=\"muted\">pruned</span>"),
            (None, _) => "<span class=\"muted\">none yet</span>".into(),
        };
        let mut ticks = String::new();
        for t in &p.recent {
            ticks.push_str(&tick_row(&s, &base, t));
        }
        if p.recent.is_empty() {
            ticks.push_str(
                "<tr><td colspan=\"6\" class=\"empty\">No job of this kind in the table.</td></tr>",
            );
        }
        cards.push_str(&format!(
            "<section class=\"card periodic\" id=\"periodic-{kind}\"><h2><a href=\"{b}/jobs?kind={kind}\">{}</a> \
             <code>{}</code> {state}</h2>\
             <dl class=\"fields\"><dt>Next tick (UTC)</dt><dd>{next}</dd><dt>Last tick dealt with (UTC)</dt><dd>{}</dd>\
             <dt>Latest tick's job</dt><dd>{last_job}</dd></dl>\
             {buttons}<table class=\"ticks\"><thead><tr><th>Job</th><th>Due (UTC)</th><th>Status</th><th class=\"n\">Runtime</th>\
             <th>Started (UTC)</th><th>Error</th></tr></thead><tbody>{ticks}</tbody></table></section>",
            esc(&j.kind),
            esc(j.schedule.as_deref().unwrap_or("schedule unknown")),
            time(&j.last_tick),
        ));
    }
    if list.is_empty() {
        cards.push_str(
            "<section class=\"card\"><p class=\"empty\">No periodic job has ticked yet.</p></section>",
        );
    }
    let body = format!(
        "{cards}<p class=\"muted\">Each schedule's {RECENT_TICKS} newest jobs, newest first. \
         Run now enqueues one job of the kind at once, beside its schedule (shown as \"run now\"); \
         a paused schedule enqueues no tick, and on resume goes on with its next tick, without the missed ones.</p>"
    );
    Ok(Html(page(
        &base,
        "Periodic jobs",
        "Periodic",
        n.notice.as_deref(),
        &body,
    ))
    .into_response())
}

fn tick_row(s: &Shared, base: &str, t: &TickJob) -> String {
    let runtime = match (t.claimed_at, t.finished_at) {
        (Some(c), Some(f)) => (f - c).to_std().map(duration).unwrap_or_default(),
        _ => "–".into(),
    };
    let manual = if t.manual {
        " <span class=\"badge manual\">run now</span>"
    } else {
        ""
    };
    format!(
        "<tr><td><a href=\"{}/jobs/{id}\">#{id}</a>{manual}</td><td>{}</td><td>{}</td><td class=\"n\">{runtime}</td>\
         <td>{}</td><td class=\"error\">{}</td></tr>",
        esc(base),
        time(&t.run_at),
        badge(t.status),
        t.claimed_at.as_ref().map(time).unwrap_or_else(|| "–".into()),
        esc(&shown(s, &t.last_error.as_deref().map(first_line).unwrap_or_default())),
        id = t.id,
    )
}

/// Where an action on the schedule of `kind` returns to: its card on the periodic page.
fn periodic_page(orig: &OriginalUri, uri: &Uri) -> String {
    format!("{}/periodic", action_base(orig, uri))
}

pub(crate) async fn periodic_run(
    State(s): St,
    orig: OriginalUri,
    uri: Uri,
    headers: HeaderMap,
    Path(kind): Path<String>,
    Form(c): Form<Token>,
) -> Page {
    check_action(&s, &headers, &c.csrf).await?;
    let msg = match s.queue.run_periodic_now(&kind).await.map_err(refused)? {
        Enqueued::New(id) => {
            crate::audit::record(&s, "periodic-run-now", &[id], None, &kind).await;
            format!("{kind}: job {id} enqueued to run now (1 job added).")
        }
        _ => format!("{kind}: a run was enqueued this very moment already: 0 jobs added."),
    };
    s.forget_figures().await;
    Ok(back(periodic_page(&orig, &uri), &msg))
}

pub(crate) async fn periodic_pause(
    State(s): St,
    orig: OriginalUri,
    uri: Uri,
    headers: HeaderMap,
    Path(kind): Path<String>,
    Form(c): Form<Token>,
) -> Page {
    check_action(&s, &headers, &c.csrf).await?;
    let msg = if s.queue.pause_periodic(&kind).await.map_err(refused)? {
        crate::audit::record(&s, "periodic-pause", &[], None, &kind).await;
        format!("{kind} paused: no tick is enqueued until it is resumed (1 schedule changed).")
    } else {
        format!("{kind} was already paused: 0 schedules changed.")
    };
    Ok(back(periodic_page(&orig, &uri), &msg))
}

pub(crate) async fn periodic_resume(
    State(s): St,
    orig: OriginalUri,
    uri: Uri,
    headers: HeaderMap,
    Path(kind): Path<String>,
    Form(c): Form<Token>,
) -> Page {
    check_action(&s, &headers, &c.csrf).await?;
    let msg = if s.queue.resume_periodic(&kind).await.map_err(refused)? {
        crate::audit::record(&s, "periodic-resume", &[], None, &kind).await;
        format!("{kind} resumed: it goes on with its next tick; the ticks missed while paused are not enqueued (1 schedule changed).")
    } else {
        format!("{kind} was not paused: 0 schedules changed.")
    };
    Ok(back(periodic_page(&orig, &uri), &msg))
}

/// An action the API refused for its argument (an unknown kind) is the client's mistake.
fn refused(e: jobqueue::Error) -> Failure {
    match e {
        jobqueue::Error::InvalidSetting { .. } => Failure(StatusCode::NOT_FOUND, e.to_string()),
        other => Failure::from(other),
    }
}
