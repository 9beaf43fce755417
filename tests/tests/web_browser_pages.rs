//! The daily-workflow pages in a real browser (headless Chromium over WebDriver): the kinds
//! page, the periodic page (Run now, Pause, Resume clicked), and a queue page with a blocked
//! key and a worker. A screenshot of each is written to `target/screenshots/`.
//!
//! Needs `chromium` and `chromedriver` (Debian: `apt-get install chromium chromium-driver`;
//! `scripts/test` installs them when missing).

mod web_support;

use fantoccini::{Client, Locator};
use jobqueue::Queue;
use std::time::Duration;

use tests::{fresh_queue, wait_for};
use web_support::browser::{js, serve, shot, text, Driver};
use web_support::insert_job;

/// Finished jobs of three kinds over the last day, a periodic schedule with its ticks, and a
/// `mail` queue whose jobs wait for a concurrency key held by a running job of a live worker.
async fn seed(queue: &Queue) {
    let pool = queue.mysql_pool().unwrap();
    for (q, kind, n, fail_every, run_ms, wait_ms) in [
        ("mail", "send_welcome", 300, 40, 180, 900),
        ("exports", "export_order", 60, 7, 12_000, 30_000),
        ("billing", "charge_card", 200, 100, 45, 120),
    ] {
        // Spread over the last hour (countable: finished more than 15 s ago) with runtimes
        // around `run_ms`.
        sqlx::query(
            "INSERT INTO job_queue (queue, kind, task_key, payload, status, attempts, max_attempts, finished_at, claimed_at, run_at) \
             SELECT ?, ?, CONCAT(?, ':', seq), '{}', IF(seq % ? = 0, 'failed', 'done'), 1 + (seq % 3 = 0), 3, \
               f, f - INTERVAL (? * (50 + seq % 100) * 10) MICROSECOND, \
               f - INTERVAL (? * (50 + seq % 100) * 10) MICROSECOND - INTERVAL (? * 1000) MICROSECOND \
             FROM (SELECT seq, UTC_TIMESTAMP(6) - INTERVAL 1 MINUTE - INTERVAL (seq % 55) MINUTE AS f FROM seq_1_to_400) t \
             WHERE seq <= ?",
        )
        .bind(q)
        .bind(kind)
        .bind(kind)
        .bind(fail_every)
        .bind(run_ms)
        .bind(run_ms)
        .bind(wait_ms)
        .bind(n)
        .execute(pool)
        .await
        .expect("seed finished jobs");
    }
    queue.store().count_throughput().await.unwrap();
    // Earlier in the day (figures as a count kept them hours ago).
    sqlx::query(
        "INSERT INTO job_queue_kind_stats VALUES \
         (UTC_TIMESTAMP() - INTERVAL 6 HOUR, 'mail', 'send_welcome', 2400, 31, 80, 2431, 450000000, 2100000000, 0,0,40,2300,91,0,0,0,0,0,0,0), \
         (UTC_TIMESTAMP() - INTERVAL 9 HOUR, 'reports', 'nightly_report', 1, 0, 0, 1, 1500000000, 200000, 0,0,0,0,0,0,0,0,0,0,0,1)",
    )
    .execute(pool)
    .await
    .unwrap();

    // A periodic kind of another program, with three recent ticks (the last one failed).
    sqlx::query(
        "INSERT INTO job_queue_cron (kind, last_tick, updated_at, schedule) VALUES \
         ('nightly_report', DATE(UTC_TIMESTAMP()) + INTERVAL 3 HOUR, UTC_TIMESTAMP(6), '0 0 3 * * *')",
    )
    .execute(pool)
    .await
    .unwrap();
    for (days, status, error) in [
        (3, "done", None),
        (2, "done", None),
        (1, "failed", Some("report store: connection refused")),
    ] {
        let id = insert_job(
            queue,
            "reports",
            "nightly_report",
            &format!("nightly_report@day-{days}"),
            r#"{"full": true}"#,
            status,
            error,
        )
        .await;
        sqlx::query(
            "UPDATE job_queue SET run_at = DATE(UTC_TIMESTAMP()) - INTERVAL ? DAY + INTERVAL 3 HOUR, \
               claimed_at = DATE(UTC_TIMESTAMP()) - INTERVAL ? DAY + INTERVAL 3 HOUR + INTERVAL 2 SECOND, \
               finished_at = DATE(UTC_TIMESTAMP()) - INTERVAL ? DAY + INTERVAL 3 HOUR + INTERVAL 94 SECOND \
             WHERE id = ?",
        )
        .bind(days - 1)
        .bind(days - 1)
        .bind(days - 1)
        .bind(id)
        .execute(pool)
        .await
        .unwrap();
        sqlx::query("UPDATE job_queue_cron SET last_job_id = ? WHERE kind = 'nightly_report'")
            .bind(id)
            .execute(pool)
            .await
            .unwrap();
    }

    // The `mail` queue: a running job holds the one slot of `smtp:relay-1`, three wait.
    let holder = insert_job(
        queue,
        "mail",
        "send_welcome",
        "welcome:grace",
        "{}",
        "running",
        None,
    )
    .await;
    let mut blocked = Vec::new();
    for i in 0..3 {
        blocked.push(
            insert_job(
                queue,
                "mail",
                "send_welcome",
                &format!("welcome:wait-{i}"),
                "{}",
                "blocked",
                None,
            )
            .await,
        );
    }
    sqlx::query(
        "UPDATE job_queue SET concurrency_key = 'smtp:relay-1', concurrency_limit = 1 \
         WHERE queue = 'mail' AND status IN ('running', 'blocked')",
    )
    .execute(pool)
    .await
    .unwrap();
    sqlx::query(
        "UPDATE job_queue SET lease_owner = 'app-1:4211:9f3a11c2', lease_until = UTC_TIMESTAMP(6) + INTERVAL 30 SECOND WHERE id = ?",
    )
    .bind(holder)
    .execute(pool)
    .await
    .unwrap();
    sqlx::query("INSERT INTO job_queue_slot (slot_key, slot_no, job_id, attempt) VALUES ('c:smtp:relay-1', 0, ?, 1)")
        .bind(holder)
        .execute(pool)
        .await
        .unwrap();
    for id in blocked {
        sqlx::query("INSERT INTO job_queue_blocked (slot_key, priority, job_id) VALUES ('c:smtp:relay-1', 0, ?)")
            .bind(id)
            .execute(pool)
            .await
            .unwrap();
    }
    sqlx::query(
        "INSERT INTO job_queue_worker (owner, host, pid, version, queues, concurrency, running, started_at, last_seen) VALUES \
         ('app-1:4211:9f3a11c2', 'app-1', 4211, '0.3.0', 'mail,exports', 16, 1, UTC_TIMESTAMP(6) - INTERVAL 2 HOUR, UTC_TIMESTAMP(6)), \
         ('app-2:977:0b6d2e4f', 'app-2', 977, '0.3.0', 'billing', 4, 0, UTC_TIMESTAMP(6) - INTERVAL 5 HOUR, UTC_TIMESTAMP(6))",
    )
    .execute(pool)
    .await
    .unwrap();
}

