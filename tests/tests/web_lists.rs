//! The job list's daily workflows over HTTP: actions on ticked jobs (retry, cancel, delete,
//! run now) and on one job, the search box of every page, the queue and kind pickers, the
//! error-text filter, and the status tabs with their capped counts. The same in a real
//! browser is in `web_browser_lists.rs`.

mod web_support;

use axum::http::StatusCode;
use jobqueue::admin::{JobFilter, MAX_SELECTION};
use jobqueue::{Error, JobStatus, Queue};
use jobqueue_web::Dashboard;
use tests::{count, fresh_queue, fresh_queue_on, on_every_backend, row, Backend};
use web_support::{csrf_of, get, insert_job, post, post_with_cookie};

/// The notice a redirect carries, decoded.
fn notice(location: &str) -> String {
    let raw = location
        .split_once("notice=")
        .unwrap_or_else(|| panic!("a notice in {location}"))
        .1;
    // Up to the notice's signature.
    let raw = raw.split('&').next().unwrap_or_default();
    let bytes = raw.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            out.push(u8::from_str_radix(&raw[i + 1..i + 3], 16).unwrap());
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).unwrap()
}

/// The selection form's body: the token, the action, the ids, where to come back.
fn selection_form(token: &str, action: &str, ids: &[u64], back: &str) -> String {
    let mut form = format!("csrf={token}&action={action}&back={back}");
    for id in ids {
        form.push_str(&format!("&id={id}"));
    }
    form
}

async fn exists(queue: &Queue, id: u64) -> bool {
    queue.job(id).await.unwrap().is_some()
}

#[tokio::test]
async fn ticked_jobs_are_retried_run_cancelled_and_deleted_with_a_notice() {
    let queue = fresh_queue("web_lists_selection").await;
    let failed1 = insert_job(&queue, "mail", "send", "f1", "{}", "failed", Some("boom")).await;
    let failed2 = insert_job(&queue, "mail", "send", "f2", "{}", "failed", Some("boom")).await;
    let ready = insert_job(&queue, "mail", "send", "r1", "{}", "ready", None).await;
    let running = insert_job(&queue, "mail", "send", "run1", "{}", "running", None).await;
    let cancelled = insert_job(&queue, "mail", "send", "c1", "{}", "cancelled", None).await;
    let scheduled = insert_job(&queue, "mail", "send", "s1", "{}", "scheduled", None).await;
    sqlx::query("UPDATE job_queue SET run_at = UTC_TIMESTAMP(6) + INTERVAL 1 HOUR WHERE id = ?")
        .bind(scheduled)
        .execute(queue.mysql_pool().unwrap())
        .await
        .unwrap();
    let router = Dashboard::new(queue.clone()).router();

    // The list: a plain form around the table, one checkbox per job, the four buttons.
    let page = get(&router, "/jobs").await.body;
    assert!(
        page.contains("<form method=\"post\" action=\"/jobs/selection\""),
        "{page}"
    );
    for id in [failed1, failed2, ready, running, cancelled, scheduled] {
        assert!(
            page.contains(&format!(
                "<input type=\"checkbox\" name=\"id\" value=\"{id}\""
            )),
            "a checkbox for {id}: {page}"
        );
    }
    for action in ["retry", "run_now", "cancel", "delete"] {
        assert!(
            page.contains(&format!("name=\"action\" value=\"{action}\"")),
            "{action}"
        );
    }
    let token = csrf_of(&page);

    // Retry: the failed ones change, the ready one and an unknown id are named.
    let r = post(
        &router,
        "/jobs/selection",
        &selection_form(
            &token,
            "retry",
            &[failed1, failed2, ready, 999_999],
            "status%3Dfailed",
        ),
    )
    .await;
    assert_eq!(r.status, StatusCode::SEE_OTHER, "{}", r.body);
    let location = r.location.unwrap();
    assert!(
        location.starts_with("/jobs?status=failed&notice="),
        "{location}"
    );
    assert_eq!(
        notice(&location),
        "2 retried; 1 left alone (ready: only failed or cancelled jobs are retried); 1 no longer exists."
    );
    for id in [failed1, failed2, ready] {
        assert_eq!(row(&queue, id).await.status, JobStatus::Ready);
    }
    // The tabs count what the action changed at once.
    let page = get(&router, "/jobs").await.body;
    assert_eq!(tab_count(&page, "failed"), "0");
    assert_eq!(tab_count(&page, "ready"), "3");

    // Run now: the scheduled job becomes ready now, the ready one is left alone.
    let r = post(
        &router,
        "/jobs/selection",
        &selection_form(&token, "run_now", &[scheduled, ready], ""),
    )
    .await;
    assert_eq!(
        notice(&r.location.unwrap()),
        "1 made ready to run now; 1 left alone (ready: only scheduled jobs can be run now)."
    );
    let job = row(&queue, scheduled).await;
    assert_eq!(job.status, JobStatus::Ready);
    assert!(job.run_at <= queue.now().await.unwrap(), "{:?}", job.run_at);

    // Cancel: the ready job is cancelled, the running one is asked to stop.
    let r = post(
        &router,
        "/jobs/selection",
        &selection_form(&token, "cancel", &[ready, running, cancelled], ""),
    )
    .await;
    assert_eq!(
        notice(&r.location.unwrap()),
        "1 cancelled; 1 running: cancellation requested, it stops within a third of its lease; \
         1 left alone (cancelled: it had already ended)."
    );
    assert_eq!(row(&queue, ready).await.status, JobStatus::Cancelled);
    let run = row(&queue, running).await;
    assert_eq!(run.status, JobStatus::Running);
    assert!(run.cancel_requested);

    // Delete: finished and waiting jobs go, the running one stays.
    let r = post(
        &router,
        "/jobs/selection",
        &selection_form(&token, "delete", &[cancelled, scheduled, running], ""),
    )
    .await;
    assert_eq!(
        notice(&r.location.unwrap()),
        "2 deleted; 1 left alone (running: cancel it first, and delete it once it has stopped)."
    );
    assert!(!exists(&queue, cancelled).await);
    assert!(!exists(&queue, scheduled).await);
    assert!(exists(&queue, running).await);

    // Each change is on the audit, job by job, with who did it; what was left alone is not.
    let actions = |entries: Vec<jobqueue::admin::AuditEntry>| -> Vec<(String, String)> {
        entries
            .into_iter()
            .map(|e| (e.action, e.actor))
            .rev()
            .collect()
    };
    let audit = |id| {
        let queue = queue.clone();
        async move { actions(queue.audit_for_job(id, 10).await.unwrap()) }
    };
    let by = |a: &str| (a.to_owned(), "loopback".to_owned());
    assert_eq!(audit(failed1).await, [by("retry")]);
    assert_eq!(
        audit(ready).await,
        [by("cancel")],
        "left alone by the retry"
    );
    assert_eq!(audit(scheduled).await, [by("run-now"), by("delete")]);
    assert_eq!(audit(running).await, [by("cancel")]);

    // Nothing ticked: said so, nothing changed.
    let r = post(
        &router,
        "/jobs/selection",
        &selection_form(&token, "delete", &[], ""),
    )
    .await;
    assert!(notice(&r.location.unwrap()).starts_with("No job was selected"),);

    // The cap: one more than it is refused as a whole.
    let many: Vec<u64> = (1..=MAX_SELECTION as u64 + 1).collect();
    let r = post(
        &router,
        "/jobs/selection",
        &selection_form(&token, "delete", &many, ""),
    )
    .await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST);
    assert!(r.body.contains("at most 500 at a time"), "{}", r.body);
    assert!(
        exists(&queue, failed1).await,
        "nothing deleted past the cap"
    );
    let err = queue.delete_selected(&many).await.unwrap_err();
    assert!(
        matches!(err, Error::InvalidSetting { setting: "ids", .. }),
        "{err}"
    );
    // Repeats count once.
    let twice = vec![failed1; MAX_SELECTION + 1];
    let out = queue.retry_selected(&twice).await.unwrap();
    assert_eq!(out.skipped, [(failed1, JobStatus::Ready)]);

    // An unknown action, a bad id.
    let r = post(
        &router,
        "/jobs/selection",
        &selection_form(&token, "explode", &[failed1], ""),
    )
    .await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST);
    assert!(r.body.contains("unknown action"), "{}", r.body);
    let r = post(
        &router,
        "/jobs/selection",
        &format!("csrf={token}&action=delete&id=one"),
    )
    .await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST);

    // Without the page's token, or with another one, nothing happens.
    let before = count(
        queue.mysql_pool().unwrap(),
        "SELECT COUNT(*) FROM job_queue",
    )
    .await;
    for (form, cookie) in [
        (format!("action=delete&id={failed1}"), Some(token.as_str())),
        (
            format!("csrf=AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA&action=delete&id={failed1}"),
            Some(token.as_str()),
        ),
        (format!("csrf={token}&action=delete&id={failed1}"), None),
    ] {
        let r = post_with_cookie(&router, "/jobs/selection", &form, cookie).await;
        assert_eq!(r.status, StatusCode::FORBIDDEN, "{form}: {}", r.body);
    }
    assert_eq!(
        count(
            queue.mysql_pool().unwrap(),
            "SELECT COUNT(*) FROM job_queue"
        )
        .await,
        before
    );

    // Read-only: no checkbox, no form, and the action is refused.
    let ro = Dashboard::new(queue.clone()).read_only(true).router();
    let page = get(&ro, "/jobs").await.body;
    assert!(!page.contains("type=\"checkbox\""), "{page}");
    let r = post(
        &ro,
        "/jobs/selection",
        &selection_form(&token, "delete", &[failed1], ""),
    )
    .await;
    assert_eq!(r.status, StatusCode::FORBIDDEN);
    assert!(exists(&queue, failed1).await);
}

