//! The dashboard's safety rules in a real browser: headless Chromium against a dashboard
//! served on a loopback port. A page of another origin (a second local server, standing
//! for a site the operator visits) auto-submits a form to the dashboard's retry URL, and
//! the job must stay failed; a name that resolves to 127.0.0.1 (DNS rebinding, simulated
//! with Chromium's host resolver rules) gets the refusal, not the dashboard; an action from
//! the dashboard itself is recorded and shown on the job page and the audit page.
//! Screenshots go to `target/screenshots/safety-*.png`.
//!
//! Needs `chromium` and `chromedriver` (Debian: `apt-get install chromium chromium-driver`).

mod web_support;

use std::time::Duration;

use axum::response::Html;
use fantoccini::{Client, Locator};
use jobqueue::JobStatus;
use serde_json::json;
use tests::{fresh_queue, row, wait_for};
use web_support::browser::{js, serve, shot, Driver};
use web_support::insert_job;

/// Serves `html` at `/` on a free loopback port (the attacker's site); its port.
async fn attacker_site(html: String) -> u16 {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let app = axum::Router::new().route(
        "/",
        axum::routing::get(move || {
            let html = html.clone();
            async move { Html(html) }
        }),
    );
    tokio::spawn(async move { axum::serve(listener, app).await });
    port
}

/// Waits until the page's body text contains `text`; returns the body text.
async fn body_with(b: &Client, text: &str) -> String {
    let text = text.to_owned();
    wait_for(
        "the page to show the expected text",
        Duration::from_secs(20),
        || {
            let b = b.clone();
            let text = text.clone();
            async move {
                let body = b
                    .execute(
                        "return document.readyState === 'complete' && document.body ? document.body.innerText : ''",
                        vec![],
                    )
                    .await
                    .ok()?;
                let body = body.as_str()?.to_owned();
                body.contains(&text).then_some(body)
            }
        },
    )
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forged_forms_and_rebinding_hosts_are_refused_in_a_browser() {
    let queue = fresh_queue("web_browser_safety").await;
    let id = insert_job(
        &queue,
        "mail",
        "send_welcome",
        "welcome:ada",
        r#"{"user_id": 42}"#,
        "failed",
        Some("smtp: 550 mailbox unavailable"),
    )
    .await;
    let base = serve(&queue).await; // http://127.0.0.1:<port>/jobs
    let port: u16 = base
        .trim_start_matches("http://127.0.0.1:")
        .split('/')
        .next()
        .unwrap()
        .parse()
        .unwrap();

    let driver = Driver::start().await;
    let b = driver
        .browser_with(&["--host-resolver-rules=MAP evil.test 127.0.0.1"])
        .await;

    // The operator has the dashboard open: the browser holds its session cookie.
    b.goto(&format!("{base}/jobs/{id}")).await.unwrap();
    body_with(&b, "Operator actions").await;
    let csrf = "return document.querySelector('input[name=csrf]').value";
    let token = js(&b, csrf).await;

    // A page of another origin posts a form to the retry URL: same site by the browser's
    // rules (127.0.0.1, another port), and then from another site (localhost).
    let form = format!(
        "<!doctype html><title>Win a prize</title><form id=f method=post action=\"{base}/jobs/{id}/retry\">\
         <input name=csrf value=\"AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA\"></form>\
         <script>document.getElementById('f').submit()</script>"
    );
    let evil = attacker_site(form).await;
    for (name, origin) in [
        ("127.0.0.1", format!("http://127.0.0.1:{evil}/")),
        ("localhost", format!("http://localhost:{evil}/")),
    ] {
        b.goto(&origin).await.unwrap();
        let text = body_with(&b, "refused").await;
        assert!(text.contains("403"), "{name}: {text}");
        assert_eq!(
            row(&queue, id).await.status,
            JobStatus::Failed,
            "a form of {origin} did not retry the job"
        );
        if name == "127.0.0.1" {
            shot(&b, "safety-forged-form").await;
        }
    }

    // DNS rebinding: evil.test resolves to 127.0.0.1, so the browser reaches the dashboard
    // under the attacker's name. The dashboard refuses it and shows nothing of its own.
    b.goto(&format!("http://evil.test:{port}/jobs/jobs?status=failed"))
        .await
        .unwrap();
    let text = body_with(&b, "does not answer to the host name").await;
    assert!(text.contains("\"evil.test\""), "{text}");
    assert!(text.contains("--allow-host evil.test"), "{text}");
    assert!(!text.contains("welcome:ada"), "{text}");
    shot(&b, "safety-rebinding-refused").await;

    // A link to the job from another site (a chat message, say) opens it with the browser's
    // session intact: its Retry button works, and the action is recorded.
    let chat = attacker_site(format!(
        "<!doctype html><title>chat</title><a id=l href=\"{base}/jobs/{id}\">job {id}</a>"
    ))
    .await;
    b.goto(&format!("http://localhost:{chat}/")).await.unwrap();
    b.find(Locator::Id("l"))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    body_with(&b, "Operator actions").await;
    assert_eq!(
        js(&b, csrf).await,
        token,
        "the same session: forms of other open tabs stay valid"
    );
    b.find(Locator::Css("form[action$='/retry'] button"))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    body_with(&b, "1 job changed").await;
    assert_eq!(row(&queue, id).await.status, JobStatus::Ready);
    let entries = js(
        &b,
        "return [...document.querySelectorAll('#audit tbody tr')].map(r => r.cells[1].textContent + ' ' + r.cells[2].textContent)",
    )
    .await;
    assert_eq!(entries, json!(["loopback retry"]));
    js(&b, "document.getElementById('audit').scrollIntoView()").await;
    shot(&b, "safety-job-audit").await;

    b.goto(&format!("{base}/audit")).await.unwrap();
    let text = body_with(&b, "Audit log").await;
    assert!(text.contains("loopback"), "{text}");
    assert!(text.contains("retry"), "{text}");
    shot(&b, "safety-audit").await;

    // A redacted dashboard: the job's producer-controlled fields are hidden.
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let redacted = listener.local_addr().unwrap();
    let app = jobqueue_web::Dashboard::new(queue.clone())
        .redact_job_data(true)
        .router();
    tokio::spawn(async move { axum::serve(listener, app).await });
    b.goto(&format!("http://{redacted}/jobs/{id}"))
        .await
        .unwrap();
    let text = body_with(&b, "Operator actions").await;
    for hidden in ["welcome:ada", "mailbox unavailable", "user_id"] {
        assert!(!text.contains(hidden), "{hidden}: {text}");
    }
    assert!(text.contains("(redacted #"), "{text}");
    shot(&b, "safety-redacted-job").await;

    b.close().await.unwrap();
}