/// Clicks the button of the form whose action ends with `action`, and returns the notice
/// of the page it leads to (waiting for that page: the page clicked on may have a notice of
/// its own).
async fn click(b: &Client, action: &str) -> String {
    js(b, "window.__clicked_from = true").await;
    b.find(Locator::Css(&format!("form[action$='{action}'] button")))
        .await
        .unwrap_or_else(|e| panic!("no form {action}: {e}"))
        .click()
        .await
        .unwrap();
    wait_for(
        &format!("the page after {action}"),
        Duration::from_secs(10),
        || {
            let b = b.clone();
            async move {
                let state = b
                    .execute(
                        "return window.__clicked_from === undefined && document.readyState === 'complete' \
                         && document.querySelector('.notice') !== null",
                        vec![],
                    )
                    .await
                    .ok()?;
                if state != serde_json::json!(true) {
                    return None;
                }
                b.find(Locator::Css(".notice")).await.ok()?.text().await.ok()
            }
        },
    )
    .await
}

#[tokio::test]
async fn the_daily_workflow_pages_work_in_a_real_browser() {
    let queue = fresh_queue("web_browser_pages").await;
    seed(&queue).await;
    let base = serve(&queue).await;
    let driver = Driver::start().await;
    let b = driver.browser().await;

    // Kinds: one row per kind, linked to its jobs; sorted by failures on a click.
    b.goto(&format!("{base}/kinds")).await.unwrap();
    let kinds = js(
        &b,
        "return [...document.querySelectorAll('table.kinds tbody th a')].map(a => a.textContent)",
    )
    .await;
    let kinds: Vec<String> = serde_json::from_value(kinds).unwrap();
    assert_eq!(
        kinds,
        [
            "charge_card",
            "export_order",
            "nightly_report",
            "send_welcome"
        ]
    );
    let href = js(
        &b,
        "return document.querySelector('table.kinds tbody th a').getAttribute('href')",
    )
    .await;
    assert_eq!(href, serde_json::json!("/jobs/jobs?kind=charge_card"));
    shot(&b, "kinds").await;
    b.find(Locator::Css("table.kinds a[href$='sort=rate']"))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    wait_for("the sorted page", Duration::from_secs(10), || {
        let b = b.clone();
        async move {
            let url = b.current_url().await.ok()?;
            let ready = b.execute("return document.readyState", vec![]).await.ok()?;
            (url.as_str().ends_with("sort=rate") && ready == serde_json::json!("complete"))
                .then_some(())
        }
    })
    .await;
    let first = text(&b, "table.kinds tbody th a").await;
    assert_eq!(first, "export_order", "the highest failure rate first");

    // Periodic: its recent ticks; Run now adds one, Pause and Resume flip the state.
    b.goto(&format!("{base}/periodic")).await.unwrap();
    let card = text(&b, "section.periodic").await;
    assert!(
        card.contains("nightly_report") && card.contains("0 0 3 * * *"),
        "{card}"
    );
    assert!(card.contains("report store: connection refused"), "{card}");
    let notice = click(&b, "/periodic/nightly_report/run").await;
    assert!(notice.contains("1 job added"), "{notice}");
    let first = text(&b, "table.ticks tbody tr").await;
    assert!(first.contains("run now"), "the manual run first: {first}");
    let notice = click(&b, "/periodic/nightly_report/pause").await;
    assert!(notice.contains("paused"), "{notice}");
    assert!(text(&b, "section.periodic h2").await.contains("paused"));
    shot(&b, "periodic-paused").await;
    let notice = click(&b, "/periodic/nightly_report/resume").await;
    assert!(notice.contains("resumed"), "{notice}");
    assert!(text(&b, "section.periodic h2").await.contains("active"));
    let manual: i64 = sqlx::query_scalar(
        "SELECT COUNT(*) FROM job_queue WHERE kind = 'nightly_report' AND task_key LIKE '% run now'",
    )
    .fetch_one(queue.mysql_pool().unwrap())
    .await
    .unwrap();
    assert_eq!(manual, 1);

    // The queue page, from the overview's link.
    b.goto(&base).await.unwrap();
    b.find(Locator::Css("table.queues a[href$='/queues/mail']"))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    b.wait()
        .for_element(Locator::Css("table.limits"))
        .await
        .unwrap();
    let limits = text(&b, "table.limits").await;
    assert!(
        limits.contains("smtp:relay-1") && limits.contains("concurrency: 1"),
        "{limits}"
    );
    assert!(
        limits.contains("app-1:4211:9f3a11c2"),
        "the holder's worker: {limits}"
    );
    let workers = text(&b, "table.workers").await;
    assert!(
        workers.contains("app-1:4211:9f3a11c2") && !workers.contains("app-2"),
        "{workers}"
    );
    shot(&b, "queue").await;

    b.close().await.unwrap();
}
