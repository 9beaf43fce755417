//! The dashboard's safety rules over HTTP, against a real database: the `Host` allow-list
//! (DNS rebinding), failing closed without authentication, login strength and throttling,
//! the session-bound anti-forgery token and `Origin`, the audit of every action, redaction of
//! every field a job's producer controls, 400s for numbers out of range, signed notices and
//! error pages without internals.

mod web_support;

use std::net::SocketAddr;
use std::time::Duration;

use axum::body::Body;
use axum::extract::ConnectInfo;
use axum::http::{header, Request, StatusCode};
use base64::Engine;
use jobqueue::JobStatus;
use jobqueue_web::{Auth, Dashboard, MAX_LOGIN_FAILURES};
use tests::{fresh_queue, row};
use web_support::{
    csrf_of, get, insert_job, login, post, post_with_cookie, send, send_raw, SESSION, TOKEN,
};

fn get_as(path: &str, host: &str) -> Request<Body> {
    Request::get(path)
        .header(header::HOST, host)
        .body(Body::empty())
        .unwrap()
}

#[tokio::test]
async fn a_rebinding_host_is_refused_and_no_page_content_leaks() {
    let queue = fresh_queue("web_safety_host").await;
    insert_job(
        &queue,
        "mail",
        "send_welcome",
        "secret-key:ada",
        "{}",
        "failed",
        Some("boom"),
    )
    .await;
    let router = Dashboard::new(queue.clone()).router();

    // What a browser sends after a page of evil.example rebound its name to 127.0.0.1.
    for path in ["/", "/jobs", "/jobs?status=failed", "/assets/style.css"] {
        let r = send(&router, get_as(path, "evil.example:8080")).await;
        assert_eq!(r.status, StatusCode::FORBIDDEN, "{path}: {}", r.body);
        assert!(
            r.body.contains("\"evil.example\"") && r.body.contains("--allow-host evil.example"),
            "the refusal names the host and how to allow it: {}",
            r.body
        );
        assert!(!r.body.contains("secret-key:ada"), "{}", r.body);
        assert!(!r.body.contains("name=\"csrf\""), "{}", r.body);
        assert!(
            r.headers.get(header::SET_COOKIE).is_none(),
            "no session is given to a refused host"
        );
        assert!(
            r.headers.contains_key(header::CONTENT_SECURITY_POLICY),
            "refusals carry the security headers"
        );
    }
    // The loopback names, with any port and in any case, are served.
    for host in ["localhost:8080", "127.0.0.1:9", "[::1]:8080", "LOCALHOST"] {
        let r = send(&router, get_as("/jobs", host)).await;
        assert_eq!(r.status, StatusCode::OK, "{host}");
        assert!(r.body.contains("secret-key:ada"), "{host}");
    }
    // A request that names no host is refused, not served.
    let r = send_raw(&router, Request::get("/").body(Body::empty()).unwrap()).await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST, "{}", r.body);

    // An allowed name is served, and only that one.
    let router = Dashboard::new(queue.clone())
        .auth(Auth::Token(TOKEN.into()))
        .allowed_hosts(["ops.example.com"])
        .router();
    let with_token = |host: &str| {
        Request::get("/jobs")
            .header(header::HOST, host)
            .header(header::AUTHORIZATION, format!("Bearer {TOKEN}"))
            .body(Body::empty())
            .unwrap()
    };
    assert_eq!(
        send(&router, with_token("ops.example.com:443"))
            .await
            .status,
        StatusCode::OK
    );
    assert_eq!(
        send(&router, with_token("evil.example")).await.status,
        StatusCode::FORBIDDEN
    );
}

