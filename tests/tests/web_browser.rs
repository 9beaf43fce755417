//! The dashboard in a real browser: headless Chromium driven over WebDriver (`chromedriver`),
//! against a dashboard served on a loopback port over a throwaway database. It loads the
//! overview and watches it refresh by itself, filters failed jobs, opens one, retries it,
//! pauses a queue, and checks that hostile values show as text; a shorter run does the same
//! on PostgreSQL. A screenshot of each page is written to `target/screenshots/`.
//!
//! Needs `chromium` and `chromedriver` (Debian: `apt-get install chromium chromium-driver`;
//! `scripts/test` installs them when missing).

mod web_support;

use std::time::Duration;

use fantoccini::Locator;
use jobqueue::{JobStatus, Queue};
use serde_json::json;
use tests::{fresh_queue, row, wait_for};
use web_support::browser::{js, screenshots_dir, serve, shot, text, text_of, Driver};
use web_support::insert_job;

const HOSTILE_KEY: &str =
    "key<script>window.__xss=1</script>\"><img src=x onerror=\"window.__xss=2\">";
const HOSTILE_ERROR: &str =
    "boom <script>window.__xss=3</script>\"><img src=x onerror=\"window.__xss=4\">";

/// Clicks the button `css` finds, and returns the notice the page it leads to shows.
async fn press(b: &fantoccini::Client, css: &str) -> String {
    b.find(Locator::Css(css))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    b.wait()
        .for_element(Locator::Css(".notice"))
        .await
        .unwrap()
        .text()
        .await
        .unwrap()
}

/// A believable database: three queues, an hour of finished jobs, failures, a worker, a
/// periodic kind.
async fn seed(queue: &Queue) -> (u64, u64) {
    let pool = queue.mysql_pool().unwrap();
    for (q, kind) in [
        ("mail", "send_welcome"),
        ("exports", "export_order"),
        ("billing", "charge_card"),
    ] {
        sqlx::query(
            "INSERT INTO job_queue (queue, kind, task_key, payload, status, attempts, finished_at, created_at, last_error) \
             SELECT ?, ?, CONCAT(?, ':', seq), JSON_OBJECT('n', seq), IF(seq % 23 = 0, 'failed', 'done'), 1, \
               UTC_TIMESTAMP(6) - INTERVAL (seq % 60) MINUTE - INTERVAL (seq % 7) SECOND, \
               UTC_TIMESTAMP(6) - INTERVAL (seq % 60) MINUTE - INTERVAL 10 SECOND, \
               IF(seq % 23 = 0, CONCAT('upstream returned 503 Service Unavailable (order ', seq, ')'), NULL) \
             FROM seq_1_to_400 WHERE seq % (CHAR_LENGTH(?) - 2) < 3",
        )
        .bind(q)
        .bind(kind)
        .bind(kind)
        .bind(q)
        .execute(pool)
        .await
        .expect("seed finished jobs");
        sqlx::query(
            "INSERT INTO job_queue (queue, kind, task_key, payload, status, run_at) \
             SELECT ?, ?, CONCAT(?, ':ready:', seq), JSON_OBJECT('n', seq), 'ready', UTC_TIMESTAMP(6) - INTERVAL seq SECOND \
             FROM seq_1_to_40 WHERE seq <= CHAR_LENGTH(?) * 3",
        )
        .bind(q)
        .bind(kind)
        .bind(kind)
        .bind(q)
        .execute(pool)
        .await
        .expect("seed ready jobs");
    }
    let failed = insert_job(
        queue,
        "mail",
        "send_welcome",
        "welcome:ada",
        r#"{"user_id": 42, "template": "welcome", "locale": "en"}"#,
        "failed",
        Some("smtp: 550 mailbox unavailable\n  at send_welcome (mail.rs:42)"),
    )
    .await;
    // Its three attempts, as the worker records them, with the tenant it was enqueued for.
    sqlx::query(
        "UPDATE job_queue SET attempts = 3, max_attempts = 3, metadata = ?, attempt_log = ? WHERE id = ?",
    )
    .bind(json!({ "tenant": "acme", "campaign": "spring" }).to_string())
    .bind(
        json!([
            { "attempt": 1, "started_at": "2026-12-01 07:50:00.120000", "ended_at": "2026-12-01 07:50:01.480000",
              "worker": "app-1:4211:9f3a11c2", "outcome": "retry", "error": "smtp: 421 try again later" },
            { "attempt": 2, "started_at": "2026-12-01 07:51:02.000000", "ended_at": "2026-12-01 07:51:32.000000",
              "worker": "app-2:977:0b6d2e4f", "outcome": "lease_expired", "error": null },
            { "attempt": 3, "started_at": "2026-12-01 07:52:40.250000", "ended_at": "2026-12-01 07:52:41.010000",
              "worker": "app-1:4211:9f3a11c2", "outcome": "failed",
              "error": "smtp: 550 mailbox unavailable (attempt 3 of 3)" }
        ])
        .to_string(),
    )
    .bind(failed)
    .execute(queue.mysql_pool().unwrap())
    .await
    .expect("seed an attempt history");
    let hostile = insert_job(
        queue,
        "mail",
        "send_welcome",
        HOSTILE_KEY,
        &json!({ "name": "<script>window.__xss=5</script>\"><img src=x onerror=\"window.__xss=6\">" }).to_string(),
        "failed",
        Some(HOSTILE_ERROR),
    )
    .await;
    sqlx::query(
        "INSERT INTO job_queue_worker (owner, host, pid, version, queues, concurrency, running, started_at, last_seen) VALUES \
         ('app-1:4211:9f3a11c2', 'app-1', 4211, '0.1.0', 'mail,exports', 16, 3, UTC_TIMESTAMP(6) - INTERVAL 2 HOUR, UTC_TIMESTAMP(6)), \
         ('app-2:977:0b6d2e4f', 'app-2', 977, '0.1.0', 'billing', 4, 0, UTC_TIMESTAMP(6) - INTERVAL 5 HOUR, UTC_TIMESTAMP(6) - INTERVAL 2 MINUTE)",
    )
    .execute(pool)
    .await
    .unwrap();
    sqlx::query(
        "INSERT INTO job_queue_cron (kind, last_tick, last_job_id, updated_at, schedule) VALUES \
         ('nightly_report', UTC_TIMESTAMP() - INTERVAL 1 HOUR, ?, UTC_TIMESTAMP(6), '0 0 * * * *')",
    )
    .bind(failed)
    .execute(pool)
    .await
    .unwrap();
    (failed, hostile)
}