async fn delete_and_run_now_keep_to_the_statuses_they_may_change(backend: Backend) {
    let queue = fresh_queue_on(backend, "web_lists_single").await;
    let mut finished = Vec::new();
    for (i, status) in ["done", "failed", "cancelled", "ready", "scheduled"]
        .iter()
        .enumerate()
    {
        finished.push(insert_job(&queue, "q", "k", &format!("d{i}"), "{}", status, None).await);
    }
    for id in &finished {
        assert!(queue.delete(*id).await.unwrap(), "{id}");
        assert!(!exists(&queue, *id).await);
    }
    // A deleted job's key can be enqueued again.
    insert_job(&queue, "q", "k", "d0", "{}", "ready", None).await;

    // A running job is refused, and stays as it was.
    let running = insert_job(&queue, "q", "k", "run", "{}", "running", None).await;
    assert!(!queue.delete(running).await.unwrap());
    assert_eq!(row(&queue, running).await.status, JobStatus::Running);
    assert!(matches!(
        queue.delete(999_999).await,
        Err(Error::JobNotFound(_))
    ));

    // A blocked job goes with its waiting row.
    let blocked = insert_job(&queue, "q", "k", "blk", "{}", "blocked", None).await;
    tests::sql_exec(
        &queue,
        "INSERT INTO job_queue_blocked (slot_key, priority, job_id) VALUES ('c:key', 0, ?)",
        &[tests::Arg::Int(blocked as i64)],
    )
    .await;
    assert!(queue.delete(blocked).await.unwrap());
    assert_eq!(
        tests::sql_i64(&queue, "SELECT COUNT(*) FROM job_queue_blocked", &[]).await,
        0
    );

    // Run now: a retry waiting out its backoff runs now, with its attempts and error kept.
    let waiting = insert_job(&queue, "q", "k", "retrying", "{}", "scheduled", None).await;
    let later_sql = match backend {
        Backend::Postgres => {
            "UPDATE job_queue SET attempts = 1, last_error = 'timeout', \
             run_at = job_queue_now() + INTERVAL '10 minutes' WHERE id = ?"
        }
        _ => {
            "UPDATE job_queue SET attempts = 1, last_error = 'timeout', \
             run_at = UTC_TIMESTAMP(6) + INTERVAL 10 MINUTE WHERE id = ?"
        }
    };
    tests::sql_exec(&queue, later_sql, &[tests::Arg::Int(waiting as i64)]).await;
    assert!(queue.run_now(waiting).await.unwrap());
    let job = row(&queue, waiting).await;
    assert_eq!(job.status, JobStatus::Ready);
    assert_eq!(job.attempts, 1);
    assert_eq!(job.last_error.as_deref(), Some("timeout"));
    assert!(job.run_at <= queue.now().await.unwrap());
    // Only scheduled jobs: a second time changes nothing.
    assert!(!queue.run_now(waiting).await.unwrap());
    assert!(!queue.run_now(running).await.unwrap());
    assert!(matches!(
        queue.run_now(999_999).await,
        Err(Error::JobNotFound(_))
    ));

    // The job page: "Run now" on a scheduled job, "Delete" on any job that is not running.
    let later = insert_job(&queue, "q", "k", "later", "{}", "scheduled", None).await;
    let router = Dashboard::new(queue.clone()).router();
    let page = get(&router, &format!("/jobs/{later}")).await.body;
    assert!(
        page.contains(&format!("action=\"/jobs/{later}/run-now\"")),
        "{page}"
    );
    assert!(
        page.contains(&format!("action=\"/jobs/{later}/delete\"")),
        "{page}"
    );
    let page = get(&router, &format!("/jobs/{running}")).await.body;
    assert!(!page.contains("/delete\""), "{page}");
    assert!(!page.contains("/run-now\""), "{page}");
    let token = csrf_of(&page);
    let r = post(
        &router,
        &format!("/jobs/{later}/run-now"),
        &format!("csrf={token}"),
    )
    .await;
    assert_eq!(
        notice(&r.location.unwrap()),
        format!("Job {later} is ready to run now: 1 job changed.")
    );
    assert_eq!(row(&queue, later).await.status, JobStatus::Ready);
    let r = post(
        &router,
        &format!("/jobs/{later}/run-now"),
        &format!("csrf={token}"),
    )
    .await;
    assert_eq!(
        notice(&r.location.unwrap()),
        format!("Job {later} is ready, not scheduled: it was not changed (0 jobs changed).")
    );
    let r = post(
        &router,
        &format!("/jobs/{running}/delete"),
        &format!("csrf={token}"),
    )
    .await;
    assert_eq!(
        r.location.as_deref().unwrap().split('?').next(),
        Some(&*format!("/jobs/{running}"))
    );
    assert!(notice(&r.location.unwrap()).contains("is running and was not deleted"));
    assert!(exists(&queue, running).await);
    let r = post(
        &router,
        &format!("/jobs/{later}/delete"),
        &format!("csrf={token}"),
    )
    .await;
    assert!(r.location.as_deref().unwrap().starts_with("/jobs?notice="));
    assert!(!exists(&queue, later).await);
    let r = post(
        &router,
        &format!("/jobs/{later}/delete"),
        &format!("csrf={token}"),
    )
    .await;
    assert_eq!(r.status, StatusCode::NOT_FOUND);
    assert!(
        r.body.contains(&format!("there is no job with id {later}")),
        "{}",
        r.body
    );
    // The token is required here too.
    let r = post_with_cookie(
        &router,
        &format!("/jobs/{running}/delete"),
        "csrf=",
        Some(&token),
    )
    .await;
    assert_eq!(r.status, StatusCode::FORBIDDEN);
}