#[tokio::test]
async fn other_hosts_without_authentication_and_weak_secrets_are_refused_at_build() {
    let queue = fresh_queue("web_safety_build").await;
    let err = Dashboard::new(queue.clone())
        .allowed_hosts(["ops.example.com"])
        .try_router()
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("ops.example.com") && err.contains("authenticated_upstream"),
        "{err}"
    );
    // Loopback names need nothing; the application may say it authenticates upstream.
    assert!(Dashboard::new(queue.clone())
        .allowed_hosts(["localhost", "127.0.0.1:8080"])
        .try_router()
        .is_ok());
    let upstream = Dashboard::new(queue.clone())
        .allowed_hosts(["ops.example.com"])
        .authenticated_upstream(true)
        .actor_header("x-forwarded-user")
        .router();
    assert_eq!(
        send(&upstream, get_as("/", "ops.example.com")).await.status,
        StatusCode::OK
    );
    // The user the application names is the actor of its actions.
    let token = csrf_of(&send(&upstream, get_as("/", "ops.example.com")).await.body);
    let r = send(
        &upstream,
        Request::post("/queues/mail/pause")
            .header(header::HOST, "ops.example.com")
            .header(header::ORIGIN, "https://ops.example.com")
            .header("x-forwarded-user", "grace")
            .header(header::CONTENT_TYPE, "application/x-www-form-urlencoded")
            .body(Body::from(format!("csrf={token}")))
            .unwrap(),
    )
    .await;
    assert_eq!(r.status, StatusCode::SEE_OTHER, "{}", r.body);
    assert_eq!(queue.audit_log(1).await.unwrap()[0].actor, "upstream:grace");

    let weak = Dashboard::new(queue.clone())
        .auth(Auth::Token("s3cret".into()))
        .try_router()
        .unwrap_err()
        .to_string();
    assert!(
        weak.contains("fewer than 16") && weak.contains("openssl rand -base64 24"),
        "{weak}"
    );
    let weak = Dashboard::new(queue.clone())
        .auth(Auth::Basic {
            user: "ops".into(),
            password: "short-pw".into(),
        })
        .try_router()
        .unwrap_err()
        .to_string();
    assert!(weak.contains("fewer than 12"), "{weak}");
    let weak = Dashboard::new(queue.clone()).auth(Auth::Token("x".into()));
    let panicked = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| weak.router()));
    assert!(panicked.is_err(), "router() panics on a refused setting");
}

