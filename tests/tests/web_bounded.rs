//! The dashboard on a hostile table: rows written with plain SQL that are huge, that hold JSON
//! the server accepts and this library cannot read, or text that is not JSON, and 20,000
//! queues. Every page answers in bounded time, shows what it cannot parse as escaped text
//! with a warning (keeping the job's actions), and the process's memory stays bounded.
//! Its own binary: the memory figures are the process's.

#[path = "web_support/hostile.rs"]
mod hostile;
mod web_support;

use std::time::{Duration, Instant};

use axum::http::StatusCode;
use hostile::{seed, BIG_ARRAY_ITEMS};
use jobqueue::Queue;
use jobqueue_web::Dashboard;
use tests::fresh_queue;
use web_support::{get, insert_job, post, Reply};

/// How long one page may take. A page of this table took 1 to 35 ms here in a debug build
/// (the list reads 50 rows through an index, the job page one row by primary key with its
/// large columns cut by the server), the overview 0.1 s (the gauges' 20,000 rows and a few
/// lookups per queue shown); 5 s is 50 times the slowest, for a loaded 2-core machine. A
/// filter no index serves stops at the server's 1 s limit. Before this bound, the overview
/// took 38 s and the list decoded 160 MiB of payloads.
const PAGE_BOUND: Duration = Duration::from_secs(5);

/// How long the first overview may take: it counts the queue gauges first (see below).
const FIRST_OVERVIEW_BOUND: Duration = Duration::from_secs(20);

/// How much the process's peak memory may grow while the pages are read: the list page
/// alone has 160 MiB of payloads among its rows, and reads none of them.
const MEMORY_BOUND_KIB: u64 = 64 * 1024;

/// A line of `/proc/self/status` in KiB (`VmHWM`: the peak resident size; `VmRSS`: now).
fn proc_status_kib(field: &str) -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").expect("read /proc/self/status");
    status
        .lines()
        .find_map(|l| l.strip_prefix(field)?.strip_prefix(':'))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or_else(|| panic!("{field} in /proc/self/status"))
}

/// GET `path`, timed: it answers 200 within [`PAGE_BOUND`], or, for a filter no index
/// serves, with the page that says so.
async fn page(router: &axum::Router, path: &str, timings: &mut Vec<(String, Duration)>) -> Reply {
    page_within(router, path, PAGE_BOUND, timings).await
}

/// [`page`] within `bound`.
async fn page_within(
    router: &axum::Router,
    path: &str,
    bound: Duration,
    timings: &mut Vec<(String, Duration)>,
) -> Reply {
    let start = Instant::now();
    let reply = get(router, path).await;
    let took = start.elapsed();
    timings.push((path.to_owned(), took));
    assert_eq!(reply.status, StatusCode::OK, "{path}: {}", reply.body);
    assert!(took < bound, "{path} took {took:?}, more than {bound:?}");
    reply
}

