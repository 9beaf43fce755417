//! The `dashboard` scenario: how long each page of the operator dashboard takes on a large
//! table, requested in-process through its router (no socket, no browser).

use std::time::Instant;

use anyhow::{bail, ensure, Context as _};
use axum::body::Body;
use axum::http::{Request, StatusCode};
use axum::Router;
use jobqueue::admin::JobFilter;
use jobqueue::{JobStatus, Queue, Worker};
use jobqueue_web::Dashboard;
use sqlx::MySqlPool;
use tower::ServiceExt as _;

use crate::env::numbers;
use crate::measure::{percentile, thousands};
use crate::report::{Figure, Row};

/// How much the scenario writes and requests.
pub(crate) struct DashboardSizes {
    /// Finished rows (done, every 50th failed).
    pub(crate) finished: u64,
    /// Waiting rows (half ready, half scheduled).
    pub(crate) waiting: u64,
    /// Requests of each page in each run.
    pub(crate) requests: usize,
}

/// Rows per `INSERT ... SELECT`: one statement stays well inside the undo log and the
/// server's packet size.
const CHUNK: u64 = 100_000;
/// Queues and kinds the rows are spread over.
const QUEUES: u64 = 5;
const KINDS: u64 = 10;

/// Writes `finished` finished rows, spread over the last two hours, and `waiting` waiting
/// ones, over [`QUEUES`] queues and [`KINDS`] kinds.
async fn seed(pool: &MySqlPool, s: &DashboardSizes) -> anyhow::Result<()> {
    let spread_us = 2 * 3600 * 1_000_000 / s.finished.max(1);
    let mut base = 0;
    while base < s.finished {
        let chunk = CHUNK.min(s.finished - base);
        let sql = format!(
            "INSERT INTO job_queue (queue, kind, task_key, payload, status, attempts, last_error, \
             created_at, updated_at, run_at, finished_at) \
             SELECT CONCAT('q', n MOD {QUEUES}), CONCAT('kind_', n MOD {KINDS}), CONCAT('done:', n), \
             CONCAT('{{\"n\":', n, '}}'), IF(n MOD 50 = 0, 'failed', 'done'), 1, \
             IF(n MOD 50 = 0, 'the job returned an error', NULL), \
             UTC_TIMESTAMP(6) - INTERVAL ({} - n) * {spread_us} MICROSECOND, UTC_TIMESTAMP(6), \
             UTC_TIMESTAMP(6), UTC_TIMESTAMP(6) - INTERVAL ({} - n) * {spread_us} MICROSECOND \
             FROM {}",
            s.finished,
            s.finished,
            numbers(base, chunk)
        );
        sqlx::query(&sql)
            .persistent(false)
            .execute(pool)
            .await
            .context("cannot seed the finished rows")?;
        base += chunk;
    }
    let mut base = 0;
    while base < s.waiting {
        let chunk = CHUNK.min(s.waiting - base);
        let sql = format!(
            "INSERT INTO job_queue (queue, kind, task_key, payload, status, run_at) \
             SELECT CONCAT('q', n MOD {QUEUES}), CONCAT('kind_', n MOD {KINDS}), CONCAT('wait:', n), \
             CONCAT('{{\"n\":', n, '}}'), IF(n MOD 2 = 0, 'ready', 'scheduled'), \
             UTC_TIMESTAMP(6) + INTERVAL IF(n MOD 2 = 0, -1, 1) * CAST(n AS SIGNED) SECOND \
             FROM {}",
            numbers(base, chunk)
        );
        sqlx::query(&sql)
            .persistent(false)
            .execute(pool)
            .await
            .context("cannot seed the waiting rows")?;
        base += chunk;
    }
    sqlx::raw_sql("ANALYZE TABLE job_queue")
        .execute(pool)
        .await?;
    Ok(())
}

/// One GET through the router, the whole body read; its time in microseconds.
async fn request(router: &Router, path: &str) -> anyhow::Result<(u64, String)> {
    let started = Instant::now();
    let res = router
        .clone()
        // The name a browser on this machine sends: the dashboard answers allowed hosts only.
        .oneshot(
            Request::get(path)
                .header(axum::http::header::HOST, "localhost")
                .body(Body::empty())?,
        )
        .await?;
    let status = res.status();
    let bytes = axum::body::to_bytes(res.into_body(), 64 << 20).await?;
    let took = started.elapsed().as_micros() as u64;
    let body = String::from_utf8_lossy(&bytes).into_owned();
    if status != StatusCode::OK {
        bail!("GET {path} answered {status}: {body}");
    }
    Ok((took, body))
}