#[tokio::test]
async fn failed_logins_are_throttled_per_address() {
    let queue = fresh_queue("web_safety_throttle").await;
    let router = Dashboard::new(queue.clone())
        .auth(Auth::Token(TOKEN.into()))
        .router();
    let attacker = [10, 0, 0, 66];
    // Requests without credentials (a browser's first, a health probe) do not count.
    for _ in 0..2 * MAX_LOGIN_FAILURES {
        let mut req = Request::get("/").body(Body::empty()).unwrap();
        req.extensions_mut()
            .insert(ConnectInfo(SocketAddr::from((attacker, 40000))));
        let r = send(&router, req).await;
        assert_eq!(r.status, StatusCode::UNAUTHORIZED);
        assert!(
            r.headers.contains_key(header::CONTENT_SECURITY_POLICY),
            "the 401 carries the security headers"
        );
    }
    for i in 0..MAX_LOGIN_FAILURES {
        let r = send(&router, login("/", attacker, &format!("Bearer guess-{i}"))).await;
        assert_eq!(r.status, StatusCode::UNAUTHORIZED, "guess {i}");
    }
    // Past the limit, that address is answered 429, even with the right token.
    for authorization in ["Bearer guess-x".to_owned(), format!("Bearer {TOKEN}")] {
        let r = send(&router, login("/", attacker, &authorization)).await;
        assert_eq!(r.status, StatusCode::TOO_MANY_REQUESTS, "{}", r.body);
        let retry: u64 = r.headers[header::RETRY_AFTER]
            .to_str()
            .unwrap()
            .parse()
            .unwrap();
        assert!((1..=60).contains(&retry), "Retry-After: {retry}");
    }
    // Another address is not held back, and the scheme's case does not matter.
    let r = send(
        &router,
        login("/", [10, 0, 0, 7], &format!("bearer {TOKEN}")),
    )
    .await;
    assert_eq!(r.status, StatusCode::OK);
    let basic = base64::engine::general_purpose::STANDARD.encode(format!("any:{TOKEN}"));
    let r = send(
        &router,
        login("/", [10, 0, 0, 8], &format!("BASIC {basic}")),
    )
    .await;
    assert_eq!(r.status, StatusCode::OK);

    // Without an address (no connection info), failures are logged but share no bucket:
    // a bucket everyone shared would let anyone lock every operator out.
    for i in 0..2 * MAX_LOGIN_FAILURES {
        let req = Request::get("/")
            .header(header::HOST, "localhost")
            .header(header::AUTHORIZATION, format!("Bearer guess-{i}"))
            .body(Body::empty())
            .unwrap();
        assert_eq!(
            send_raw(&router, req).await.status,
            StatusCode::UNAUTHORIZED
        );
    }
    let req = Request::get("/")
        .header(header::HOST, "localhost")
        .header(header::AUTHORIZATION, format!("Bearer {TOKEN}"))
        .body(Body::empty())
        .unwrap();
    assert_eq!(send_raw(&router, req).await.status, StatusCode::OK);

    // Behind a proxy, the address it appends to X-Forwarded-For is the client's, when the
    // dashboard is told to trust it: one client's failures hold back that client only.
    let proxied = Dashboard::new(queue.clone())
        .auth(Auth::Token(TOKEN.into()))
        .trust_forwarded_for(true)
        .router();
    let proxy = [10, 0, 0, 1];
    let via = |client: &str, authorization: &str| {
        let mut req = login("/", proxy, authorization);
        req.headers_mut().insert(
            "x-forwarded-for",
            format!("203.0.113.9, {client}").parse().unwrap(),
        );
        req
    };
    for i in 0..MAX_LOGIN_FAILURES {
        let r = send(&proxied, via("198.51.100.66", &format!("Bearer guess-{i}"))).await;
        assert_eq!(r.status, StatusCode::UNAUTHORIZED, "guess {i}");
    }
    let r = send(&proxied, via("198.51.100.66", &format!("Bearer {TOKEN}"))).await;
    assert_eq!(r.status, StatusCode::TOO_MANY_REQUESTS);
    let r = send(&proxied, via("198.51.100.7", &format!("Bearer {TOKEN}"))).await;
    assert_eq!(
        r.status,
        StatusCode::OK,
        "another client behind the same proxy"
    );
}

#[tokio::test]
async fn actions_from_another_origin_or_session_are_refused() {
    let queue = fresh_queue("web_safety_origin").await;
    let id = insert_job(&queue, "default", "k", "o-1", "{}", "failed", Some("boom")).await;
    let router = Dashboard::new(queue.clone()).router();
    let token = csrf_of(&get(&router, &format!("/jobs/{id}")).await.body);
    let path = format!("/jobs/{id}/retry");
    let form_post = |origin: &str, host: &str, fetch_site: Option<&str>| {
        let mut req = Request::post(&path)
            .header(header::HOST, host)
            .header(header::CONTENT_TYPE, "application/x-www-form-urlencoded")
            .header(header::COOKIE, format!("jobqueue_session={SESSION}"))
            .header(header::ORIGIN, origin);
        if let Some(site) = fetch_site {
            req = req.header("sec-fetch-site", site);
        }
        req.body(Body::from(format!("csrf={token}"))).unwrap()
    };
    // With the right session and token, but sent by a page of another origin: even without
    // `Sec-Fetch-Site` (older browsers), `Origin` gives it away.
    for (origin, host) in [
        ("http://evil.example", "localhost:8080"),
        ("http://127.0.0.1:9999", "127.0.0.1:8080"),
        ("null", "localhost:8080"),
    ] {
        let r = send(&router, form_post(origin, host, None)).await;
        assert_eq!(r.status, StatusCode::FORBIDDEN, "{origin}: {}", r.body);
        assert!(r.body.contains("another site"), "{}", r.body);
    }
    let r = send(
        &router,
        form_post("http://localhost:8080", "localhost:8080", Some("same-site")),
    )
    .await;
    assert_eq!(r.status, StatusCode::FORBIDDEN);
    // Another browser's session (a cookie the attacker planted, say) does not go with it.
    let r = post_with_cookie(
        &router,
        &path,
        &format!("csrf={token}"),
        Some("plantedplantedplantedplantedplan"),
    )
    .await;
    assert_eq!(r.status, StatusCode::FORBIDDEN);
    assert!(r.body.contains("the form expired"), "{}", r.body);
    assert_eq!(row(&queue, id).await.status, JobStatus::Failed);

    // Replicas with one secret accept each other's forms; from its own origin it is done.
    let a = Dashboard::new(queue.clone())
        .secret("shared-secret")
        .router();
    let b = Dashboard::new(queue.clone())
        .secret("shared-secret")
        .router();
    let token = csrf_of(&get(&a, &format!("/jobs/{id}")).await.body);
    let r = send(
        &b,
        Request::post(&path)
            .header(header::HOST, "localhost:8080")
            .header(header::CONTENT_TYPE, "application/x-www-form-urlencoded")
            .header(header::COOKIE, format!("jobqueue_session={SESSION}"))
            .header(header::ORIGIN, "http://localhost:8080")
            .body(Body::from(format!("csrf={token}")))
            .unwrap(),
    )
    .await;
    assert_eq!(r.status, StatusCode::SEE_OTHER, "{}", r.body);
    assert_eq!(row(&queue, id).await.status, JobStatus::Ready);
}

