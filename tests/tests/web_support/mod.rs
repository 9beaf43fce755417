//! What the dashboard tests share: jobs written with plain SQL in any status, and requests
//! to the dashboard's router.
#![allow(dead_code, unreachable_pub)]

pub mod browser;

use std::net::SocketAddr;

use axum::body::Body;
use axum::extract::ConnectInfo;
use axum::http::{header, Request, StatusCode};
use axum::Router;
use jobqueue::Queue;
use tower::ServiceExt;

/// Inserts a job in `status` (finished ones get `finished_at` now) and returns its id.
pub async fn insert_job(
    queue: &Queue,
    queue_name: &str,
    kind: &str,
    key: &str,
    payload: &str,
    status: &str,
    error: Option<&str>,
) -> u64 {
    let finished = matches!(status, "done" | "failed" | "cancelled");
    if queue.backend() == jobqueue::Backend::Postgres {
        let id: i64 = sqlx::query_scalar(
            "INSERT INTO job_queue (queue, kind, task_key, payload, status, attempts, last_error, finished_at) \
             VALUES ($1, $2, $3, CAST($4 AS JSONB), $5, $6, $7, CASE WHEN $8 THEN job_queue_now() END) \
             RETURNING id",
        )
        .bind(queue_name)
        .bind(kind)
        .bind(key)
        .bind(payload)
        .bind(status)
        .bind(if finished { 1i64 } else { 0 })
        .bind(error)
        .bind(finished)
        .fetch_one(queue.postgres_pool().unwrap())
        .await
        .expect("insert a job");
        return id as u64;
    }
    sqlx::query(
        "INSERT INTO job_queue (queue, kind, task_key, payload, status, attempts, last_error, finished_at) \
         VALUES (?, ?, ?, ?, ?, ?, ?, IF(?, UTC_TIMESTAMP(6), NULL))",
    )
    .bind(queue_name)
    .bind(kind)
    .bind(key)
    .bind(payload)
    .bind(status)
    .bind(if finished { 1 } else { 0 })
    .bind(error)
    .bind(finished)
    .execute(queue.mysql_pool().unwrap())
    .await
    .expect("insert a job")
    .last_insert_id()
}

/// The session cookie every request of these helpers carries (unless it sets its own), as
/// one browser would: pages' tokens are bound to it.
pub const SESSION: &str = "testsessiontestsessiontestsessio";

/// The host name the helpers' requests name: one the dashboard answers by default.
pub const HOST: &str = "localhost";

/// A response: status, the `Location` and `Set-Cookie` headers, the body.
#[derive(Debug)]
pub struct Reply {
    pub status: StatusCode,
    pub location: Option<String>,
    pub headers: axum::http::HeaderMap,
    pub body: String,
}

/// Sends one request to the router as a browser on the dashboard's own page would: with
/// `Host: localhost` and the helpers' session cookie, unless the request names its own.
pub async fn send(router: &Router, mut req: Request<Body>) -> Reply {
    let h = req.headers_mut();
    if !h.contains_key(header::HOST) {
        h.insert(header::HOST, HOST.parse().unwrap());
    }
    if !h.contains_key(header::COOKIE) {
        h.insert(
            header::COOKIE,
            format!("jobqueue_session={SESSION}").parse().unwrap(),
        );
    }
    send_raw(router, req).await
}

/// Sends one request to the router exactly as it is (no host or cookie added).
pub async fn send_raw(router: &Router, req: Request<Body>) -> Reply {
    let res = router
        .clone()
        .oneshot(req)
        .await
        .expect("the router answers");
    let status = res.status();
    let location = res
        .headers()
        .get(header::LOCATION)
        .map(|v| v.to_str().expect("ascii location").to_owned());
    let headers = res.headers().clone();
    let bytes = axum::body::to_bytes(res.into_body(), 16 << 20)
        .await
        .expect("read the body");
    Reply {
        status,
        location,
        headers,
        body: String::from_utf8(bytes.to_vec()).expect("utf-8 body"),
    }
}

/// GET `path`.
pub async fn get(router: &Router, path: &str) -> Reply {
    send(router, Request::get(path).body(Body::empty()).unwrap()).await
}

/// POST a form to `path`, as a browser on the dashboard's page would: same origin, with the
/// helpers' session cookie, to which the token the form carries (from [`csrf_of`] of a
/// page got with [`get`]) is bound.
pub async fn post(router: &Router, path: &str, form: &str) -> Reply {
    post_with_cookie(router, path, form, Some(SESSION)).await
}

/// POST a form to `path` with `session` as the session cookie (none if `None`).
pub async fn post_with_cookie(
    router: &Router,
    path: &str,
    form: &str,
    session: Option<&str>,
) -> Reply {
    let mut req = Request::post(path)
        .header(header::HOST, HOST)
        .header(header::CONTENT_TYPE, "application/x-www-form-urlencoded")
        .header("sec-fetch-site", "same-origin")
        .header(header::ORIGIN, format!("http://{HOST}"));
    if let Some(c) = session {
        req = req.header(header::COOKIE, format!("theme=dark; jobqueue_session={c}"));
    }
    send_raw(router, req.body(Body::from(form.to_owned())).unwrap()).await
}
/// The anti-forgery token of a page's forms.
pub fn csrf_of(html: &str) -> String {
    let at = html
        .find("name=\"csrf\" value=\"")
        .unwrap_or_else(|| panic!("the page has a form with a token: {html}"));
    let rest = &html[at + "name=\"csrf\" value=\"".len()..];
    rest[..rest.find('"').unwrap()].to_owned()
}

/// A token of the strength the dashboard requires.
pub const TOKEN: &str = "a-token-of-real-strength-24";

/// A GET of `path` from `peer` with this `Authorization` header.
pub fn login(path: &str, peer: [u8; 4], authorization: &str) -> Request<Body> {
    let mut req = Request::get(path)
        .header(header::AUTHORIZATION, authorization)
        .body(Body::empty())
        .unwrap();
    req.extensions_mut()
        .insert(ConnectInfo(SocketAddr::from((peer, 40000))));
    req
}