async fn the_search_box_finds_a_job_by_id_key_or_key_prefix(backend: Backend) {
    let queue = fresh_queue_on(backend, "web_lists_search").await;
    let order = insert_job(&queue, "shop", "ship", "order:42", "{}", "ready", None).await;
    let other = insert_job(&queue, "shop", "ship", "order:43", "{}", "ready", None).await;
    let numeric = insert_job(&queue, "shop", "ship", "77777777", "{}", "done", None).await;
    let under = insert_job(&queue, "shop", "ship", "order_1x", "{}", "done", None).await;
    let plain = insert_job(&queue, "shop", "ship", "orderZ1x", "{}", "done", None).await;
    let router = Dashboard::new(queue.clone()).router();

    // The box is in the header of every page. (The periodic page's ticks have no
    // PostgreSQL version yet.)
    let job_page = format!("/jobs/{order}");
    let mut paths = vec!["/", "/jobs", "/workers", "/periodic", job_page.as_str()];
    if backend == Backend::Postgres {
        paths.retain(|p| *p != "/periodic");
    }
    for path in paths {
        let page = get(&router, path).await.body;
        assert!(
            page.contains(
                "<form method=\"get\" action=\"/search\" class=\"search\" role=\"search\">"
            ) && page.contains("name=\"q\""),
            "{path}: {page}"
        );
    }
    let go = |q: &str| {
        let router = router.clone();
        let q = q.to_owned();
        async move { get(&router, &format!("/search?q={q}")).await }
    };
    let r = go(&order.to_string()).await;
    assert_eq!(r.status, StatusCode::SEE_OTHER);
    assert_eq!(r.location.unwrap(), format!("/jobs/{order}"));
    assert_eq!(
        go(&format!("%23{other}")).await.location.unwrap(),
        format!("/jobs/{other}")
    );
    assert_eq!(
        go("order%3A42").await.location.unwrap(),
        format!("/jobs/{order}")
    );
    assert_eq!(
        go("%20order%3A43%20").await.location.unwrap(),
        format!("/jobs/{other}")
    );
    // A number that is no id but a key.
    assert_eq!(
        go("77777777").await.location.unwrap(),
        format!("/jobs/{numeric}")
    );
    // No job of that key: the jobs whose key starts with it.
    let r = go("order%3A").await;
    assert_eq!(r.location.as_deref(), Some("/jobs?key=order%3A"));
    let list = get(&router, "/jobs?key=order%3A").await.body;
    for (id, shown) in [
        (order, true),
        (other, true),
        (under, false),
        (numeric, false),
    ] {
        assert_eq!(
            list.contains(&format!("href=\"/jobs/{id}\"")),
            shown,
            "{id}: {list}"
        );
    }
    // `_` and `%` are plain characters in a prefix.
    let list = get(&router, "/jobs?key=order_").await.body;
    assert!(list.contains(&format!("href=\"/jobs/{under}\"")), "{list}");
    assert!(!list.contains(&format!("href=\"/jobs/{plain}\"")), "{list}");
    assert!(get(&router, "/jobs?key=order%25")
        .await
        .body
        .contains("No job matches."));
    // An id of no job: a page that says so.
    let r = go("999999").await;
    assert_eq!(r.status, StatusCode::NOT_FOUND);
    assert!(
        r.body.contains("there is no job with id 999999"),
        "{}",
        r.body
    );
    // Nothing typed: the list.
    assert_eq!(go("").await.location.as_deref(), Some("/jobs"));
    // Mounted under a path, the box and its answers stay under it.
    let nested = axum::Router::new().nest("/ops", Dashboard::new(queue.clone()).router());
    let page = get(&nested, "/ops/jobs").await.body;
    assert!(page.contains("action=\"/ops/search\""), "{page}");
    let r = get(&nested, &format!("/ops/search?q={order}")).await;
    assert_eq!(r.location.unwrap(), format!("/ops/jobs/{order}"));
}

/// The options of the datalist `id` on `page`.
fn options(page: &str, id: &str) -> Vec<String> {
    let start = page
        .find(&format!("<datalist id=\"{id}\""))
        .unwrap_or_else(|| panic!("datalist {id}: {page}"));
    let rest = &page[start..];
    let rest = &rest[rest.find('>').unwrap() + 1..];
    let list = &rest[..rest.find("</datalist>").unwrap()];
    list.split("<option value=\"")
        .skip(1)
        .map(|o| o[..o.find('"').unwrap()].to_owned())
        .collect()
}