#[tokio::test]
async fn the_session_cookie_is_strict_http_only_and_secure_over_https() {
    let queue = fresh_queue("web_safety_cookie").await;
    let plain = Dashboard::new(queue.clone()).router();
    let r = send_raw(&plain, get_as("/", "localhost")).await;
    let cookie = r.headers[header::SET_COOKIE].to_str().unwrap().to_owned();
    assert!(cookie.starts_with("jobqueue_session="), "{cookie}");
    assert!(
        cookie.contains("HttpOnly") && cookie.contains("SameSite=Strict"),
        "{cookie}"
    );
    assert!(!cookie.contains("Secure"), "{cookie}");
    // A link followed from another site arrives without the Strict cookie: the page reloads
    // itself (a same-site navigation, with the cookie) instead of replacing the session.
    let r = send_raw(
        &plain,
        Request::get("/jobs")
            .header(header::HOST, "localhost")
            .header("sec-fetch-site", "cross-site")
            .header("sec-fetch-mode", "navigate")
            .body(Body::empty())
            .unwrap(),
    )
    .await;
    assert_eq!(r.status, StatusCode::OK);
    assert!(r.body.contains("http-equiv=\"refresh\""), "{}", r.body);
    assert!(r.headers.get(header::SET_COOKIE).is_none());
    // X-Forwarded-Proto counts only when the application says its proxy sets it.
    let forwarded = |router| {
        send_raw(
            router,
            Request::get("/")
                .header(header::HOST, "localhost")
                .header("x-forwarded-proto", "https")
                .body(Body::empty())
                .unwrap(),
        )
    };
    let r = forwarded(&plain).await;
    assert!(!r.headers[header::SET_COOKIE]
        .to_str()
        .unwrap()
        .contains("Secure"));
    let proxied = Dashboard::new(queue.clone())
        .trust_forwarded_proto(true)
        .router();
    let r = forwarded(&proxied).await;
    let cookie = r.headers[header::SET_COOKIE].to_str().unwrap();
    assert!(
        cookie.starts_with("__Host-jobqueue_session=") && cookie.contains("; Secure"),
        "{cookie}"
    );
}

/// The audit rows: actor, action, job id, queue, detail, oldest first.
async fn audit_rows(
    queue: &jobqueue::Queue,
) -> Vec<(String, String, Option<u64>, Option<String>, Option<String>)> {
    sqlx::query_as("SELECT CAST(actor AS CHAR), CAST(action AS CHAR), job_id, CAST(queue AS CHAR), CAST(detail AS CHAR) \
         FROM job_queue_audit ORDER BY id")
        .fetch_all(queue.mysql_pool().unwrap())
        .await
        .unwrap()
}

