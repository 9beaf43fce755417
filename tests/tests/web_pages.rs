//! The dashboard's daily-workflow pages over HTTP: per-kind figures (`/kinds`), periodic
//! schedules with "run now", pause and resume (`/periodic`), and one queue's page
//! (`/queues/{queue}`). The runtime behind them is tested in `kind_stats.rs`, the pages in a
//! browser in `web_browser_pages.rs`.

mod web_support;

use axum::http::StatusCode;
use jobqueue::Queue;
use jobqueue_web::Dashboard;
use tests::{fresh_queue, fresh_queue_on, sql_exec, Arg, Backend};
use web_support::{csrf_of, get, post, post_with_cookie};

/// Inserts `n` jobs of `kind` that ended `status` five minutes ago after `run_ms` of
/// running and `wait_ms` of waiting.
async fn finished(
    queue: &Queue,
    queue_name: &str,
    kind: &str,
    status: &str,
    n: u32,
    wait_ms: u64,
    run_ms: u64,
) {
    for _ in 0..n {
        sqlx::query(
            "INSERT INTO job_queue (queue, kind, task_key, payload, status, attempts, max_attempts, \
               finished_at, claimed_at, run_at) \
             SELECT ?, ?, UUID(), '{}', ?, 1, 3, f, f - INTERVAL ? MICROSECOND, f - INTERVAL ? MICROSECOND \
             FROM (SELECT UTC_TIMESTAMP(6) - INTERVAL 5 MINUTE AS f) t",
        )
        .bind(queue_name)
        .bind(kind)
        .bind(status)
        .bind(run_ms * 1000)
        .bind((run_ms + wait_ms) * 1000)
        .execute(queue.mysql_pool().unwrap())
        .await
        .expect("insert a finished job");
    }
}

#[tokio::test]
async fn the_kinds_page_shows_each_kinds_figures_sorted_and_escaped() {
    let queue = fresh_queue("web_kinds").await;
    finished(&queue, "reports", "report", "done", 5, 2_000, 200).await;
    finished(&queue, "reports", "report", "failed", 1, 2_000, 200).await;
    finished(&queue, "mail", "send<b>x", "done", 9, 10, 20).await;
    queue.store().count_throughput().await.unwrap();
    let router = Dashboard::new(queue.clone()).router();

    let page = get(&router, "/kinds").await;
    assert_eq!(page.status, StatusCode::OK, "{}", page.body);
    let body = page.body;
    assert!(
        body.contains("href=\"/jobs?kind=report\">report</a>"),
        "{body}"
    );
    assert!(
        body.contains("href=\"/queues/reports\">reports</a>"),
        "{body}"
    );
    assert!(
        body.contains("href=\"/jobs?kind=report&amp;status=failed\">1</a>"),
        "the failed jobs link to the list: {body}"
    );
    assert!(body.contains("16.7%"), "the failure rate: {body}");
    assert!(body.contains("2.0\u{a0}s"), "the mean wait: {body}");
    assert!(
        body.contains("send&lt;b&gt;x") && !body.contains("send<b>"),
        "{body}"
    );
    assert!(body.contains("href=\"/kinds?sort=failed\""), "{body}");
    // By name; by the day's done jobs, most first.
    let by_name = body.find("send&lt;b&gt;x").unwrap() > body.find(">report</a>").unwrap();
    assert!(by_name, "report before send<b>x by name");
    let sorted = get(&router, "/kinds?sort=done").await.body;
    assert!(
        sorted.find("send&lt;b&gt;x").unwrap() < sorted.find(">report</a>").unwrap(),
        "send (9 done) before report (5): {sorted}"
    );
    assert!(sorted.contains("Done ▾"), "{sorted}");

    let empty = Dashboard::new(fresh_queue("web_kinds_empty").await).router();
    let body = get(&empty, "/kinds").await.body;
    assert!(
        body.contains("No job has finished in the last 24 hours"),
        "{body}"
    );
}

