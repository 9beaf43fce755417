//! The dashboard's log: a failed login at WARN with the peer and the host, an action at
//! INFO with its actor and jobs, and never a secret. A binary of its own: the log is
//! captured by the process's one subscriber, which no other test's events reach.

mod web_support;

use std::net::SocketAddr;

use axum::body::Body;
use axum::extract::ConnectInfo;
use axum::http::{header, Request, StatusCode};
use jobqueue_web::{Auth, Dashboard};
use tests::fresh_queue;
use web_support::{csrf_of, insert_job, login, send, TOKEN};

/// A log writer into a shared buffer.
#[derive(Clone, Default)]
struct Captured(std::sync::Arc<std::sync::Mutex<Vec<u8>>>);

impl std::io::Write for Captured {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Captured {
    fn text(&self) -> String {
        String::from_utf8_lossy(&self.0.lock().unwrap()).into_owned()
    }
}

#[tokio::test]
async fn failed_logins_and_actions_are_logged_without_secrets() {
    let queue = fresh_queue("web_safety_logs").await;
    let id = insert_job(&queue, "mail", "k", "l-1", "{}", "failed", Some("boom")).await;
    let captured = Captured::default();
    let writer = captured.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_max_level(tracing::Level::INFO)
        .with_ansi(false)
        .with_writer(move || writer.clone())
        .finish();
    tracing::subscriber::set_global_default(subscriber).expect("the only subscriber");

    let router = Dashboard::new(queue.clone())
        .auth(Auth::Token(TOKEN.into()))
        .router();
    let r = send(
        &router,
        login("/", [192, 0, 2, 9], "Bearer wrong-guess-of-the-token"),
    )
    .await;
    assert_eq!(r.status, StatusCode::UNAUTHORIZED);
    let auth = format!("Bearer {TOKEN}");
    let page = send(
        &router,
        login(&format!("/jobs/{id}"), [192, 0, 2, 10], &auth),
    )
    .await;
    let token = csrf_of(&page.body);
    let mut req = Request::post(format!("/jobs/{id}/retry"))
        .header(header::AUTHORIZATION, &auth)
        .header(header::CONTENT_TYPE, "application/x-www-form-urlencoded")
        .body(Body::from(format!("csrf={token}")))
        .unwrap();
    req.extensions_mut()
        .insert(ConnectInfo(SocketAddr::from(([192, 0, 2, 10], 40000))));
    assert_eq!(send(&router, req).await.status, StatusCode::SEE_OTHER);

    let log = captured.text();
    let failed = log
        .lines()
        .find(|l| l.contains("dashboard login failed"))
        .unwrap_or_else(|| panic!("a failed login is logged: {log}"));
    assert!(
        failed.contains("WARN") && failed.contains("192.0.2.9") && failed.contains("localhost"),
        "{failed}"
    );
    let action = log
        .lines()
        .find(|l| l.contains("dashboard action"))
        .unwrap_or_else(|| panic!("an action is logged: {log}"));
    assert!(
        action.contains("INFO")
            && action.contains("actor=token")
            && action.contains("action=\"retry\"")
            && action.contains(&format!("[{id}]")),
        "{action}"
    );
    assert!(!log.contains("wrong-guess"), "no secret in the log: {log}");
    assert!(!log.contains(TOKEN), "no secret in the log: {log}");
}