#[tokio::test]
async fn every_action_is_audited_and_shown_on_the_job_and_audit_pages() {
    let queue = fresh_queue("web_safety_audit").await;
    let failed = insert_job(&queue, "mail", "k", "a-1", "{}", "failed", Some("boom")).await;
    let ready = insert_job(&queue, "mail", "k", "a-2", "{}", "ready", None).await;
    let mut bulk_ids = Vec::new();
    for i in 0..3 {
        bulk_ids
            .push(insert_job(&queue, "bulk", "k", &format!("b-{i}"), "{}", "failed", None).await);
    }
    insert_job(&queue, "old", "k", "p-1", "{}", "done", None).await;
    let basic = base64::engine::general_purpose::STANDARD.encode("ada:correct-horse-battery");
    let router = Dashboard::new(queue.clone())
        .auth(Auth::Basic {
            user: "ada".into(),
            password: "correct-horse-battery".into(),
        })
        .router();
    let authed = |req: axum::http::request::Builder| {
        req.header(header::AUTHORIZATION, format!("Basic {basic}"))
            .header(header::HOST, "localhost")
            .header(header::COOKIE, format!("jobqueue_session={SESSION}"))
    };
    let page = send(
        &router,
        authed(Request::get("/")).body(Body::empty()).unwrap(),
    )
    .await;
    let token = csrf_of(&page.body);
    let act = |path: String, form: String| {
        let router = router.clone();
        let req = authed(Request::post(path))
            .header(header::CONTENT_TYPE, "application/x-www-form-urlencoded")
            .header(header::ORIGIN, "http://localhost")
            .body(Body::from(form))
            .unwrap();
        async move { send(&router, req).await }
    };
    for (path, form) in [
        (format!("/jobs/{failed}/retry"), format!("csrf={token}")),
        (format!("/jobs/{ready}/cancel"), format!("csrf={token}")),
        ("/queues/mail/pause".into(), format!("csrf={token}")),
        ("/queues/mail/resume".into(), format!("csrf={token}")),
        (
            "/bulk".into(),
            format!("csrf={token}&queue=bulk&status=failed&action=retry"),
        ),
        (
            "/purge".into(),
            format!("csrf={token}&status=done&older_than_hours=0"),
        ),
    ] {
        let r = act(path.clone(), form).await;
        assert_eq!(r.status, StatusCode::SEE_OTHER, "{path}: {}", r.body);
    }
    let rows = audit_rows(&queue).await;
    let summary: Vec<(&str, &str, Option<u64>, Option<&str>)> = rows
        .iter()
        .map(|(who, what, job, q, _)| (who.as_str(), what.as_str(), *job, q.as_deref()))
        .collect();
    assert_eq!(
        summary,
        [
            ("ada", "retry", Some(failed), None),
            ("ada", "cancel", Some(ready), None),
            ("ada", "pause", None, Some("mail")),
            ("ada", "resume", None, Some("mail")),
            // The summary, then a row per job the bulk action changed.
            ("ada", "bulk-retry", None, Some("bulk")),
            ("ada", "bulk-retry", Some(bulk_ids[0]), Some("bulk")),
            ("ada", "bulk-retry", Some(bulk_ids[1]), Some("bulk")),
            ("ada", "bulk-retry", Some(bulk_ids[2]), Some("bulk")),
            ("ada", "purge", None, None),
        ]
    );
    let bulk = rows[4].4.as_deref().unwrap();
    assert!(
        bulk.contains("queue=bulk&status=failed") && bulk.contains("3 jobs changed"),
        "{bulk}"
    );
    let purge = rows[8].4.as_deref().unwrap();
    assert!(
        purge.contains("done") && purge.contains("1 job deleted"),
        "{purge}"
    );

    // A job's page shows its own entries; /audit shows them all.
    let page = send(
        &router,
        authed(Request::get(format!("/jobs/{failed}")))
            .body(Body::empty())
            .unwrap(),
    )
    .await
    .body;
    let section = &page[page.find("Operator actions").expect(&page)..];
    assert!(section.contains("<td>ada</td><td>retry</td>"), "{section}");
    let audit = send(
        &router,
        authed(Request::get("/audit")).body(Body::empty()).unwrap(),
    )
    .await;
    assert_eq!(audit.status, StatusCode::OK);
    for what in ["retry", "cancel", "pause", "resume", "bulk-retry", "purge"] {
        assert!(
            audit.body.contains(&format!("<td>ada</td><td>{what}</td>")),
            "{what}: {}",
            audit.body
        );
    }
    assert!(audit
        .body
        .contains(&format!("/jobs/{failed}\">{failed}</a>")));

    // An action that changes several named jobs writes a summary and a row per job; the
    // actor of a token is `token`, of an unauthenticated loopback dashboard `loopback`.
    queue
        .record_audit(
            "token",
            "bulk-retry",
            &[900_001, 900_002, 900_003],
            None,
            Some("selection"),
        )
        .await
        .unwrap();
    let per_job = queue.audit_for_job(900_002, 10).await.unwrap();
    assert_eq!(per_job.len(), 1);
    assert_eq!(per_job[0].action, "bulk-retry");
    assert_eq!(queue.audit_log(4).await.unwrap()[3].job_id, None);
    let open = Dashboard::new(queue.clone()).router();
    let token = csrf_of(&get(&open, "/").await.body);
    let r = post(&open, "/queues/x/pause", &format!("csrf={token}")).await;
    assert_eq!(r.status, StatusCode::SEE_OTHER);
    assert_eq!(queue.audit_log(1).await.unwrap()[0].actor, "loopback");
}