#[tokio::test]
async fn every_page_answers_in_bounded_time_and_memory_on_a_hostile_table() {
    let queue = fresh_queue("web_bounded").await;
    let h = seed(&queue).await;
    let big_bytes: i64 = sqlx::query_scalar(
        "SELECT CAST(SUM(LENGTH(payload)) AS SIGNED) FROM job_queue WHERE queue = 'big'",
    )
    .fetch_one(queue.mysql_pool().unwrap())
    .await
    .unwrap();
    assert!(big_bytes >= 160 << 20, "{big_bytes} bytes of payloads");
    let router = Dashboard::new(queue.clone()).router();
    let mut timings = Vec::new();

    // The first look at the overview counts the gauges, which nobody has (no worker runs
    // here): once, over every active job, and writes 20,000 rows of them. It took 0.6 to
    // 1.1 s here; a worker does it in the background in production.
    let hwm_before = proc_status_kib("VmHWM");
    let overview = page_within(&router, "/", FIRST_OVERVIEW_BOUND, &mut timings).await;
    assert!(
        overview
            .body
            .contains("19952 more queues with such jobs are not shown"),
        "the overview says how many queues it leaves out: {}",
        overview.body
    );
    assert!(
        overview.body.contains("name=\"queue\""),
        "a queue search box"
    );
    let rows = overview.body.matches("<tr><th><a ").count();
    assert!(rows <= 50, "at most 50 queues shown, not {rows}");
    // Found by name through the queue index: the names have 5 digits, so q12340 to q12349.
    let found = page(&router, "/?queue=q1234", &mut timings).await;
    for n in 12340..12350 {
        assert!(
            found.body.contains(&format!(">q{n}</a>")),
            "q{n} found: {}",
            found.body
        );
    }
    assert!(!found.body.contains(">q12350</a>"));
    page(&router, "/live", &mut timings).await;
    page(&router, "/live?queue=hostile", &mut timings).await;

    // The list: no payload is read, so the 40 big ones cost what small ones do.
    let list = page(&router, "/jobs", &mut timings).await;
    assert!(
        list.body.contains(&format!("/jobs/{}\"", h.big)),
        "{}",
        list.body
    );
    assert!(
        list.body.len() < 256 * 1024,
        "the list page is {} bytes",
        list.body.len()
    );
    let failed = page(&router, "/jobs?status=failed", &mut timings).await;
    assert!(failed.body.contains("too big"));
    let error_page = page(&router, "/jobs?queue=hostile", &mut timings).await;
    assert!(error_page.body.contains(&format!("/jobs/{}\"", h.payload)));
    assert!(
        error_page.body.len() < 256 * 1024,
        "the long error is cut in the list"
    );
    for status in [
        "scheduled",
        "ready",
        "blocked",
        "running",
        "done",
        "failed",
        "cancelled",
    ] {
        page(&router, &format!("/jobs?status={status}"), &mut timings).await;
        page(
            &router,
            &format!("/jobs?status={status}&queue=big"),
            &mut timings,
        )
        .await;
        page(
            &router,
            &format!("/jobs?status={status}&queue=nomatch"),
            &mut timings,
        )
        .await;
        page(
            &router,
            &format!("/jobs?status={status}&kind=huge"),
            &mut timings,
        )
        .await;
        page(
            &router,
            &format!("/jobs?status={status}&key=big%3A"),
            &mut timings,
        )
        .await;
        page(
            &router,
            &format!("/jobs?status={status}&meta=t%3Dx"),
            &mut timings,
        )
        .await;
        page(
            &router,
            &format!("/jobs?status={status}&from=2000-01-01T00:00&to=2000-01-02T00:00"),
            &mut timings,
        )
        .await;
    }
    for filter in [
        "queue=big",
        "kind=huge",
        "kind=nomatch",
        "queue=q00001&kind=nomatch",
        "key=big%3A",
        "key=zz",
        "meta=t%3Dx",
        "to=2000-01-01T00:00",
        "from=2000-01-01T00:00",
    ] {
        page(&router, &format!("/jobs?{filter}"), &mut timings).await;
    }
    // The pages that follow the first, from its cursor.
    let next = list
        .body
        .split("cursor=")
        .nth(1)
        .and_then(|r| r.split('"').next())
        .expect("the list has a next page")
        .to_owned();
    page(&router, &format!("/jobs?cursor={next}"), &mut timings).await;

    // Each hostile job's page: the unreadable column as escaped text under a warning, the
    // rest of the page and its actions as usual.
    let warning = "cannot be read as JSON";
    let p = page(&router, &format!("/jobs/{}", h.payload), &mut timings).await;
    assert!(
        p.body.contains(warning) && p.body.contains("This payload"),
        "{}",
        p.body
    );
    assert!(p.body.contains("{&quot;n&quot;: 1e400}"), "{}", p.body);
    assert!(
        p.body.contains(&format!("/jobs/{}/retry", h.payload)),
        "Retry stays"
    );
    let p = page(&router, &format!("/jobs/{}", h.metadata), &mut timings).await;
    assert!(
        p.body.contains("This metadata") && p.body.contains("[1e400]"),
        "{}",
        p.body
    );
    assert!(
        p.body.contains(&format!("/jobs/{}/retry", h.metadata)),
        "Retry stays"
    );
    let p = page(&router, &format!("/jobs/{}", h.progress), &mut timings).await;
    assert!(
        p.body.contains("This progress") && p.body.contains("1e400"),
        "{}",
        p.body
    );
    assert!(
        p.body.contains(&format!("/jobs/{}/cancel", h.progress)),
        "Cancel stays"
    );
    let p = page(&router, &format!("/jobs/{}", h.all), &mut timings).await;
    assert_eq!(
        p.body.matches(warning).count(),
        3,
        "each column on its own: {}",
        p.body
    );
    assert!(
        p.body.contains(&format!("/jobs/{}/cancel", h.all)),
        "Cancel stays"
    );
    let p = page(&router, &format!("/jobs/{}", h.output), &mut timings).await;
    assert!(p.body.contains("This output"), "{}", p.body);
    assert!(
        p.body.contains("not json &lt;b&gt;at all&lt;/b&gt;"),
        "{}",
        p.body
    );
    let p = page(&router, &format!("/jobs/{}", h.history), &mut timings).await;
    assert!(
        p.body.contains("The attempt history cannot be read"),
        "{}",
        p.body
    );
    assert!(p.body.contains("not a history &lt;i&gt;"), "{}", p.body);
    assert!(
        p.body.contains(&format!("/jobs/{}/retry", h.history)),
        "Retry stays"
    );
    let p = page(&router, &format!("/jobs/{}", h.long_error), &mut timings).await;
    assert!(
        p.body.contains("&lt;e&gt;eeee") && p.body.contains("e!</pre>"),
        "the whole error"
    );
    let p = page(&router, &format!("/jobs/{}", h.big), &mut timings).await;
    assert!(
        p.body.contains(&format!(
            "{} bytes; showing the first 64 KiB",
            2 * BIG_ARRAY_ITEMS + 1
        )),
        "{}",
        &p.body[..p.body.len().min(4000)]
    );
    assert!(
        p.body.len() < 256 * 1024,
        "the job page is {} bytes",
        p.body.len()
    );
    assert!(
        p.body.contains(&format!("/jobs/{}/retry", h.big)),
        "Retry stays"
    );

    page(&router, "/workers", &mut timings).await;
    page(&router, "/periodic", &mut timings).await;
    for bulk in [
        "/bulk?action=retry",
        "/bulk?action=cancel",
        "/bulk?action=retry&status=failed&queue=big",
        "/bulk?action=cancel&meta=t%3Dx",
        "/bulk?action=retry&to=2000-01-01T00:00",
    ] {
        let b = page(&router, bulk, &mut timings).await;
        assert!(b.body.contains("bulk-count"), "{bulk}: {}", b.body);
    }

    // The overview again, on a new router (none of the figures the first shares for a
    // second): read from the gauges counted above.
    let fresh = Dashboard::new(queue.clone()).router();
    page(&fresh, "/", &mut timings).await;

    let hwm_after = proc_status_kib("VmHWM");
    let rss = proc_status_kib("VmRSS");
    let mut slowest = timings.clone();
    slowest.sort_by_key(|(_, t)| std::cmp::Reverse(*t));
    println!(
        "{} pages; peak memory {hwm_before} KiB before, {hwm_after} KiB after (now {rss} KiB); slowest: {:?}",
        timings.len(),
        &slowest[..8.min(slowest.len())]
    );
    for (path, took) in &timings {
        println!("{:>8.1} ms  {path}", took.as_secs_f64() * 1000.0);
    }
    assert!(
        hwm_after - hwm_before < MEMORY_BOUND_KIB,
        "the peak memory grew by {} KiB reading the pages, more than {MEMORY_BOUND_KIB} KiB",
        hwm_after - hwm_before
    );
}