#[tokio::test]
async fn the_dashboard_works_in_a_real_browser() {
    let queue = fresh_queue("web_browser").await;
    let (_failed, hostile) = seed(&queue).await;
    let base = serve(&queue).await;
    let driver = Driver::start().await;
    let b = driver.browser().await;

    // Overview: every queue, the chart, and a refresh without reloading the page.
    b.goto(&base).await.unwrap();
    let queues = text(&b, "table.queues").await;
    for q in ["billing", "exports", "mail"] {
        assert!(queues.contains(q), "{queues}");
    }
    assert!(
        b.find(Locator::Css("svg.chart rect.done")).await.is_ok(),
        "the chart has bars"
    );
    js(&b, "window.__same_page = true").await;
    insert_job(&queue, "late", "k", "late-1", "{}", "ready", None).await;
    wait_for(
        "the overview to show a new queue by itself",
        Duration::from_secs(10),
        || {
            let b = b.clone();
            async move {
                let text = text_of(&b, "#live").await?;
                text.contains("late").then_some(())
            }
        },
    )
    .await;
    assert_eq!(
        js(&b, "return window.__same_page === true").await,
        json!(true),
        "the page was not reloaded"
    );
    shot(&b, "overview").await;

    // Jobs: filter failed ones.
    b.goto(&format!("{base}/jobs")).await.unwrap();
    b.find(Locator::Css("select[name=status]"))
        .await
        .unwrap()
        .select_by_value("failed")
        .await
        .unwrap();
    b.find(Locator::Css("form.filters button[type=submit]"))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    wait_for("the filtered list to load", Duration::from_secs(10), || {
        let b = b.clone();
        async move {
            let url = b.current_url().await.ok()?;
            let ready = b.execute("return document.readyState", vec![]).await.ok()?;
            (url.as_str().contains("status=failed") && ready == json!("complete")).then_some(())
        }
    })
    .await;
    let statuses = js(
        &b,
        "return [...document.querySelectorAll('table.jobs tbody .badge')].map(e => e.textContent)",
    )
    .await;
    let statuses: Vec<String> = serde_json::from_value(statuses).unwrap();
    assert!(
        !statuses.is_empty() && statuses.iter().all(|s| s == "failed"),
        "{statuses:?}"
    );
    shot(&b, "jobs").await;

    // Open the newest failed job that is not the hostile one, and retry it.
    let link = js(
        &b,
        "return [...document.querySelectorAll('table.jobs tbody a')].map(a => a.href)",
    )
    .await;
    let links: Vec<String> = serde_json::from_value(link).unwrap();
    let target = links
        .iter()
        .find(|l| !l.ends_with(&format!("/jobs/{hostile}")))
        .expect("a failed job")
        .clone();
    b.goto(&target).await.unwrap();
    let id: u64 = target.rsplit('/').next().unwrap().parse().unwrap();
    assert_eq!(text(&b, "dd .badge").await, "failed");
    shot(&b, "job").await;
    // Its history, newest first, as the page lists it.
    let outcomes = js(
        &b,
        "return [...document.querySelectorAll('table.attempts tbody tr')].map(r => r.cells[0].textContent + ' ' + r.cells[5].textContent)",
    )
    .await;
    let outcomes: Vec<String> = serde_json::from_value(outcomes).unwrap();
    assert_eq!(outcomes, ["3 failed", "2 lease_expired", "1 retry"]);
    let history = b
        .find(Locator::XPath(
            "//table[contains(@class, 'attempts')]/ancestor::section[1]",
        ))
        .await
        .unwrap();
    let png = history
        .screenshot()
        .await
        .expect("screenshot of the history");
    std::fs::write(screenshots_dir().join("job-attempts.png"), png).expect("write the screenshot");
    let notice = press(&b, "button.primary").await;
    assert!(notice.contains("1 job changed"), "{notice}");
    assert_eq!(text(&b, "dd .badge").await, "ready");
    assert_eq!(row(&queue, id).await.status, JobStatus::Ready);

    // Pause a queue from the overview.
    b.goto(&base).await.unwrap();
    let notice = press(&b, "form[action$='/queues/mail/pause'] button").await;
    assert!(
        notice.contains("Queue mail paused: 1 queue changed."),
        "{notice}"
    );
    b.wait()
        .for_element(Locator::Css("form[action$='/queues/mail/resume']"))
        .await
        .unwrap();
    assert_eq!(queue.paused_queues().await.unwrap(), ["mail"]);

    // Hostile values show as text: no element made of them, no script of theirs ran.
    b.goto(&format!("{base}/jobs/{hostile}")).await.unwrap();
    let key = text(&b, "dd code").await;
    assert_eq!(key, HOSTILE_KEY);
    let error = text(&b, "pre.error").await;
    assert!(error.contains("window.__xss=3"), "{error}");
    let payload = text(&b, "pre.payload").await;
    assert!(
        payload.contains("<script>window.__xss=5</script>"),
        "{payload}"
    );
    let dom = js(&b, "return [document.querySelectorAll('main img').length, document.querySelectorAll('script').length, window.__xss === undefined]").await;
    assert_eq!(
        dom,
        json!([0, 1, true]),
        "no injected element, no injected script ran"
    );
    shot(&b, "escaping").await;
    b.goto(&format!("{base}/jobs?queue=mail&status=failed"))
        .await
        .unwrap();
    let dom = js(
        &b,
        "return [document.querySelectorAll('main img').length, window.__xss === undefined]",
    )
    .await;
    assert_eq!(dom, json!([0, true]));

    // Workers and periodic jobs.
    b.goto(&format!("{base}/workers")).await.unwrap();
    let page = text(&b, "main").await;
    assert!(
        page.contains("app-1:4211:9f3a11c2") && page.contains("gone"),
        "{page}"
    );
    shot(&b, "workers").await;
    b.goto(&format!("{base}/periodic")).await.unwrap();
    let page = text(&b, "main").await;
    assert!(
        page.contains("nightly_report") && page.contains("0 0 * * * *"),
        "{page}"
    );
    shot(&b, "periodic").await;

    b.close().await.unwrap();
}