#[tokio::test]
async fn the_periodic_page_runs_pauses_and_resumes_a_schedule() {
    let queue = fresh_queue("web_periodic_actions").await;
    // A kind this program does not register (as for a stand-alone dashboard): its last
    // tick's job gives a manual run its arguments.
    sqlx::query(
        "INSERT INTO job_queue_cron (kind, last_tick, updated_at, schedule) VALUES \
         ('nightly_export', UTC_TIMESTAMP(6) - INTERVAL 1 HOUR, UTC_TIMESTAMP(6), '0 0 3 * * *')",
    )
    .execute(queue.mysql_pool().unwrap())
    .await
    .unwrap();
    let tick = web_support::insert_job(
        &queue,
        "exports",
        "nightly_export",
        "nightly_export@2026-12-01T03:00:00.000000Z",
        "{\"full\": true}",
        "failed",
        Some("disk <full>\n  at export (backup.rs:12)"),
    )
    .await;
    let router = Dashboard::new(queue.clone()).router();
    let page = get(&router, "/periodic").await.body;
    assert!(
        page.contains("nightly_export") && page.contains("0 0 3 * * *"),
        "{page}"
    );
    assert!(
        page.contains(&format!("href=\"/jobs/{tick}\""))
            && page.contains("badge failed")
            && page.contains("disk &lt;full&gt;"),
        "its recent tick: {page}"
    );
    assert!(
        !page.contains("backup.rs"),
        "the error's first line only: {page}"
    );
    assert!(
        page.contains("action=\"/periodic/nightly_export/run\""),
        "{page}"
    );
    let token = csrf_of(&page);

    // Run now: one new job, with a key of its own, shown first and marked.
    let r = post(
        &router,
        "/periodic/nightly_export/run",
        &format!("csrf={token}"),
    )
    .await;
    assert_eq!(r.status, StatusCode::SEE_OTHER, "{}", r.body);
    let to = r.location.unwrap();
    assert!(to.starts_with("/periodic?notice="), "{to}");
    assert!(to.contains("1%20job%20added"), "{to}");
    let keys: Vec<String> = sqlx::query_scalar(
        "SELECT CAST(task_key AS CHAR) FROM job_queue WHERE kind = 'nightly_export' ORDER BY id",
    )
    .fetch_all(queue.mysql_pool().unwrap())
    .await
    .unwrap();
    assert_eq!(keys.len(), 2, "{keys:?}");
    assert!(keys[1].ends_with(" run now"), "{keys:?}");
    let page = get(&router, "/periodic").await.body;
    assert!(page.contains("badge manual\">run now"), "{page}");

    // Pause and resume.
    let r = post(
        &router,
        "/periodic/nightly_export/pause",
        &format!("csrf={token}"),
    )
    .await;
    assert_eq!(r.status, StatusCode::SEE_OTHER);
    assert!(r.location.unwrap().contains("1%20schedule%20changed"));
    let page = get(&router, "/periodic").await.body;
    assert!(page.contains("badge paused"), "{page}");
    assert!(page.contains("none while paused"), "{page}");
    assert!(
        page.contains("action=\"/periodic/nightly_export/resume\""),
        "{page}"
    );
    let r = post(
        &router,
        "/periodic/nightly_export/pause",
        &format!("csrf={token}"),
    )
    .await;
    assert!(r.location.unwrap().contains("0%20schedules%20changed"));
    let r = post(
        &router,
        "/periodic/nightly_export/resume",
        &format!("csrf={token}"),
    )
    .await;
    assert!(r.location.unwrap().contains("1%20schedule%20changed"));
    let paused: Option<chrono::NaiveDateTime> =
        sqlx::query_scalar("SELECT paused_at FROM job_queue_cron WHERE kind = 'nightly_export'")
            .fetch_one(queue.mysql_pool().unwrap())
            .await
            .unwrap();
    assert_eq!(paused, None);
    // Each change is on the audit, with the kind; the pause that changed nothing is not.
    let audit: Vec<(String, Option<String>)> = queue
        .audit_log(10)
        .await
        .unwrap()
        .into_iter()
        .rev()
        .map(|e| (e.action, e.detail))
        .collect();
    let of = |a: &str| (a.to_owned(), Some("nightly_export".to_owned()));
    assert_eq!(
        audit,
        [
            of("periodic-run-now"),
            of("periodic-pause"),
            of("periodic-resume")
        ]
    );

    // Without the page's token, refused; an unknown kind is a 404.
    let r = post_with_cookie(
        &router,
        "/periodic/nightly_export/run",
        "csrf=forged-forged-forged-forged-123",
        Some("another-browsers-token-000000000"),
    )
    .await;
    assert_eq!(r.status, StatusCode::FORBIDDEN, "{}", r.body);
    let r = post(
        &router,
        "/periodic/no_such_kind/pause",
        &format!("csrf={token}"),
    )
    .await;
    assert_eq!(r.status, StatusCode::NOT_FOUND, "{}", r.body);
    assert!(r.body.contains("no periodic schedule"), "{}", r.body);

    // A kind name with a slash, a space and markup: escaped on the page, encoded in the
    // action's path, and found again by the action.
    sqlx::query(
        "INSERT INTO job_queue_cron (kind, last_tick, updated_at, schedule) VALUES \
         ('billing/monthly <b>', UTC_TIMESTAMP(6), UTC_TIMESTAMP(6), '0 0 0 1 * *')",
    )
    .execute(queue.mysql_pool().unwrap())
    .await
    .unwrap();
    let page = get(&router, "/periodic").await.body;
    assert!(
        page.contains("billing/monthly &lt;b&gt;") && !page.contains("monthly <b>"),
        "{page}"
    );
    let action = "/periodic/billing%2Fmonthly%20%3Cb%3E/pause";
    assert!(page.contains(&format!("action=\"{action}\"")), "{page}");
    let r = post(&router, action, &format!("csrf={token}")).await;
    assert_eq!(r.status, StatusCode::SEE_OTHER, "{}", r.body);
    let paused: bool = sqlx::query_scalar(
        "SELECT paused_at IS NOT NULL FROM job_queue_cron WHERE kind = 'billing/monthly <b>'",
    )
    .fetch_one(queue.mysql_pool().unwrap())
    .await
    .unwrap();
    assert!(paused);

    // Read-only: no buttons, and the actions are refused.
    let ro = Dashboard::new(queue.clone()).read_only(true).router();
    let page = get(&ro, "/periodic").await.body;
    assert!(!page.contains("Run now</button>"), "{page}");
    let r = post(
        &ro,
        "/periodic/nightly_export/run",
        &format!("csrf={token}"),
    )
    .await;
    assert_eq!(r.status, StatusCode::FORBIDDEN);
}