#[tokio::test]
async fn a_job_this_library_cannot_decode_is_still_acted_on() {
    let queue = fresh_queue("web_bounded_act").await;
    let ready = insert_job(&queue, "q", "k", "k:ready", "[1e400]", "ready", None).await;
    let failed = insert_job(&queue, "q", "k", "k:failed", "[1e400]", "failed", None).await;
    // Not retried (it is ready), and said so, rather than an error reading the row.
    assert!(!queue.retry(ready).await.expect("retry a ready job"));
    assert!(queue.retry(failed).await.expect("retry a failed job"));
    assert_eq!(
        queue.cancel(ready).await.expect("cancel"),
        jobqueue::admin::CancelOutcome::Cancelled
    );
    let detail = queue.job_detail(failed).await.unwrap().expect("the job");
    assert_eq!(detail.status, jobqueue::JobStatus::Ready);
    assert_eq!(detail.payload.text, "[1e400]");
    assert!(matches!(
        detail.payload.json(),
        jobqueue::admin::StoredJson::Unreadable(_)
    ));

    // From the dashboard: found by id and by key, and run now, without decoding it.
    let scheduled = insert_job(&queue, "q", "k", "k:later", "[1e400]", "scheduled", None).await;
    let router = jobqueue_web::Dashboard::new(queue.clone()).router();
    for q in [failed.to_string(), "k%3Afailed".to_owned()] {
        let r = web_support::get(&router, &format!("/search?q={q}")).await;
        assert_eq!(
            r.location.as_deref(),
            Some(format!("/jobs/{failed}").as_str()),
            "{q}: {} {}",
            r.status,
            r.body
        );
    }
    let token = web_support::csrf_of(&web_support::get(&router, "/").await.body);
    for id in [scheduled, scheduled] {
        // The second time it is ready: the notice names its status.
        let r = web_support::post(
            &router,
            &format!("/jobs/{id}/run-now"),
            &format!("csrf={token}"),
        )
        .await;
        assert_eq!(r.status, axum::http::StatusCode::SEE_OTHER, "{}", r.body);
    }
    assert_eq!(
        queue.job_status(scheduled).await.unwrap(),
        Some(jobqueue::JobStatus::Ready)
    );
}