async fn the_pickers_list_queues_and_kinds(backend: Backend) {
    let queue = fresh_queue_on(backend, "web_lists_pickers").await;
    for (q, kind) in [
        ("mail", "send_welcome"),
        ("billing", "charge_card"),
        ("mail", "send_digest"),
        ("exports", "charge_card"),
        ("a&b", "k<1>"),
    ] {
        insert_job(&queue, q, kind, &format!("{q}:{kind}"), "{}", "done", None).await;
    }
    let router = Dashboard::new(queue.clone()).router();
    // The page reads no name: its lists say where the script finds them.
    let page = get(&router, "/jobs").await.body;
    assert!(
        page.contains("<input name=\"queue\" list=\"queue-names\""),
        "{page}"
    );
    assert!(
        page.contains("<input name=\"kind\" list=\"kind-names\""),
        "{page}"
    );
    assert!(
        page.contains(
            "<datalist id=\"queue-names\" data-src=\"/jobs/names\" data-field=\"queues\"></datalist>"
        ),
        "{page}"
    );
    assert!(options(&page, "kind-names").is_empty(), "{page}");
    // The names, as JSON.
    let r = get(&router, "/jobs/names").await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.body);
    assert_eq!(r.headers["content-type"], "application/json; charset=utf-8");
    let names: serde_json::Value = serde_json::from_str(&r.body).unwrap();
    assert_eq!(
        names,
        serde_json::json!({
            "queues": ["a&b", "billing", "exports", "mail"],
            "kinds": ["charge_card", "k<1>", "send_digest", "send_welcome"],
        })
    );
    // Once read, the page shows them itself (escaped), for as long as they are kept.
    let page = get(&router, "/jobs").await.body;
    assert_eq!(
        options(&page, "queue-names"),
        ["a&amp;b", "billing", "exports", "mail"]
    );
    assert_eq!(
        options(&page, "kind-names"),
        ["charge_card", "k&lt;1&gt;", "send_digest", "send_welcome"]
    );
    // Capped: the first names only.
    assert_eq!(queue.queue_names(2).await.unwrap(), ["a&b", "billing"]);
    assert_eq!(queue.kind_names(1).await.unwrap(), ["charge_card"]);
    // A picked queue filters the list; the page's own refresh shows no names.
    let page = get(&router, "/jobs?queue=billing").await.body;
    assert!(page.contains("value=\"billing\""));
    assert_eq!(
        page.matches("<tr><td class=\"check\">").count(),
        1,
        "{page}"
    );
    let refresh = web_support::send(
        &router,
        axum::http::Request::get("/jobs")
            .header("x-jobqueue-refresh", "1")
            .body(axum::body::Body::empty())
            .unwrap(),
    )
    .await
    .body;
    assert!(options(&refresh, "queue-names").is_empty(), "{refresh}");
}

#[tokio::test]
async fn the_pickers_names_need_the_login_the_pages_need() {
    use axum::body::Body;
    use axum::http::{header, Request};
    use jobqueue_web::Auth;
    let queue = fresh_queue("web_lists_pickers_auth").await;
    insert_job(&queue, "billing", "charge_card", "b:1", "{}", "done", None).await;
    let router = Dashboard::new(queue.clone())
        .auth(Auth::Token(web_support::TOKEN.into()))
        .router();
    for path in ["/jobs", "/jobs/names"] {
        let r = get(&router, path).await;
        assert_eq!(r.status, StatusCode::UNAUTHORIZED, "{path}: {}", r.body);
        assert!(!r.body.contains("billing"), "{path}: {}", r.body);
    }
    let r = web_support::send(
        &router,
        Request::get("/jobs/names")
            .header(
                header::AUTHORIZATION,
                format!("Bearer {}", web_support::TOKEN),
            )
            .body(Body::empty())
            .unwrap(),
    )
    .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.body);
    assert_eq!(r.body, r#"{"kinds":["charge_card"],"queues":["billing"]}"#);
}

/// The ids of the jobs listed on a page of the job list, in order.
fn listed_ids(body: &str) -> Vec<u64> {
    body.split("<td class=\"n\"><a href=\"/jobs/")
        .skip(1)
        .map(|rest| rest[..rest.find('"').unwrap()].parse().unwrap())
        .collect()
}

#[tokio::test]
async fn a_status_with_a_kind_or_a_queue_with_a_kind_lists_its_jobs_in_order() {
    let queue = fresh_queue("web_lists_kind_status").await;
    // Finished a minute apart, not in the order of their ids.
    let mut ids = std::collections::HashMap::new();
    for (key, q, kind, status, minutes_ago) in [
        ("a", "mail", "welcome", "failed", 5),
        ("b", "mail", "digest", "failed", 4),
        ("c", "billing", "welcome", "failed", 1),
        ("d", "mail", "welcome", "failed", 3),
        ("e", "mail", "welcome", "done", 2),
        ("f", "billing", "welcome", "ready", 0),
    ] {
        let id = insert_job(&queue, q, kind, key, "{}", status, None).await;
        sqlx::query(
            "UPDATE job_queue SET finished_at = UTC_TIMESTAMP(6) - INTERVAL ? MINUTE \
             WHERE id = ? AND finished_at IS NOT NULL",
        )
        .bind(minutes_ago)
        .bind(id)
        .execute(queue.mysql_pool().unwrap())
        .await
        .unwrap();
        ids.insert(key, id);
    }
    let router = Dashboard::new(queue.clone()).router();
    let keys = |body: &str| -> Vec<&str> {
        listed_ids(body)
            .into_iter()
            .map(|id| *ids.iter().find(|(_, v)| **v == id).unwrap().0)
            .collect()
    };
    for (query, want) in [
        // Newest finished first.
        ("status=failed&kind=welcome", vec!["c", "d", "a"]),
        ("status=failed&kind=digest", vec!["b"]),
        ("status=failed&kind=nothing", vec![]),
        ("status=done&kind=welcome", vec!["e"]),
        // Tested row by row within the window: the same answer.
        ("status=failed&kind=welcome&queue=mail", vec!["d", "a"]),
        // Newest first, by id.
        ("queue=mail&kind=welcome", vec!["e", "d", "a"]),
        ("queue=billing&kind=welcome", vec!["f", "c"]),
        ("queue=billing&kind=digest", vec![]),
    ] {
        let r = get(&router, &format!("/jobs?{query}")).await;
        assert_eq!(r.status, StatusCode::OK, "{query}: {}", r.body);
        assert_eq!(keys(&r.body), want, "{query}");
        assert!(
            !r.body.contains("class=\"empty searched\""),
            "{query}: {}",
            r.body
        );
    }
    // Pages of one job each follow the same order, and lead back.
    let filter = JobFilter::default()
        .status(JobStatus::Failed)
        .kind("welcome");
    let mut seen = Vec::new();
    let mut cursor = None;
    loop {
        let page = queue.list(&filter, cursor.as_ref(), 1).await.unwrap();
        assert_eq!(page.searched, None);
        seen.extend(page.jobs.iter().map(|j| j.id));
        match page.next {
            Some(next) => cursor = Some(next),
            None => break,
        }
    }
    assert_eq!(seen, [ids["c"], ids["d"], ids["a"]]);
    let after_two = queue.list(&filter, None, 2).await.unwrap().next.unwrap();
    let r = get(
        &router,
        &format!("/jobs?status=failed&kind=welcome&cursor={after_two}"),
    )
    .await;
    assert_eq!(keys(&r.body), ["a"]);
    assert!(r.body.contains("rel=\"prev\""), "{}", r.body);
}