/// The same dashboard on PostgreSQL: the overview lists the queues, the jobs page filters,
/// a job's page shows its error and retries it, a queue pauses, hostile values stay text.
#[tokio::test]
async fn the_dashboard_works_in_a_real_browser_on_postgres() {
    let queue = tests::fresh_queue_on(jobqueue::Backend::Postgres, "web_browser_pg").await;
    for n in 0..30 {
        let (status, error) = if n % 10 == 0 {
            ("failed", Some("upstream returned 503 Service Unavailable"))
        } else {
            ("done", None)
        };
        let payload = json!({ "n": n }).to_string();
        let key = format!("export:{n}");
        insert_job(
            &queue,
            "exports",
            "export_order",
            &key,
            &payload,
            status,
            error,
        )
        .await;
    }
    let hostile = insert_job(
        &queue,
        "mail",
        "send_welcome",
        HOSTILE_KEY,
        &json!({ "name": "<script>window.__xss=5</script>" }).to_string(),
        "failed",
        Some(HOSTILE_ERROR),
    )
    .await;
    let base = serve(&queue).await;
    let driver = Driver::start().await;
    let b = driver.browser().await;

    b.goto(&base).await.unwrap();
    let queues = text(&b, "table.queues").await;
    assert!(
        queues.contains("exports") && queues.contains("mail"),
        "{queues}"
    );
    shot(&b, "postgres-overview").await;

    b.goto(&format!("{base}/jobs?queue=exports&status=failed"))
        .await
        .unwrap();
    let statuses = js(
        &b,
        "return [...document.querySelectorAll('table.jobs tbody .badge')].map(e => e.textContent)",
    )
    .await;
    let statuses: Vec<String> = serde_json::from_value(statuses).unwrap();
    assert_eq!(
        statuses,
        ["failed", "failed", "failed"],
        "three failed exports"
    );
    shot(&b, "postgres-jobs").await;

    let links = js(
        &b,
        "return [...document.querySelectorAll('table.jobs tbody a')].map(a => a.href)",
    )
    .await;
    let links: Vec<String> = serde_json::from_value(links).unwrap();
    let target = links.first().expect("a failed job").clone();
    let id: u64 = target.rsplit('/').next().unwrap().parse().unwrap();
    b.goto(&target).await.unwrap();
    assert_eq!(text(&b, "dd .badge").await, "failed");
    let error = text(&b, "pre.error").await;
    assert!(error.contains("503 Service Unavailable"), "{error}");
    shot(&b, "postgres-job").await;
    let notice = press(&b, "button.primary").await;
    assert!(notice.contains("1 job changed"), "{notice}");
    assert_eq!(row(&queue, id).await.status, JobStatus::Ready);

    b.goto(&base).await.unwrap();
    let notice = press(&b, "form[action$='/queues/exports/pause'] button").await;
    assert!(notice.contains("Queue exports paused"), "{notice}");
    b.wait()
        .for_element(Locator::Css("form[action$='/queues/exports/resume']"))
        .await
        .unwrap();
    assert_eq!(queue.paused_queues().await.unwrap(), ["exports"]);

    b.goto(&format!("{base}/jobs/{hostile}")).await.unwrap();
    assert_eq!(text(&b, "dd code").await, HOSTILE_KEY);
    let dom = js(&b, "return [document.querySelectorAll('main img').length, document.querySelectorAll('script').length, window.__xss === undefined]").await;
    assert_eq!(dom, json!([0, 1, true]), "no injected element or script");
    shot(&b, "postgres-escaping").await;
    b.close().await.unwrap();
}