/// The SQL of `backend`'s clock (UTC), for rows written by hand.
fn utc_now(backend: Backend) -> &'static str {
    match backend {
        Backend::Postgres => "job_queue_now()",
        _ => "UTC_TIMESTAMP(6)",
    }
}

/// Inserts `n` jobs of queue `queue_name` in `status`, with keys `{prefix}:{i}`.
async fn jobs_in(queue: &Queue, queue_name: &str, prefix: &str, status: &str, n: u32) {
    for i in 0..n {
        let key = format!("{prefix}:{i}");
        web_support::insert_job(queue, queue_name, "send", &key, "{}", status, None).await;
    }
}

async fn the_queue_page_shows_its_counts_limits_and_workers(backend: Backend) {
    let queue = fresh_queue_on(backend, "web_queue_page").await;
    let now = utc_now(backend);
    let holder =
        web_support::insert_job(&queue, "mail", "send", "run:1", "{}", "running", None).await;
    let mut blocked = Vec::new();
    for i in 0..3 {
        blocked.push(
            web_support::insert_job(
                &queue,
                "mail",
                "send",
                &format!("b:{i}"),
                "{}",
                "blocked",
                None,
            )
            .await,
        );
    }
    sql_exec(
        &queue,
        "UPDATE job_queue SET concurrency_key = 'smtp<relay>', concurrency_limit = 1, lease_owner = 'app-1:1:aa' \
         WHERE queue = 'mail'",
        &[],
    )
    .await;
    sql_exec(
        &queue,
        "INSERT INTO job_queue_slot (slot_key, slot_no, job_id, attempt) VALUES ('c:smtp<relay>', 0, ?, 1)",
        &[Arg::Int(holder as i64)],
    )
    .await;
    for id in &blocked {
        sql_exec(
            &queue,
            "INSERT INTO job_queue_blocked (slot_key, priority, job_id) VALUES ('c:smtp<relay>', 0, ?)",
            &[Arg::Int(*id as i64)],
        )
        .await;
    }
    // Jobs in the other statuses, whose limits are none.
    jobs_in(&queue, "mail", "ready", "ready", 2).await;
    jobs_in(&queue, "mail", "later", "scheduled", 5).await;
    jobs_in(&queue, "mail", "done", "done", 4).await;
    jobs_in(&queue, "mail", "failed", "failed", 6).await;
    jobs_in(&queue, "mail", "cancelled", "cancelled", 7).await;
    // A paused queue with jobs of its own.
    jobs_in(&queue, "billing", "bill-ready", "ready", 8).await;
    jobs_in(&queue, "billing", "bill-done", "done", 9).await;
    // One of its jobs waits for a rate key whose two starts of the window are used.
    let rated =
        web_support::insert_job(&queue, "billing", "charge", "rated", "{}", "blocked", None).await;
    sql_exec(
        &queue,
        "UPDATE job_queue SET rate_key = 'api', rate_limit = 2, rate_window_ms = 60000 WHERE id = ?",
        &[Arg::Int(rated as i64)],
    )
    .await;
    sql_exec(
        &queue,
        "INSERT INTO job_queue_blocked (slot_key, priority, job_id) VALUES ('r:api', 0, ?)",
        &[Arg::Int(rated as i64)],
    )
    .await;
    sql_exec(
        &queue,
        &format!(
            "INSERT INTO job_queue_slot (slot_key, slot_no, free_at) VALUES \
             ('r:api', 0, {now} + INTERVAL '30' SECOND), ('r:api', 1, {now} + INTERVAL '40' SECOND)"
        ),
        &[],
    )
    .await;
    sql_exec(
        &queue,
        &format!("INSERT INTO job_queue_pause (queue, paused_at) VALUES ('billing', {now})"),
        &[],
    )
    .await;
    sql_exec(
        &queue,
        &format!(
            "INSERT INTO job_queue_worker (owner, host, pid, version, queues, concurrency, running, started_at, last_seen) VALUES \
             ('app-1:1:aa', 'app-1', 1, '0.3.0', 'mail', 8, 1, {now}, {now}), \
             ('app-2:2:bb', 'app-2', 2, '0.3.0', 'billing', 8, 0, {now}, {now})"
        ),
        &[],
    )
    .await;
    let router = Dashboard::new(queue.clone()).router();
    // The overview (which counts the gauges, never counted yet) links to the queue's page.
    let overview = get(&router, "/").await.body;
    assert!(
        overview.contains("href=\"/queues/mail\">mail</a>"),
        "{overview}"
    );

    let page = get(&router, "/queues/mail").await;
    assert_eq!(page.status, StatusCode::OK, "{}", page.body);
    let body = page.body;
    assert!(body.contains("<h1>Queue mail</h1>"), "{body}");
    assert!(body.contains("action=\"/queues/mail/pause\""), "{body}");
    assert!(
        body.contains("href=\"/jobs?queue=mail&amp;status=blocked\">3</a>"),
        "{body}"
    );
    for (status, n) in [
        ("scheduled", 5),
        ("ready", 2),
        ("running", 1),
        ("done", 4),
        ("failed", 6),
        ("cancelled", 7),
    ] {
        assert!(
            body.contains(&format!(
                "href=\"/jobs?queue=mail&amp;status={status}\">{n}</a>"
            )),
            "{n} {status}: {body}"
        );
    }
    assert!(!body.contains("badge paused"), "mail runs: {body}");
    assert!(
        body.contains("smtp&lt;relay&gt;"),
        "the key, escaped: {body}"
    );
    assert!(body.contains("concurrency: 1"), "{body}");
    assert!(
        body.contains(&format!("href=\"/jobs/{holder}\">#{holder}</a>")),
        "{body}"
    );
    assert!(
        body.contains("app-1:1:aa") && !body.contains("app-2:2:bb"),
        "{body}"
    );

    // Pause from the page, through the queue's existing action, which returns to the page
    // that sent it.
    assert!(
        body.contains("<input type=\"hidden\" name=\"to\" value=\"queue\">"),
        "{body}"
    );
    let token = csrf_of(&body);
    let r = post(
        &router,
        "/queues/mail/pause",
        &format!("csrf={token}&to=queue"),
    )
    .await;
    assert_eq!(r.status, StatusCode::SEE_OTHER);
    let to = r.location.unwrap();
    assert!(to.starts_with("/queues/mail?notice="), "{to}");
    let body = get(&router, "/queues/mail").await.body;
    assert!(
        body.contains("badge paused") && body.contains("action=\"/queues/mail/resume\""),
        "{body}"
    );

    let billing = get(&router, "/queues/billing").await;
    assert_eq!(billing.status, StatusCode::OK, "{}", billing.body);
    let body = billing.body;
    assert!(
        body.contains("badge paused") && body.contains("action=\"/queues/billing/resume\""),
        "{body}"
    );
    for (status, n) in [("ready", 8), ("done", 9)] {
        assert!(
            body.contains(&format!(
                "href=\"/jobs?queue=billing&amp;status={status}\">{n}</a>"
            )),
            "{n} {status}: {body}"
        );
    }
    assert!(
        body.contains("app-2:2:bb") && !body.contains("app-1:1:aa"),
        "{body}"
    );
    assert!(
        body.contains("href=\"/jobs?queue=billing&amp;status=blocked\">1</a>"),
        "{body}"
    );
    assert!(
        body.contains("rate: 2 per") && body.contains("starts, not holders"),
        "{body}"
    );
    assert!(
        body.contains("2 / 2 <small class=\"muted\">next start in"),
        "both starts used, the next one due: {body}"
    );

    let quiet = get(&router, "/queues/idle").await;
    assert_eq!(quiet.status, StatusCode::OK);
    assert!(
        quiet.body.contains("No job of this queue waits"),
        "{}",
        quiet.body
    );
    assert!(
        quiet.body.contains("No worker&#39;s heartbeat")
            || quiet.body.contains("No worker's heartbeat")
    );
    let bad = get(&router, "/queues/not%20a%20queue").await;
    assert_eq!(bad.status, StatusCode::NOT_FOUND, "{}", bad.body);
}

tests::on_every_backend!(the_queue_page_shows_its_counts_limits_and_workers);