#[tokio::test]
async fn redaction_hides_every_field_a_producer_controls() {
    use jobqueue_runtime::__store::Finish;
    let queue = fresh_queue("web_safety_redact").await;
    let id = insert_job(
        &queue,
        "mail",
        "send_welcome",
        "key-secret:ada@example.invalid",
        r#"{"email":"payload-secret"}"#,
        "ready",
        None,
    )
    .await;
    // An attempt that failed with an error naming its input.
    let store = queue.store();
    assert_eq!(store.claim("mail", "worker-a", 1).await.unwrap().len(), 1);
    let retry = Finish::Retry {
        delay: Duration::ZERO,
        error: "attempt-secret".into(),
    };
    store.finish("worker-a", id, 1, &retry).await.unwrap();
    sqlx::query(
        "UPDATE job_queue SET status = 'failed', finished_at = UTC_TIMESTAMP(6), last_error = 'error-secret', \
         metadata = '{\"tenant\":\"meta-secret\"}', progress = '{\"at\":\"progress-secret\"}', \
         progress_at = UTC_TIMESTAMP(6), output = '\"output-secret\"', \
         concurrency_key = 'ckey-secret', rate_key = 'rkey-secret' WHERE id = ?",
    )
    .bind(id)
    .execute(queue.mysql_pool().unwrap())
    .await
    .unwrap();
    let secrets = [
        "payload-secret",
        "key-secret",
        "attempt-secret",
        "error-secret",
        "meta-secret",
        "progress-secret",
        "output-secret",
        "ckey-secret",
        "rkey-secret",
    ];
    let plain = Dashboard::new(queue.clone()).router();
    let shown = get(&plain, &format!("/jobs/{id}")).await.body;
    for s in [
        "payload-secret",
        "key-secret",
        "error-secret",
        "meta-secret",
    ] {
        assert!(shown.contains(s), "without redaction {s} is shown");
    }
    let router = Dashboard::new(queue.clone()).redact_job_data(true).router();
    for path in [
        format!("/jobs/{id}"),
        "/jobs".into(),
        "/jobs?status=failed".into(),
        "/".into(),
        "/workers".into(),
        "/periodic".into(),
        "/kinds".into(),
        "/queues/mail".into(),
        "/audit".into(),
    ] {
        let r = get(&router, &path).await;
        assert_eq!(r.status, StatusCode::OK, "{path}");
        for s in secrets {
            assert!(!r.body.contains(s), "{path} shows {s}: {}", r.body);
        }
        if path.starts_with("/jobs") {
            assert!(r.body.contains("send_welcome"), "{path} keeps the kind");
        }
    }
    let page = get(&router, &format!("/jobs/{id}")).await.body;
    assert!(
        page.contains("(redacted #"),
        "a digest stands for the key: {page}"
    );
    // Filters over redacted fields would tell what they hold.
    for path in ["/jobs?key=key-sec", "/jobs?meta=tenant%3Dmeta-secret"] {
        let r = get(&router, path).await;
        assert_eq!(r.status, StatusCode::BAD_REQUEST, "{path}");
    }
    // Nor in a form's body: a bulk action's count would tell what matched.
    let token = csrf_of(&get(&router, "/").await.body);
    for field in [
        "error=error-sec",
        "key=key-sec",
        "meta=tenant%3Dmeta-secret",
    ] {
        let r = post(
            &router,
            "/bulk",
            &format!("csrf={token}&action=retry&status=failed&{field}"),
        )
        .await;
        assert_eq!(r.status, StatusCode::BAD_REQUEST, "{field}: {}", r.body);
        assert!(r.body.contains("redacts job data"), "{field}: {}", r.body);
    }
    assert_eq!(
        row(&queue, id).await.status,
        JobStatus::Failed,
        "nothing retried"
    );
    // The search box finds by id, never by a guessed key.
    let r = get(&router, "/search?q=key-secret%3Aada%40example.invalid").await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST, "{}", r.body);
    assert!(!r.body.contains(&format!("/jobs/{id}")), "{}", r.body);
    let r = get(&router, &format!("/search?q={id}")).await;
    assert_eq!(
        r.location.as_deref(),
        Some(format!("/jobs/{id}").as_str()),
        "found by id"
    );
}

