//! The job list's daily workflows in a real browser (headless Chromium over WebDriver):
//! tick two failed jobs and retry them, run a scheduled job now, delete one, find jobs by id
//! and by key from the overview's search box, pick a queue, select a whole page, and watch
//! the list refresh by itself, hold still while a job is ticked, and stop after Pause.
//! A screenshot of each step is written to `target/screenshots/lists-*.png`.
//!
//! Needs `chromium` and `chromedriver` (Debian: `apt-get install chromium chromium-driver`).

mod web_support;

use std::time::Duration;

use fantoccini::{Client, Locator};
use jobqueue::{JobStatus, Queue};
use serde_json::json;
use tests::{fresh_queue, row, wait_for};
use web_support::browser::{js, serve, shot, text, text_of, Driver};
use web_support::insert_job;

/// How long a page may take to answer on a loaded machine (it takes milliseconds).
const PAGE: Duration = Duration::from_secs(20);

/// Failed jobs in `mail`, a scheduled retry, a done job, ready jobs in `billing`.
async fn seed(queue: &Queue) -> Seeded {
    let mut failed = Vec::new();
    for (i, error) in [
        "smtp: 550 mailbox unavailable",
        "smtp: 421 try again later",
        "dns: no such host mx.example.invalid",
    ]
    .iter()
    .enumerate()
    {
        failed.push(
            insert_job(
                queue,
                "mail",
                "send_welcome",
                &format!("welcome:{i}"),
                "{}",
                "failed",
                Some(error),
            )
            .await,
        );
    }
    let scheduled = insert_job(
        queue,
        "mail",
        "send_digest",
        "digest:monday",
        "{}",
        "scheduled",
        None,
    )
    .await;
    sqlx::query(
        "UPDATE job_queue SET attempts = 1, last_error = 'smtp: 421 try again later', \
         run_at = UTC_TIMESTAMP(6) + INTERVAL 25 MINUTE WHERE id = ?",
    )
    .bind(scheduled)
    .execute(queue.mysql_pool().unwrap())
    .await
    .unwrap();
    let done = insert_job(
        queue,
        "exports",
        "export_order",
        "export:7",
        "{}",
        "done",
        None,
    )
    .await;
    for i in 0..6 {
        insert_job(
            queue,
            "billing",
            "charge_card",
            &format!("charge:{i}"),
            "{}",
            "ready",
            None,
        )
        .await;
    }
    Seeded {
        failed,
        scheduled,
        done,
    }
}

struct Seeded {
    failed: Vec<u64>,
    scheduled: u64,
    done: u64,
}

/// Waits until the page at an address containing `part` has loaded.
async fn loaded(b: &Client, part: &str) {
    wait_for(&format!("a page at {part} to load"), PAGE, || {
        let b = b.clone();
        let part = part.to_owned();
        async move {
            let url = b.current_url().await.ok()?;
            let ready = b.execute("return document.readyState", vec![]).await.ok()?;
            (url.as_str().contains(&part) && ready == json!("complete")).then_some(())
        }
    })
    .await;
}

async fn click(b: &Client, css: &str) {
    b.find(Locator::Css(css))
        .await
        .unwrap_or_else(|e| panic!("{css}: {e}"))
        .click()
        .await
        .unwrap_or_else(|e| panic!("click {css}: {e}"));
}

async fn notice(b: &Client) -> String {
    b.wait()
        .at_most(PAGE)
        .for_element(Locator::Css(".notice"))
        .await
        .unwrap()
        .text()
        .await
        .unwrap()
}

/// The ids the job list shows.
async fn listed(b: &Client) -> Vec<u64> {
    let ids = js(
        b,
        "return [...document.querySelectorAll('table.jobs tbody td.n a')].map(a => Number(a.textContent))",
    )
    .await;
    serde_json::from_value(ids).unwrap()
}

/// The number a `data-` attribute of `#live` holds (0 when unset).
async fn live_counter(b: &Client, name: &str) -> u64 {
    js(
        b,
        &format!("return Number(document.getElementById('live').getAttribute('data-{name}') || 0)"),
    )
    .await
    .as_u64()
    .unwrap()
}