#[tokio::test]
async fn a_time_with_a_status_bounds_the_time_in_that_status() {
    let queue = fresh_queue("web_lists_status_time").await;
    let mut ids = Vec::new();
    for (i, minutes_ago) in [90, 70, 50, 30, 10].into_iter().enumerate() {
        let id = insert_job(&queue, "q", "k", &format!("t:{i}"), "{}", "done", None).await;
        sqlx::query(
            "UPDATE job_queue SET finished_at = UTC_TIMESTAMP(6) - INTERVAL ? MINUTE, \
             created_at = UTC_TIMESTAMP(6) - INTERVAL 2 DAY WHERE id = ?",
        )
        .bind(minutes_ago)
        .bind(id)
        .execute(queue.mysql_pool().unwrap())
        .await
        .unwrap();
        ids.push(id);
    }
    // The server's time `minutes` ago, as the page's time fields write it.
    let at = |minutes: i64| {
        let pool = queue.mysql_pool().unwrap().clone();
        async move {
            sqlx::query_scalar::<_, String>(
                "SELECT DATE_FORMAT(UTC_TIMESTAMP() - INTERVAL ? MINUTE, '%Y-%m-%dT%H:%i')",
            )
            .bind(minutes)
            .fetch_one(&pool)
            .await
            .unwrap()
        }
    };
    let (from, to) = (at(80).await, at(20).await);
    let router = Dashboard::new(queue.clone()).router();
    let r = get(&router, &format!("/jobs?status=done&from={from}&to={to}")).await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.body);
    assert_eq!(listed_ids(&r.body), [ids[3], ids[2], ids[1]]);
    assert!(r.body.contains("Finished from"), "{}", r.body);
    // Without a status, the same fields bound when the jobs were enqueued: two days ago.
    let r = get(&router, &format!("/jobs?from={from}&to={to}")).await;
    assert_eq!(listed_ids(&r.body), Vec::<u64>::new());
    assert!(r.body.contains("Enqueued from"), "{}", r.body);
    let two_days = at(2 * 24 * 60 + 60).await;
    let r = get(&router, &format!("/jobs?from={two_days}&to={to}")).await;
    assert_eq!(
        listed_ids(&r.body),
        [ids[4], ids[3], ids[2], ids[1], ids[0]]
    );
    // The API's filter is the same.
    let now = queue.now().await.unwrap();
    let page = queue
        .list(
            &JobFilter::default()
                .status(JobStatus::Done)
                .status_time(Some(now - chrono::Duration::minutes(60)), None),
            None,
            10,
        )
        .await
        .unwrap();
    let listed: Vec<u64> = page.jobs.iter().map(|j| j.id).collect();
    assert_eq!(listed, [ids[4], ids[3], ids[2]]);
}

#[tokio::test]
async fn a_filter_no_index_serves_searches_a_window_and_goes_on_from_its_end() {
    use jobqueue::admin::{LIST_SCAN_INDEXED_ROWS, LIST_SCAN_ROWS};
    let queue = fresh_queue("web_lists_window").await;
    // The one match is older than 1,200 jobs that do not match.
    let old = insert_job(&queue, "q", "k", "tenant:acme", "{}", "failed", None).await;
    sqlx::query("UPDATE job_queue SET metadata = '{\"tenant\": \"acme\"}' WHERE id = ?")
        .bind(old)
        .execute(queue.mysql_pool().unwrap())
        .await
        .unwrap();
    sqlx::query(
        "INSERT INTO job_queue (queue, kind, task_key, payload, status, attempts, metadata, finished_at) \
         SELECT 'q', 'k', CONCAT('other:', seq), '{}', 'failed', 1, '{\"tenant\": \"other\"}', \
           UTC_TIMESTAMP(6) + INTERVAL seq MICROSECOND \
         FROM seq_1_to_1200",
    )
    .execute(queue.mysql_pool().unwrap())
    .await
    .unwrap();
    for (filter, scan) in [
        // In id order.
        (JobFilter::default().meta("tenant", "acme"), LIST_SCAN_ROWS),
        // Through the status's index.
        (
            JobFilter::default()
                .status(JobStatus::Failed)
                .meta("tenant", "acme"),
            LIST_SCAN_INDEXED_ROWS,
        ),
    ] {
        // Each page tests a window of the range, finds nothing there, and says so; the
        // next goes on from the window's end, until what is left is less than a window
        // and holds the match.
        let mut cursor = None;
        let mut windows = 0;
        let found = loop {
            let page = queue.list(&filter, cursor.as_ref(), 50).await.unwrap();
            if !page.jobs.is_empty() {
                assert_eq!(page.searched, None, "{filter:?}");
                assert!(page.next.is_none(), "{filter:?}");
                break page.jobs.iter().map(|j| j.id).collect::<Vec<_>>();
            }
            assert_eq!(page.searched, Some(scan), "{filter:?}");
            windows += 1;
            cursor = Some(page.next.expect("a window goes on"));
        };
        assert_eq!(found, [old], "{filter:?}");
        assert_eq!(windows, 1200 / scan, "{filter:?}");
        // A filter that matches many fills its page as before.
        let many = filter.clone().meta("tenant", "other");
        let page = queue.list(&many, None, 50).await.unwrap();
        assert_eq!(page.jobs.len(), 50);
        assert_eq!(page.searched, None);
    }
    // The page says what it searched, and links to the search's next step.
    let router = Dashboard::new(queue.clone()).router();
    let r = get(&router, "/jobs?meta=tenant%3Dacme").await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.body);
    assert!(
        r.body
            .contains("No job matches among the next 1,000 jobs of this list"),
        "{}",
        r.body
    );
    let next = pager_link(&r.body, "next").expect("a link to search on");
    assert!(r.body.contains("Search older »"), "{}", r.body);
    let r = get(&router, &next).await;
    assert_eq!(listed_ids(&r.body), [old], "{}", r.body);
    assert!(!r.body.contains("among the next"), "{}", r.body);
}