#[tokio::test]
async fn numbers_out_of_range_and_bad_input_are_400_not_a_panic() {
    let queue = fresh_queue("web_safety_numbers").await;
    let id = insert_job(&queue, "default", "k", "n-1", "{}", "done", None).await;
    let router = Dashboard::new(queue.clone()).router();
    let token = csrf_of(&get(&router, "/").await.body);
    for age in ["1e300", "-1", "NaN", "inf", "abc", "", "5e15", "900000"] {
        let r = post(
            &router,
            "/purge",
            &format!("csrf={token}&status=done&older_than_hours={}", age),
        )
        .await;
        assert_eq!(r.status, StatusCode::BAD_REQUEST, "{age}: {}", r.body);
        assert!(r.body.contains("number of hours"), "{age}: {}", r.body);
    }
    assert!(
        row(&queue, id).await.status == JobStatus::Done,
        "nothing purged"
    );
    for (path, form) in [
        (
            "/purge",
            format!("csrf={token}&status=ready&older_than_hours=1"),
        ),
        (
            "/purge",
            format!("csrf={token}&status=bogus&older_than_hours=1"),
        ),
        ("/queues/bad%20name/pause", format!("csrf={token}")),
        (
            "/jobs/99999999999999999999999/retry",
            format!("csrf={token}"),
        ),
        ("/jobs/-1/cancel", format!("csrf={token}")),
        ("/bulk", format!("csrf={token}&action=explode")),
    ] {
        let r = post(&router, path, &form).await;
        assert_eq!(
            r.status,
            StatusCode::BAD_REQUEST,
            "{path} {form}: {}",
            r.body
        );
    }
    // The largest id is a job that does not exist: 404, not an error.
    let r = post(
        &router,
        &format!("/jobs/{}/retry", u64::MAX),
        &format!("csrf={token}"),
    )
    .await;
    assert_eq!(r.status, StatusCode::NOT_FOUND, "{}", r.body);
    assert!(r.body.contains(&u64::MAX.to_string()), "{}", r.body);
}