#[tokio::test]
async fn the_attempt_history_shown_is_capped() {
    let queue = fresh_queue("web_bounded_history").await;
    let id = insert_job(&queue, "q", "k", "k:history", "{}", "failed", Some("x")).await;
    // 30 attempts with errors of 5,000 bytes: more than the library keeps, written by hand.
    let log: Vec<serde_json::Value> = (1..=30)
        .map(|n| {
            serde_json::json!({
                "attempt": n, "started_at": "2026-12-01 07:50:00.000000",
                "ended_at": "2026-12-01 07:50:01.000000", "worker": "w",
                "outcome": "retry", "error": "e".repeat(5000),
            })
        })
        .collect();
    sqlx::query("UPDATE job_queue SET attempt_log = ? WHERE id = ?")
        .bind(serde_json::Value::Array(log).to_string())
        .bind(id)
        .execute(queue.mysql_pool().unwrap())
        .await
        .unwrap();
    let detail = queue.job_detail(id).await.unwrap().expect("the job");
    let history = detail.history.expect("a history this library reads");
    let numbers: Vec<u32> = history.iter().map(|a| a.attempt).collect();
    assert_eq!(
        numbers,
        (11..=30).rev().collect::<Vec<_>>(),
        "the newest 20"
    );
    assert!(history
        .iter()
        .all(|a| a.error.as_deref().map(str::len) == Some(2048)));
    let router = Dashboard::new(queue.clone()).router();
    let page = get(&router, &format!("/jobs/{id}")).await;
    assert_eq!(page.status, StatusCode::OK);
    assert_eq!(
        page.body.matches("<td class=\"outcome-retry\">").count(),
        20
    );
}

#[tokio::test]
async fn numbers_out_of_range_are_refused_with_400() {
    let queue = fresh_queue("web_bounded_400").await;
    let router = Dashboard::new(queue.clone()).router();
    for path in [
        "/jobs/99999999999999999999",
        "/jobs/-1",
        "/jobs?cursor=18446744073709551616",
        "/jobs?cursor=done.99999999999999999999.1",
        "/jobs?status=done&cursor=done.9223372036854775807.1",
        "/jobs?cursor=done.1.18446744073709551616",
    ] {
        let reply = get(&router, path).await;
        assert_eq!(
            reply.status,
            StatusCode::BAD_REQUEST,
            "{path}: {}",
            reply.body
        );
        assert!(!reply.body.is_empty(), "{path}: a message");
    }
}