async fn the_error_filter_finds_text_with_wildcards_as_plain_characters(backend: Backend) {
    let queue = fresh_queue_on(backend, "web_lists_error").await;
    let mut ids = std::collections::HashMap::new();
    for (key, q, status, error) in [
        ("pct", "disk", "failed", "disk 100% full"),
        ("nopct", "disk", "failed", "disk 100 full"),
        ("under", "api", "failed", "rate_limit hit"),
        ("nounder", "api", "failed", "rateXlimit hit"),
        ("timeout", "api", "failed", "Timeout after 30s"),
        (
            "timeout-done",
            "api",
            "done",
            "timeout after 30s, then it worked",
        ),
        ("bang", "api", "failed", "a!b and a\\b"),
        ("none", "api", "failed", ""),
    ] {
        let error = (!error.is_empty()).then_some(error);
        ids.insert(
            key,
            insert_job(&queue, q, "k", key, "{}", status, error).await,
        );
    }
    let router = Dashboard::new(queue.clone()).router();
    let shown = |query: &str| {
        let router = router.clone();
        let query = query.to_owned();
        let ids = ids.clone();
        async move {
            let r = get(&router, &format!("/jobs?{query}")).await;
            assert_eq!(r.status, StatusCode::OK, "{query}: {}", r.body);
            let mut keys: Vec<&str> = ids
                .iter()
                .filter(|(_, id)| r.body.contains(&format!("href=\"/jobs/{id}\"")))
                .map(|(k, _)| *k)
                .collect();
            keys.sort();
            keys
        }
    };
    assert_eq!(shown("error=100%25").await, ["pct"]);
    assert_eq!(shown("error=rate_limit").await, ["under"]);
    assert_eq!(shown("error=a!b").await, ["bang"]);
    assert_eq!(shown("error=a%5Cb").await, ["bang"]);
    // Case does not matter; other filters narrow it.
    assert_eq!(shown("error=TIMEOUT").await, ["timeout", "timeout-done"]);
    assert_eq!(shown("error=timeout&status=failed").await, ["timeout"]);
    assert_eq!(
        shown("error=timeout&status=done&queue=api").await,
        ["timeout-done"]
    );
    assert_eq!(shown("error=full&queue=api").await, Vec::<&str>::new());
    // The API's filter is the same.
    let page = queue
        .list(&JobFilter::default().error_contains("100%"), None, 10)
        .await
        .unwrap();
    assert_eq!(page.jobs.len(), 1);
    // The filter stays in the form, the tabs' and the pager's links.
    let page = get(&router, "/jobs?error=rate_limit").await.body;
    assert!(
        page.contains("name=\"error\" value=\"rate_limit\""),
        "{page}"
    );
    assert!(
        page.contains("href=\"/jobs?error=rate_limit&amp;status=failed\""),
        "{page}"
    );
    // A very long text is refused: each row's test costs its length.
    let long = "x".repeat(201);
    let r = get(&router, &format!("/jobs?error={long}")).await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST);
    assert!(r.body.contains("at most 200"), "{}", r.body);
}

async fn an_error_filter_that_reads_too_long_is_stopped_with_a_message(backend: Backend) {
    let queue = fresh_queue_on(backend, "web_lists_error_slow").await;
    // Rows whose errors make a substring test slow: each costs about the error's length
    // times the text's (measured: 0.09 s per row on a loaded 2-core machine), so the 100
    // rows would take several seconds; the list stops after one.
    // On PostgreSQL a row's test is cheaper: a thousand rows.
    let seed = match backend {
        Backend::Postgres => {
            "INSERT INTO job_queue (queue, kind, task_key, payload, status, attempts, last_error, finished_at) \
             SELECT 'q', 'k', 'slow:' || seq, '{}', 'failed', 1, repeat('a', 60000), job_queue_now() \
             FROM generate_series(1, 1000) AS seq"
        }
        _ => {
            "INSERT INTO job_queue (queue, kind, task_key, payload, status, attempts, last_error, finished_at) \
             SELECT 'q', 'k', CONCAT('slow:', seq), '{}', 'failed', 1, REPEAT('a', 60000), UTC_TIMESTAMP(6) \
             FROM seq_1_to_100"
        }
    };
    tests::sql_exec(&queue, seed, &[]).await;
    let router = Dashboard::new(queue.clone()).router();
    let text = format!("{}b", "a".repeat(199));
    let started = std::time::Instant::now();
    let r = get(&router, &format!("/jobs?error={text}")).await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.body);
    assert!(
        r.body
            .contains("is not served by an index, and the server stopped reading after 1s"),
        "{}",
        r.body
    );
    // The form stays, to narrow the filter.
    assert!(r.body.contains(&format!("name=\"error\" value=\"{text}\"")));
    // Generous: the limit is one second; a loaded machine adds the rest of the page.
    assert!(started.elapsed() < std::time::Duration::from_secs(10));
}

/// The count shown on the tab of `status`.
fn tab_count(page: &str, status: &str) -> String {
    let start = page
        .find(&format!("class=\"tab {status}"))
        .unwrap_or_else(|| panic!("a tab for {status}: {page}"));
    let rest = &page[start..];
    let rest = &rest[rest.find("<span class=\"count").unwrap()..];
    let rest = &rest[rest.find('>').unwrap() + 1..];
    rest[..rest.find('<').unwrap()].to_owned()
}

#[tokio::test]
async fn the_status_tabs_count_capped_and_by_queue() {
    let queue = fresh_queue("web_lists_tabs").await;
    // More finished jobs than the cap, in batches of a thousand rows per statement.
    for batch in 0..2 {
        sqlx::query(
            "INSERT INTO job_queue (queue, kind, task_key, payload, status, attempts, finished_at) \
             SELECT 'big', 'k', CONCAT('done:', ?, ':', seq), '{}', 'done', 1, UTC_TIMESTAMP(6) \
             FROM seq_1_to_1000",
        )
        .bind(batch)
        .execute(queue.mysql_pool().unwrap())
        .await
        .unwrap();
    }
    for (i, status) in [
        "failed",
        "failed",
        "ready",
        "ready",
        "ready",
        "ready",
        "scheduled",
        "done",
        "done",
        "cancelled",
    ]
    .iter()
    .enumerate()
    {
        insert_job(
            &queue,
            "small",
            "k",
            &format!("small:{i}"),
            "{}",
            status,
            None,
        )
        .await;
    }
    let router = Dashboard::new(queue.clone()).router();
    let page = get(&router, "/jobs").await.body;
    for (status, n) in [
        ("done", "1,000+"),
        ("failed", "2"),
        ("ready", "4"),
        ("scheduled", "1"),
        ("cancelled", "1"),
        ("running", "0"),
        ("blocked", "0"),
    ] {
        assert_eq!(tab_count(&page, status), n, "{status}");
    }
    assert!(page.contains("counts of every queue"), "{page}");
    // Relative times, with the UTC time as their title.
    assert!(
        page.contains(" UTC\">just now</time>") || page.contains(" s ago</time>"),
        "{page}"
    );
    // In one queue: that queue's counts; the tab of the filter's status is marked.
    let page = get(&router, "/jobs?queue=small&status=failed").await.body;
    for (status, n) in [
        ("done", "2"),
        ("failed", "2"),
        ("ready", "4"),
        ("cancelled", "1"),
    ] {
        assert_eq!(tab_count(&page, status), n, "{status}");
    }
    assert!(page.contains("class=\"tab failed active\""), "{page}");
    assert!(
        page.contains("href=\"/jobs?queue=small&amp;status=ready\""),
        "{page}"
    );
    assert!(page.contains("counts of queue small"), "{page}");
    let counts = queue.list_counts(Some("big")).await.unwrap();
    assert_eq!(counts.capped, [JobStatus::Done]);
    assert_eq!(counts.counts.done, jobqueue::admin::LIST_COUNT_CAP);
    // Other filters do not change the counts, and the page says so.
    let page = get(&router, "/jobs?queue=small&kind=other").await.body;
    assert!(
        page.contains("counts of queue small, before the other filters"),
        "{page}"
    );
}