#[tokio::test]
async fn the_daily_workflows_work_in_a_real_browser() {
    let queue = fresh_queue("web_browser_lists").await;
    let seeded = seed(&queue).await;
    let base = serve(&queue).await;
    let driver = Driver::start().await;
    let b = driver.browser().await;

    // Tick two failed jobs and retry them.
    b.goto(&format!("{base}/jobs?status=failed")).await.unwrap();
    loaded(&b, "status=failed").await;
    let tab = text(&b, "nav.tabs a.active").await;
    assert_eq!(tab, "failed 3");
    let (first, second) = (seeded.failed[0], seeded.failed[1]);
    for id in [first, second] {
        click(&b, &format!("input[name=id][value='{id}']")).await;
    }
    shot(&b, "lists-selected").await;
    click(&b, "button[name=action][value=retry]").await;
    let said = notice(&b).await;
    assert_eq!(said, "2 retried.");
    for id in [first, second] {
        assert_eq!(row(&queue, id).await.status, JobStatus::Ready);
    }
    assert_eq!(
        row(&queue, seeded.failed[2]).await.status,
        JobStatus::Failed
    );
    // Back on the failed jobs: only the one not ticked is left, and counted.
    assert_eq!(listed(&b).await, [seeded.failed[2]]);
    let tab = text(&b, "nav.tabs a.active").await;
    assert_eq!(tab, "failed 1");
    shot(&b, "lists-retried").await;

    // Run a scheduled job now, from the list of scheduled jobs.
    b.goto(&format!("{base}/jobs?status=scheduled"))
        .await
        .unwrap();
    loaded(&b, "status=scheduled").await;
    let when = text(&b, "td.when").await;
    assert!(when.starts_with("due in 2"), "{when}");
    click(&b, &format!("input[name=id][value='{}']", seeded.scheduled)).await;
    click(&b, "button[name=action][value=run_now]").await;
    assert_eq!(notice(&b).await, "1 made ready to run now.");
    assert_eq!(row(&queue, seeded.scheduled).await.status, JobStatus::Ready);
    shot(&b, "lists-run-now").await;

    // Delete one job from its page.
    b.goto(&format!("{base}/jobs/{}", seeded.done))
        .await
        .unwrap();
    loaded(&b, &format!("/jobs/{}", seeded.done)).await;
    shot(&b, "lists-job-page").await;
    click(
        &b,
        &format!("form[action$='/jobs/{}/delete'] button", seeded.done),
    )
    .await;
    assert_eq!(
        notice(&b).await,
        format!("Job {} deleted: 1 job changed.", seeded.done)
    );
    assert!(queue.job(seeded.done).await.unwrap().is_none());
    shot(&b, "lists-deleted").await;

    // Find a job by id, then by key, from the overview's header.
    for (q, id) in [
        (seeded.failed[2].to_string(), seeded.failed[2]),
        ("welcome:1".to_owned(), seeded.failed[1]),
    ] {
        b.goto(&base).await.unwrap();
        loaded(&b, "/jobs").await;
        let input = b.find(Locator::Css("header input[name=q]")).await.unwrap();
        input.send_keys(&q).await.unwrap();
        if id == seeded.failed[2] {
            shot(&b, "lists-search").await;
        }
        click(&b, "header form.search button").await;
        loaded(&b, &format!("/jobs/{id}")).await;
        let title = text(&b, "main h1").await;
        assert_eq!(title, format!("Job {id}"));
    }
    shot(&b, "lists-found").await;

    // Pick a queue: the picker offers every queue once it is used (its names are read
    // then); the list shows that queue's jobs.
    b.goto(&format!("{base}/jobs")).await.unwrap();
    loaded(&b, "/jobs").await;
    let picker = b.find(Locator::Css("input[name=queue]")).await.unwrap();
    picker.click().await.unwrap();
    wait_for("the pickers' names to be read", PAGE, || {
        let b = b.clone();
        async move {
            let loaded = js(
                &b,
                "return document.querySelector('#kind-names').getAttribute('data-loaded')",
            )
            .await;
            (loaded == json!("1")).then_some(())
        }
    })
    .await;
    let offered = js(
        &b,
        "return [...document.querySelectorAll('#queue-names option')].map(o => o.value)",
    )
    .await;
    assert_eq!(offered, json!(["billing", "mail"]));
    let kinds = js(
        &b,
        "return [...document.querySelectorAll('#kind-names option')].map(o => o.value)",
    )
    .await;
    assert!(
        kinds
            .as_array()
            .is_some_and(|k| k.contains(&json!("charge_card"))),
        "{kinds}"
    );
    shot(&b, "lists-picker").await;
    picker.send_keys("billing").await.unwrap();
    click(&b, "form.filters button[type=submit]").await;
    loaded(&b, "queue=billing").await;
    let ids = listed(&b).await;
    assert_eq!(ids.len(), 6, "{ids:?}");
    let queues = js(
        &b,
        "return [...new Set([...document.querySelectorAll('table.jobs tbody tr')].map(r => r.cells[2].textContent))]",
    )
    .await;
    assert_eq!(queues, json!(["billing"]));

    // "Select all on this page" ticks and unticks every row.
    click(&b, "input.select-all").await;
    let ticked = js(
        &b,
        "return document.querySelectorAll('input[name=id]:checked').length",
    )
    .await;
    assert_eq!(ticked, json!(6));
    shot(&b, "lists-select-all").await;
    click(&b, "input.select-all").await;
    let ticked = js(
        &b,
        "return document.querySelectorAll('input[name=id]:checked').length",
    )
    .await;
    assert_eq!(ticked, json!(0));

    // The list refreshes by itself: every 2 seconds, chosen in the control.
    b.find(Locator::Css("select.refresh-interval"))
        .await
        .unwrap()
        .select_by_value("2")
        .await
        .unwrap();
    click(&b, "main h1").await;
    js(&b, "window.__same_page = true").await;
    let late = insert_job(
        &queue,
        "billing",
        "charge_card",
        "charge:late",
        "{}",
        "ready",
        None,
    )
    .await;
    wait_for("the list to show a new job by itself", PAGE, || {
        let b = b.clone();
        async move { listed(&b).await.contains(&late).then_some(()) }
    })
    .await;
    assert_eq!(
        js(&b, "return window.__same_page === true").await,
        json!(true),
        "the page was not reloaded"
    );
    shot(&b, "lists-refreshed").await;

    // A ticked job holds the refresh: the selection stays.
    click(&b, &format!("input[name=id][value='{late}']")).await;
    let held = insert_job(
        &queue,
        "billing",
        "charge_card",
        "charge:held",
        "{}",
        "ready",
        None,
    )
    .await;
    let skipped = live_counter(&b, "skipped").await;
    wait_for("two refreshes to be held", PAGE, || {
        let b = b.clone();
        async move { (live_counter(&b, "skipped").await >= skipped + 2).then_some(()) }
    })
    .await;
    assert!(!listed(&b).await.contains(&held));
    let still = js(
        &b,
        &format!("return document.querySelector(\"input[name=id][value='{late}']\").checked"),
    )
    .await;
    assert_eq!(still, json!(true), "the ticked box stays ticked");
    let state = text(&b, ".refresh-state").await;
    assert!(
        state.starts_with("paused while jobs are selected"),
        "{state}"
    );
    shot(&b, "lists-held").await;
    click(&b, &format!("input[name=id][value='{late}']")).await;
    wait_for("the held job to show once nothing is ticked", PAGE, || {
        let b = b.clone();
        async move { listed(&b).await.contains(&held).then_some(()) }
    })
    .await;

    // Pause: the list stops refreshing, and stays paused after a reload.
    click(&b, "button.refresh-toggle").await;
    let label = text(&b, "button.refresh-toggle").await;
    assert_eq!(label, "Resume");
    let refreshes = live_counter(&b, "refreshes").await;
    let skipped = live_counter(&b, "skipped").await;
    let unseen = insert_job(
        &queue,
        "billing",
        "charge_card",
        "charge:unseen",
        "{}",
        "ready",
        None,
    )
    .await;
    wait_for("two refresh intervals to pass while paused", PAGE, || {
        let b = b.clone();
        async move { (live_counter(&b, "skipped").await >= skipped + 2).then_some(()) }
    })
    .await;
    assert_eq!(
        live_counter(&b, "refreshes").await,
        refreshes,
        "no refresh while paused"
    );
    assert!(!listed(&b).await.contains(&unseen));
    shot(&b, "lists-paused").await;
    b.refresh().await.unwrap();
    loaded(&b, "queue=billing").await;
    let kept = js(
        &b,
        "return [document.querySelector('button.refresh-toggle').textContent, document.querySelector('select.refresh-interval').value]",
    )
    .await;
    assert_eq!(kept, json!(["Resume", "2"]), "the choice is kept");
    // Resume for the next visitor of this browser profile (and to see it work again).
    click(&b, "button.refresh-toggle").await;
    let late2 = insert_job(
        &queue,
        "billing",
        "charge_card",
        "charge:late2",
        "{}",
        "ready",
        None,
    )
    .await;
    wait_for("the list to refresh again after Resume", PAGE, || {
        let b = b.clone();
        async move { listed(&b).await.contains(&late2).then_some(()) }
    })
    .await;

    // The job page refreshes too: a retried job's status changes by itself.
    let id = seeded.failed[2];
    b.goto(&format!("{base}/jobs/{id}")).await.unwrap();
    loaded(&b, &format!("/jobs/{id}")).await;
    queue.retry(id).await.unwrap();
    wait_for("the job page to show the retry by itself", PAGE, || {
        let b = b.clone();
        async move {
            let badge = text_of(&b, "dd .badge").await?;
            (badge == "ready").then_some(())
        }
    })
    .await;
    shot(&b, "lists-job-refreshed").await;

    b.close().await.unwrap();
}