/// The address of the job list's "Older" link in `body`, as requested (`&amp;` read back
/// as `&`): whatever its cursor looks like, the next page is what the link names.
fn next_link(body: &str) -> Option<String> {
    let link = body.find("rel=\"next\"")?;
    let start = body[..link].rfind("href=\"")? + "href=\"".len();
    let end = start + body[start..].find('"')?;
    Some(body[start..end].replace("&amp;", "&"))
}

/// Seeds the table, then times each page `s.requests` times in each of `runs` runs.
pub(crate) async fn run(
    url: &str,
    pool: &MySqlPool,
    s: &DashboardSizes,
    runs: u32,
) -> anyhow::Result<Vec<Row>> {
    let began = Instant::now();
    seed(pool, s).await?;
    let fill_secs = began.elapsed().as_secs_f64();
    let rows_label = format!(
        "{} finished + {} waiting rows",
        thousands(s.finished as f64),
        thousands(s.waiting as f64)
    );
    eprintln!("   seeded {rows_label} in {fill_secs:.1} s");
    let queue = Queue::connect(url).await?;
    // A worker of the fleet, idle (its queue has no job), as a dashboard has beside it in
    // production: it counts the queue gauges and the throughput as jobs come and go, so the
    // pages read maintained counts and never count for themselves (which the dashboard
    // does when no worker has for 5 s).
    let worker = Worker::builder(queue.clone())
        .queues(["dashboard-idle"])
        .build()?;
    let fleet = worker.handle();
    let running = tokio::spawn(worker.run());
    let router = Dashboard::new(queue.clone()).router();
    let failed = queue
        .list(&JobFilter::default().status(JobStatus::Failed), None, 1)
        .await?;
    let id = failed
        .jobs
        .first()
        .map(|j| j.id)
        .context("the seeded table has no failed job")?;
    let (_, first) = request(&router, "/jobs").await?;
    let next = next_link(&first).context("the job list has no link to its next page")?;
    let (_, done) = request(&router, "/jobs?status=done").await?;
    let next_done =
        next_link(&done).context("the list of done jobs has no link to its next page")?;
    // The finished rows were enqueued over the last two hours: an hour ago is mid-table.
    let hour_ago: String = sqlx::query_scalar(
        "SELECT DATE_FORMAT(UTC_TIMESTAMP() - INTERVAL 1 HOUR, '%Y-%m-%dT%H:%i')",
    )
    .fetch_one(pool)
    .await?;
    let key = "done:12345";
    let pages: Vec<(String, String)> = vec![
        ("overview".into(), "/".into()),
        ("overview refresh (HTML fragment)".into(), "/live".into()),
        ("jobs, unfiltered".into(), "/jobs".into()),
        ("jobs, status=failed".into(), "/jobs?status=failed".into()),
        ("jobs, status=ready".into(), "/jobs?status=ready".into()),
        // Every failed row is in q0 (n divisible by 50 is divisible by 5): this filter
        // matches nothing, the worst case of a queue-and-status filter.
        (
            "jobs, queue=q3 & status=failed (matches none)".into(),
            "/jobs?queue=q3&status=failed".into(),
        ),
        ("jobs, kind=kind_7".into(), "/jobs?kind=kind_7".into()),
        (
            format!("jobs, key prefix {key}"),
            format!("/jobs?key={}", key.replace(':', "%3A")),
        ),
        ("jobs, status=done".into(), "/jobs?status=done".into()),
        (
            "jobs, status=scheduled".into(),
            "/jobs?status=scheduled".into(),
        ),
        (
            "jobs, status=done & queue=q3".into(),
            "/jobs?status=done&queue=q3".into(),
        ),
        (
            "jobs, status=done & kind=kind_7".into(),
            "/jobs?status=done&kind=kind_7".into(),
        ),
        // Failed rows have n divisible by 50, hence kind_0: no failed job is kind_3.
        (
            "jobs, status=failed & kind=kind_3 (matches none)".into(),
            "/jobs?status=failed&kind=kind_3".into(),
        ),
        ("jobs, queue=q3".into(), "/jobs?queue=q3".into()),
        (
            "jobs, queue=q3 & kind=kind_3".into(),
            "/jobs?queue=q3&kind=kind_3".into(),
        ),
        // n MOD 5 = 3 means n MOD 10 is 3 or 8: q3 has no kind_4.
        (
            "jobs, queue=q3 & kind=kind_4 (matches none)".into(),
            "/jobs?queue=q3&kind=kind_4".into(),
        ),
        (
            "jobs, status=failed & meta tenant=acme (matches none)".into(),
            "/jobs?status=failed&meta=tenant%3Dacme".into(),
        ),
        (
            "jobs, meta tenant=acme (matches none)".into(),
            "/jobs?meta=tenant%3Dacme".into(),
        ),
        (
            "jobs, enqueued to= an hour ago".into(),
            format!("/jobs?to={}", hour_ago.replace(':', "%3A")),
        ),
        // With a status, the time fields bound the time in it: done jobs that finished
        // before an hour ago, a range of the status's index.
        (
            "jobs, status=done & finished to= an hour ago".into(),
            format!("/jobs?status=done&to={}", hour_ago.replace(':', "%3A")),
        ),
        // What the page's script reads when a picker is first used.
        ("pickers' names (JSON)".into(), "/jobs/names".into()),
        ("jobs, next page (keyset cursor)".into(), next),
        ("jobs, status=done, next page".into(), next_done),
        ("one job".into(), format!("/jobs/{id}")),
        ("workers".into(), "/workers".into()),
        ("periodic".into(), "/periodic".into()),
    ];
    // Warm the server's buffer pool and prepared statements once per page.
    for (_, path) in &pages {
        request(&router, path).await?;
    }
    // samples[page][run]: microseconds.
    let mut samples: Vec<Vec<Vec<u64>>> = vec![Vec::new(); pages.len()];
    for _ in 0..runs {
        for (p, (_, path)) in pages.iter().enumerate() {
            let mut times = Vec::with_capacity(s.requests);
            for _ in 0..s.requests {
                // A dashboard of its own per request, so the overview is read each time
                // rather than taken from the figures its viewers share for a second.
                let fresh = Dashboard::new(queue.clone()).router();
                let (took, _) = request(&fresh, path).await?;
                times.push(took);
            }
            samples[p].push(times);
        }
    }
    // The overview counts waiting and failed jobs exactly (the gauges, counted by the
    // worker, or by the scenario's first overview before the worker took its turn), and
    // done ones up to a cap.
    let stats = queue.queue_overview().await?;
    let failed: u64 = stats.iter().map(|q| q.counts.failed).sum();
    let waiting: u64 = stats
        .iter()
        .map(|q| q.counts.ready + q.counts.scheduled)
        .sum();
    let seeded_failed = s.finished.div_ceil(50);
    ensure!(
        failed == seeded_failed && waiting == s.waiting,
        "the overview counts {failed} failed and {waiting} waiting jobs; {seeded_failed} and {} were seeded",
        s.waiting
    );
    fleet.shutdown();
    running.await??;
    queue.mysql_pool().unwrap().close().await;
    let mut rows = Vec::new();
    for (p, (label, path)) in pages.iter().enumerate() {
        for pct in [50.0, 99.0] {
            let runs = &samples[p];
            let pooled: Vec<u64> = runs.iter().flatten().copied().collect();
            let fig = Figure {
                value: percentile(&pooled, pct) / 1000.0,
                runs: runs.iter().map(|r| percentile(r, pct) / 1000.0).collect(),
            };
            let mut row = Row::new("dashboard", format!("{label}, p{pct:.0}"), "ms")
                .lower_is_better()
                .with(Some(fig), None)
                .note("path", path.clone());
            if p == 0 && pct == 50.0 {
                row = row
                    .note(
                        "setup",
                        format!(
                            "{rows_label} in {QUEUES} queues and {KINDS} kinds; each page requested {} times per run \
                             through the router in-process (tower oneshot, body read), after one warm-up request; \
                             a new router per request, so the overview's shared figures are never reused",
                            s.requests
                        ),
                    )
                    .note("seed", format!("{fill_secs:.1} s"));
            }
            crate::scenarios::progress(&row);
            rows.push(row);
        }
    }
    Ok(rows)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn address_of_the_next_link() {
        let body = "<a href=\"/jobs?status=failed&amp;before=123\" rel=\"next\">Older »</a>";
        assert_eq!(
            next_link(body).as_deref(),
            Some("/jobs?status=failed&before=123")
        );
        assert_eq!(next_link("<a href=\"/jobs?before=5\">x</a>"), None);
    }
}