#[tokio::test]
async fn the_new_statements_are_served_by_their_indexes() {
    use jobqueue_runtime::__store::statements::{
        previous_statement, Arg, CAPPED_QUEUE_STATUS_COUNT, CAPPED_STATUS_COUNT, NEXT_KIND_NAME,
        NEXT_QUEUE_NAME, RUN_NOW_UPDATE,
    };
    let queue = fresh_queue("web_lists_plans").await;
    // Rows of every status, so that the plans are those of a table in use.
    sqlx::query(
        "INSERT INTO job_queue (queue, kind, task_key, payload, status, finished_at) \
         SELECT CONCAT('q', seq % 7), CONCAT('k', seq % 5), CONCAT('plan:', seq), '{}', \
           ELT(1 + seq % 4, 'scheduled', 'ready', 'done', 'failed'), \
           IF(seq % 4 >= 2, UTC_TIMESTAMP(6), NULL) \
         FROM seq_1_to_2000",
    )
    .execute(queue.mysql_pool().unwrap())
    .await
    .unwrap();
    sqlx::query("ANALYZE TABLE job_queue")
        .execute(queue.mysql_pool().unwrap())
        .await
        .unwrap();
    let store = queue.store();
    for (sql, args, key) in [
        (
            NEXT_QUEUE_NAME,
            vec![Arg::Text("a".into())],
            "job_queue_list_queue",
        ),
        (
            NEXT_KIND_NAME,
            vec![Arg::Text("a".into())],
            "job_queue_list_kind",
        ),
        (
            CAPPED_STATUS_COUNT,
            vec![Arg::Text("done".into()), Arg::Int(10_001)],
            "job_queue_status_at",
        ),
        (
            CAPPED_QUEUE_STATUS_COUNT,
            vec![
                Arg::Text("q".into()),
                Arg::Text("done".into()),
                Arg::Int(10_001),
            ],
            "job_queue_queue_status_at",
        ),
        (RUN_NOW_UPDATE, vec![Arg::Int(1)], "PRIMARY"),
    ] {
        let plan = store.explain(sql, &args).await.unwrap();
        let job_rows: Vec<_> = plan.iter().filter(|p| p.0 == "job_queue").collect();
        assert!(!job_rows.is_empty(), "{sql}: {plan:?}");
        for p in job_rows {
            assert_eq!(p.2.as_deref(), Some(key), "{sql}: {plan:?}");
            assert!(!p.4.contains("filesort"), "{sql}: {plan:?}");
        }
    }
    // The "Newer" page's backwards read goes through the index of the page it leads to.
    for (filter, cursor, key) in [
        (JobFilter::default(), "1500", "PRIMARY"),
        (
            JobFilter::default().queue("q1"),
            "1500",
            "job_queue_list_queue",
        ),
        (
            JobFilter::default().kind("k1"),
            "1500",
            "job_queue_list_kind",
        ),
        (
            JobFilter::default().status(JobStatus::Done),
            "done.1764662400123456.1500",
            "job_queue_status_at",
        ),
        (
            JobFilter::default().status(JobStatus::Ready).queue("q1"),
            "ready.1764662400123456.1500",
            "job_queue_queue_status_at",
        ),
    ] {
        let (sql, args) = previous_statement(&filter, &cursor.parse().unwrap(), 50);
        let plan = store.explain(&sql, &args).await.unwrap();
        assert_eq!(plan[0].2.as_deref(), Some(key), "{sql}: {plan:?}");
        assert!(!plan[0].4.contains("filesort"), "{sql}: {plan:?}");
    }
}

/// The ids of the jobs a list page shows, in its order.
fn page_ids(body: &str) -> Vec<u64> {
    body.split("<td class=\"n\"><a href=\"/jobs/")
        .skip(1)
        .map(|s| s[..s.find('"').unwrap()].parse().unwrap())
        .collect()
}

/// The pager's link `rel` ("next", "prev"), as a path.
fn pager_link(body: &str, rel: &str) -> Option<String> {
    let at = body.find(&format!("\" rel=\"{rel}\""))?;
    let head = &body[..at];
    Some(head[head.rfind("href=\"")? + 6..].replace("&amp;", "&"))
}

async fn newer_pages_lead_back_through_the_pages_older_ones_led_to(backend: Backend) {
    let queue = fresh_queue_on(backend, "web_lists_newer").await;
    for i in 0..230u32 {
        let (q, status) = match i % 3 {
            0 => ("alpha", "done"),
            1 => ("beta", "ready"),
            _ => ("alpha", "ready"),
        };
        insert_job(&queue, q, "k", &format!("newer:{i}"), "{}", status, None).await;
    }
    // Ties: ready jobs sharing one due time are ordered by id.
    tests::sql_exec(
        &queue,
        "UPDATE job_queue SET run_at = '2026-01-01 00:00:00' WHERE status = 'ready' AND id % 4 = 0",
        &[],
    )
    .await;
    let router = Dashboard::new(queue.clone()).router();
    for start in [
        "/jobs",
        "/jobs?status=done",
        "/jobs?status=ready",
        "/jobs?queue=alpha&status=ready",
        "/jobs?queue=alpha",
    ] {
        // Forwards with "Older"/"Later", then back with "Newer"/"Earlier": the same pages.
        let mut pages = Vec::new();
        let mut path = start.to_owned();
        loop {
            let body = get(&router, &path).await.body;
            pages.push(page_ids(&body));
            match pager_link(&body, "next") {
                Some(next) => path = next,
                None => break,
            }
        }
        assert!(
            pages.len() >= 2 || start.contains("status=done"),
            "{start}: {pages:?}"
        );
        let first = get(&router, start).await.body;
        assert_eq!(
            pager_link(&first, "prev"),
            None,
            "no newer page before the first"
        );
        let mut back = vec![pages.last().unwrap().clone()];
        loop {
            let body = get(&router, &path).await.body;
            match pager_link(&body, "prev") {
                Some(prev) => {
                    path = prev;
                    back.push(page_ids(&get(&router, &path).await.body));
                }
                None => break,
            }
        }
        back.reverse();
        assert_eq!(back, pages, "{start}");
        // The last step back lands on the first page itself, without a cursor.
        assert_eq!(path.split("cursor=").count(), 1, "{start}: {path}");
    }
}