#[tokio::test]
async fn only_notices_the_dashboard_wrote_are_shown() {
    let queue = fresh_queue("web_safety_notice").await;
    let router = Dashboard::new(queue.clone()).router();
    let forged = get(
        &router,
        "/jobs?notice=Security%20notice%3A%20re-enter%20your%20token%20at%20evil.example",
    )
    .await;
    assert_eq!(forged.status, StatusCode::OK);
    assert!(!forged.body.contains("evil.example"), "{}", forged.body);
    let forged = get(&router, "/?notice=hello&nsig=AAAAAAAAAAAAAAAAAAAAAA").await;
    assert!(!forged.body.contains("hello"), "{}", forged.body);
    // The notice of an action is signed, and shown.
    let token = csrf_of(&get(&router, "/").await.body);
    let r = post(&router, "/queues/mail/pause", &format!("csrf={token}")).await;
    let shown = get(&router, r.location.as_deref().unwrap()).await.body;
    assert!(shown.contains("Queue mail paused"), "{shown}");
}

#[tokio::test]
async fn database_errors_show_a_request_id_and_no_internals() {
    let queue = fresh_queue("web_safety_errors").await;
    let router = Dashboard::new(queue.clone()).router();
    sqlx::query("DROP TABLE job_queue_audit")
        .execute(queue.mysql_pool().unwrap())
        .await
        .unwrap();
    let r = get(&router, "/audit").await;
    assert_eq!(r.status, StatusCode::INTERNAL_SERVER_ERROR);
    assert!(
        r.body
            .contains("the database could not answer; see the dashboard&#39;s log (request id "),
        "{}",
        r.body
    );
    assert!(!r.body.contains("job_queue_audit"), "{}", r.body);
    assert!(!r.body.to_lowercase().contains("sql"), "{}", r.body);
    // A 400 keeps its specific message.
    let r = get(&router, "/jobs?status=bogus").await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST);
    assert!(r.body.contains("unknown status"), "{}", r.body);
}

#[tokio::test]
async fn bidi_overrides_are_shown_as_marks() {
    let queue = fresh_queue("web_safety_bidi").await;
    let id = insert_job(
        &queue,
        "default",
        "send_\u{202E}liame",
        "bidi-1",
        "{}",
        "ready",
        None,
    )
    .await;
    let router = Dashboard::new(queue.clone()).router();
    let page = get(&router, &format!("/jobs/{id}")).await.body;
    assert!(!page.contains('\u{202E}'), "{page}");
    assert!(page.contains("send_\u{FFFD}liame"), "{page}");
}

/// A job for the worker whose maintenance prunes the audit log; never enqueued.
#[jobqueue::job(name = "web_safety_noop", queue = "audit_prune")]
async fn noop(n: u64) {
    let _ = n;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn maintenance_prunes_audit_rows_past_the_longest_retention() {
    let queue = fresh_queue("web_safety_audit_prune").await;
    // The default retention keeps failed jobs 30 days, the longest: a row of 31 days goes,
    // one of 29 days stays.
    for (days, action) in [(31, "old"), (29, "recent")] {
        sqlx::query(
            "INSERT INTO job_queue_audit (at, actor, action, job_id) \
             VALUES (UTC_TIMESTAMP(6) - INTERVAL ? DAY, 'ada', ?, 1)",
        )
        .bind(days)
        .bind(action)
        .execute(queue.mysql_pool().unwrap())
        .await
        .unwrap();
    }
    let worker = tests::quick_worker(&queue)
        .queues(["audit_prune"])
        .build()
        .unwrap();
    let (handle, task) = tests::start(worker);
    tests::wait_for(
        "the old audit row to be pruned",
        // The first maintenance pass prunes; a loaded machine's margin.
        Duration::from_secs(60),
        || async {
            let left: Vec<String> =
                sqlx::query_scalar("SELECT CAST(action AS CHAR) FROM job_queue_audit ORDER BY id")
                    .fetch_all(queue.mysql_pool().unwrap())
                    .await
                    .unwrap();
            (left == ["recent"]).then_some(())
        },
    )
    .await;
    tests::stop(&handle, task).await;
}
