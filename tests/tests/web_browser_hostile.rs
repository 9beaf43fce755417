//! The dashboard in a real browser over the hostile table of `web_bounded.rs` (huge payloads,
//! JSON this library cannot read, an output and a history that are not JSON, 20,000 queues):
//! the overview, the job list and each hostile job's page render, each unreadable column
//! shows as text under a visible warning, and the job's Retry or Cancel button is there.
//! Screenshots go to `target/screenshots/hostile-*.png`.
//!
//! Needs `chromium` and `chromedriver` (Debian: `apt-get install chromium chromium-driver`).

#[path = "web_support/hostile.rs"]
mod hostile;
mod web_support;

use fantoccini::{Client, Locator};
use serde_json::json;
use tests::fresh_queue;
use web_support::browser::{js, serve, shot, Driver};

/// Whether the page shows an element matching `css` whose text contains `text`, on screen
/// (not hidden, with a size).
async fn visible_text(b: &Client, css: &str, text: &str) -> bool {
    js(
        b,
        &format!(
            "return [...document.querySelectorAll({css})].some(e => {{ \
               const r = e.getBoundingClientRect(); \
               return r.width > 0 && r.height > 0 && getComputedStyle(e).visibility !== 'hidden' \
                 && e.textContent.includes({text}); }})",
            css = json!(css),
            text = json!(text)
        ),
    )
    .await
        == json!(true)
}

/// Opens job `id`'s page, saves its screenshot as `hostile-<name>`, and checks that it shows
/// `raw` under a warning, and the button `action` ("Retry" or "Cancel"; a done job has
/// neither).
async fn check_job(
    b: &Client,
    base: &str,
    id: u64,
    name: &str,
    warning: &str,
    raw: &str,
    action: Option<&str>,
) {
    b.goto(&format!("{base}/jobs/{id}")).await.unwrap();
    assert_eq!(
        js(b, "return document.querySelector('h1').textContent").await,
        json!(format!("Job {id}")),
        "job {id}'s page renders"
    );
    assert!(
        visible_text(b, ".warn", warning).await,
        "job {id}: the warning {warning:?} is visible"
    );
    assert!(
        visible_text(b, "pre", raw).await,
        "job {id}: the stored text {raw:?} is visible"
    );
    if let Some(action) = action {
        assert!(
            visible_text(b, ".actions button", action).await,
            "job {id}: the {action} button is there"
        );
    }
    assert_eq!(
        js(
            b,
            "return document.querySelectorAll('pre b, pre i, script:not([src])').length"
        )
        .await,
        json!(0),
        "job {id}: stored markup stays text"
    );
    // The warning in view, for the screenshot.
    js(
        b,
        "const w = document.querySelector('.warn.unreadable'); if (w) w.scrollIntoView(); return null",
    )
    .await;
    shot(b, &format!("hostile-{name}")).await;
}

#[tokio::test]
async fn the_hostile_table_renders_in_a_real_browser() {
    let queue = fresh_queue("web_browser_hostile").await;
    let h = hostile::seed(&queue).await;
    let base = serve(&queue).await;
    let driver = Driver::start().await;
    let b = driver.browser().await;

    b.goto(&base).await.unwrap();
    let shown = js(
        &b,
        "return document.querySelectorAll('table.queues tbody tr').length",
    )
    .await;
    assert!(
        shown.as_u64().is_some_and(|n| n > 0 && n <= 50),
        "at most 50 queues: {shown}"
    );
    assert!(
        visible_text(&b, "#more-queues", "more queues").await,
        "the overview says how many queues are not shown"
    );
    shot(&b, "hostile-overview").await;
    // The search box finds a queue by name.
    b.find(Locator::Css("form.queue-search input[name=queue]"))
        .await
        .unwrap()
        .send_keys("q1999")
        .await
        .unwrap();
    b.find(Locator::Css("form.queue-search button"))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    tests::wait_for(
        "the search to show q19999",
        std::time::Duration::from_secs(10),
        || {
            let b = b.clone();
            async move {
                let url = b.current_url().await.ok()?;
                (url.as_str().contains("queue=q1999")
                    && visible_text(&b, "table.queues", "q19999").await)
                    .then_some(())
            }
        },
    )
    .await;
    shot(&b, "hostile-overview-search").await;

    b.goto(&format!("{base}/jobs")).await.unwrap();
    let rows = js(
        &b,
        "return document.querySelectorAll('table.jobs tbody tr').length",
    )
    .await;
    assert_eq!(rows, json!(50), "a full first page");
    assert!(visible_text(&b, "table.jobs", "too big").await);
    shot(&b, "hostile-jobs").await;
    b.goto(&format!("{base}/jobs?queue=hostile")).await.unwrap();
    shot(&b, "hostile-jobs-hostile-queue").await;

    let json_warning = "cannot be read as JSON";
    check_job(
        &b,
        &base,
        h.payload,
        "payload",
        json_warning,
        "1e400",
        Some("Retry"),
    )
    .await;
    check_job(
        &b,
        &base,
        h.metadata,
        "metadata",
        json_warning,
        "[1e400]",
        Some("Retry"),
    )
    .await;
    check_job(
        &b,
        &base,
        h.progress,
        "progress",
        json_warning,
        "1e400",
        Some("Cancel"),
    )
    .await;
    check_job(
        &b,
        &base,
        h.all,
        "all",
        json_warning,
        "[1e400]",
        Some("Cancel"),
    )
    .await;
    check_job(
        &b,
        &base,
        h.output,
        "output",
        json_warning,
        "not json <b>at all</b>",
        None,
    )
    .await;
    check_job(
        &b,
        &base,
        h.history,
        "history",
        "attempt history cannot be read",
        "not a history <i>",
        Some("Retry"),
    )
    .await;
    b.goto(&format!("{base}/jobs/{}", h.big)).await.unwrap();
    assert!(visible_text(&b, ".cut", "showing the first 64 KiB").await);
    assert!(visible_text(&b, ".actions button", "Retry").await);
    js(
        &b,
        "document.querySelector('.cut').scrollIntoView(); return null",
    )
    .await;
    shot(&b, "hostile-big").await;
    b.goto(&format!("{base}/jobs/{}", h.long_error))
        .await
        .unwrap();
    shot(&b, "hostile-long-error").await;
}