/// The count an action starts is bounded: none when the gauges last counted more jobs than
/// a quick count reads (the workers' next count shows the change then).
#[tokio::test]
async fn the_recount_after_an_action_is_bounded() {
    let queue = fresh_queue("web_lists_recount").await;
    insert_job(&queue, "mail", "send", "f1", "{}", "failed", Some("boom")).await;
    assert!(queue.recount_gauges().await.unwrap(), "a small count runs");
    let failed: i64 = sqlx::query_scalar(
        "SELECT CAST(jobs AS SIGNED) FROM job_queue_gauges WHERE queue = 'mail' AND status = 'failed'",
    )
    .fetch_one(queue.mysql_pool().unwrap())
    .await
    .unwrap();
    assert_eq!(failed, 1);

    // The gauges last counted more than a quick count reads: left to the workers.
    sqlx::query("INSERT INTO job_queue_gauges (queue, status, jobs) VALUES ('huge', 'failed', ?)")
        .bind(jobqueue::admin::RECOUNT_MAX_JOBS + 1)
        .execute(queue.mysql_pool().unwrap())
        .await
        .unwrap();
    assert!(!queue.recount_gauges().await.unwrap());
    let huge: i64 =
        sqlx::query_scalar("SELECT COUNT(*) FROM job_queue_gauges WHERE queue = 'huge'")
            .fetch_one(queue.mysql_pool().unwrap())
            .await
            .unwrap();
    assert_eq!(huge, 1, "no count replaced the gauges");
}

/// The row of queue `name` on the overview.
fn overview_row<'a>(page: &'a str, name: &str) -> &'a str {
    let start = page
        .find(&format!(
            "<tr><th><a href=\"/queues/{name}\">{name}</a></th>"
        ))
        .unwrap_or_else(|| panic!("a row for queue {name}: {page}"));
    let rest = &page[start..];
    &rest[..rest.find("</tr>").unwrap()]
}

/// The dashboard's overview and job list show a queue's jobs of several statuses, with
/// their counts, on every backend: the rows of each listing, the finished jobs' counts, the
/// pause, and one job's page.
async fn the_overview_and_the_job_list_show_jobs_of_every_status(backend: Backend) {
    let queue = fresh_queue_on(backend, "web_lists_backends").await;
    let mut ids: Vec<(u64, &str, &str)> = Vec::new();
    for (i, (q, status)) in [
        ("mail", "failed"),
        ("mail", "failed"),
        ("mail", "ready"),
        ("mail", "scheduled"),
        ("mail", "done"),
        ("mail", "done"),
        ("mail", "done"),
        ("mail", "cancelled"),
        ("billing", "done"),
    ]
    .into_iter()
    .enumerate()
    {
        let error = (status == "failed").then_some("boom <b>");
        let id = insert_job(
            &queue,
            q,
            "send",
            &format!("k:{i}"),
            "{\"n\": 1}",
            status,
            error,
        )
        .await;
        ids.push((id, q, status));
    }
    queue.pause("billing").await.unwrap();
    let router = Dashboard::new(queue.clone()).router();

    let overview = get(&router, "/").await;
    assert_eq!(overview.status, StatusCode::OK, "{}", overview.body);
    let mail = overview_row(&overview.body, "mail");
    assert!(mail.contains("badge active"), "{mail}");
    assert!(
        mail.contains("<a href=\"/jobs?queue=mail&amp;status=done\">3</a>"),
        "{mail}"
    );
    assert!(
        mail.contains("<a href=\"/jobs?queue=mail&amp;status=cancelled\">1</a>"),
        "{mail}"
    );
    // The jobs that ended in the last hour, per queue: 3 done, 2 failed.
    assert!(
        mail.contains("<td class=\"n\">3</td><td class=\"n\">2</td>"),
        "{mail}"
    );
    if backend == Backend::MySql {
        // The counts the queue gauges keep (counted by the page when no worker did).
        assert!(
            mail.contains("<a href=\"/jobs?queue=mail&amp;status=failed\">2</a>"),
            "{mail}"
        );
    }
    let billing = overview_row(&overview.body, "billing");
    assert!(billing.contains("badge paused"), "{billing}");
    assert!(
        billing.contains("action=\"/queues/billing/resume\""),
        "{billing}"
    );
    assert!(
        billing.contains("<a href=\"/jobs?queue=billing&amp;status=done\">1</a>"),
        "{billing}"
    );

    // Every job, newest first, and the finished jobs' tabs.
    let page = get(&router, "/jobs").await;
    assert_eq!(page.status, StatusCode::OK, "{}", page.body);
    let shown: Vec<usize> = ids
        .iter()
        .map(|(id, ..)| {
            page.body
                .find(&format!("<a href=\"/jobs/{id}\">{id}</a>"))
                .unwrap_or_else(|| panic!("a row for job {id}: {}", page.body))
        })
        .collect();
    assert!(
        shown.windows(2).all(|w| w[0] > w[1]),
        "newest first: {shown:?}"
    );
    assert_eq!(tab_count(&page.body, "done"), "4");
    assert_eq!(tab_count(&page.body, "cancelled"), "1");
    // The error, escaped.
    assert!(page.body.contains("boom &lt;b&gt;"), "{}", page.body);

    // A status, and a status in one queue: exactly their jobs.
    for (path, queue_name, status) in [
        ("/jobs?status=failed", None, "failed"),
        ("/jobs?status=done", None, "done"),
        ("/jobs?queue=mail&status=done", Some("mail"), "done"),
        ("/jobs?queue=billing&status=done", Some("billing"), "done"),
        ("/jobs?status=cancelled", None, "cancelled"),
    ] {
        let page = get(&router, path).await;
        assert_eq!(page.status, StatusCode::OK, "{path}: {}", page.body);
        for (id, q, s) in &ids {
            let expected = *s == status && queue_name.is_none_or(|n| n == *q);
            assert_eq!(
                page.body
                    .contains(&format!("<a href=\"/jobs/{id}\">{id}</a>")),
                expected,
                "{path}: job {id} ({q}, {s}): {}",
                page.body
            );
        }
    }

    // One job's page.
    let (failed, ..) = ids[0];
    let page = get(&router, &format!("/jobs/{failed}")).await;
    assert_eq!(page.status, StatusCode::OK, "{}", page.body);
    assert!(page.body.contains("boom &lt;b&gt;"), "{}", page.body);
}

on_every_backend!(
    the_overview_and_the_job_list_show_jobs_of_every_status,
    the_search_box_finds_a_job_by_id_key_or_key_prefix,
    the_pickers_list_queues_and_kinds,
    the_error_filter_finds_text_with_wildcards_as_plain_characters,
    an_error_filter_that_reads_too_long_is_stopped_with_a_message,
    newer_pages_lead_back_through_the_pages_older_ones_led_to,
    delete_and_run_now_keep_to_the_statuses_they_may_change,
);