#[tokio::test]
async fn a_bulk_action_goes_in_bounded_steps_and_says_how_far_it_got() {
    let queue = fresh_queue("web_bounded_bulk").await;
    // 12,500 failed jobs: more than one request's share (10,000).
    for chunk in 0..25 {
        let values: Vec<String> = (0..500)
            .map(|i| {
                let n = chunk * 500 + i;
                format!("('bulk', 'k', 'bulk:{n}', '{{}}', 'failed', UTC_TIMESTAMP(6))")
            })
            .collect();
        sqlx::query(&format!(
            "INSERT INTO job_queue (queue, kind, task_key, payload, status, finished_at) VALUES {}",
            values.join(",")
        ))
        .execute(queue.mysql_pool().unwrap())
        .await
        .unwrap();
    }
    let router = Dashboard::new(queue.clone()).router();
    let confirm = get(&router, "/bulk?action=retry&queue=bulk").await;
    assert!(confirm.body.contains("more than 10000"), "{}", confirm.body);
    let token = web_support::csrf_of(&confirm.body);
    // Each request changes at most 10,000 jobs (fewer if its 5 s run out first, on a slow
    // machine) and comes back to the confirmation while more match; the last goes to the
    // list. Every job is retried once in all.
    let mut steps = Vec::new();
    loop {
        let before = tests::count_status(&queue, jobqueue::JobStatus::Ready).await;
        let reply = post(
            &router,
            "/bulk",
            &format!("csrf={token}&queue=bulk&action=retry"),
        )
        .await;
        let location = reply.location.expect("a redirect");
        let changed = tests::count_status(&queue, jobqueue::JobStatus::Ready).await - before;
        assert!(
            (1..=10_000).contains(&changed),
            "one step changed {changed} jobs"
        );
        assert!(
            location.contains(&format!("Retried%20{changed}%20jobs")),
            "the step says how many it changed: {location}"
        );
        steps.push(changed);
        if location.starts_with("/jobs?queue=bulk") {
            break;
        }
        assert!(
            location.starts_with("/bulk?queue=bulk&action=retry"),
            "{location}"
        );
        assert!(steps.len() < 100, "the steps end: {steps:?}");
    }
    assert!(steps.len() >= 2, "more than one step: {steps:?}");
    assert_eq!(steps.iter().sum::<i64>(), 12_500, "{steps:?}");
    assert_eq!(
        tests::count_status(&queue, jobqueue::JobStatus::Failed).await,
        0
    );
}

#[tokio::test]
async fn the_key_prefix_filter_holds_under_no_backslash_escapes() {
    let queue = fresh_queue("web_bounded_like").await;
    let url = tests::database_url(queue.mysql_pool().unwrap()).await;
    let pool = tests::pool_with_session(
        &url,
        4,
        "SET SESSION sql_mode = CONCAT(@@sql_mode, ',NO_BACKSLASH_ESCAPES')",
    )
    .await;
    let strict = Queue::from_pool(pool).await.expect("a queue");
    let order = insert_job(&queue, "q", "k", "order_1", "{}", "ready", None).await;
    insert_job(&queue, "q", "k", "orderX1", "{}", "ready", None).await;
    let pct = insert_job(&queue, "q", "k", "100%!\\x", "{}", "ready", None).await;
    for q in [&queue, &strict] {
        let page = q
            .list_summaries(
                &jobqueue::admin::JobFilter::default().key_prefix("order_"),
                None,
                10,
            )
            .await
            .unwrap();
        let ids: Vec<u64> = page.jobs.iter().map(|j| j.id).collect();
        assert_eq!(ids, vec![order], "`_` is no wildcard");
        let page = q
            .list_summaries(
                &jobqueue::admin::JobFilter::default().key_prefix("100%!\\"),
                None,
                10,
            )
            .await
            .unwrap();
        let ids: Vec<u64> = page.jobs.iter().map(|j| j.id).collect();
        assert_eq!(ids, vec![pct], "`%`, `!` and `\\` are themselves");
    }
}
