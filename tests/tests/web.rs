//! The dashboard (`jobqueue-web`) over HTTP: what each page shows, what each action changes,
//! and its security settings. The browser tests are in `web_browser.rs`; the plans of its
//! queries on a large table in `mysql_query_plans.rs`.

mod web_support;

use std::time::Duration;

use axum::body::Body;
use axum::http::{header, Request, StatusCode};
use base64::Engine;
use jobqueue::admin::JobFilter;
use jobqueue::{job, JobError, JobStatus, Queue};
use jobqueue_web::{Auth, Dashboard};
use tests::{fresh_queue, quick_worker, row, start, stop, wait_for};
use web_support::{csrf_of, get, insert_job, post, post_with_cookie, send};

/// A seeded job: id, queue, kind, status, key.
type Seeded = (u64, &'static str, &'static str, &'static str, String);

const HOSTILE: &str = "<script>alert(1)</script>\"><img src=x onerror=alert(2)>";

#[tokio::test]
async fn the_job_page_shows_progress_and_metadata_escaped() {
    let queue = fresh_queue("web_progress").await;
    let id = insert_job(&queue, "default", "kind", "key:1", "{}", "running", None).await;
    sqlx::query(
        "UPDATE job_queue SET metadata = ?, progress = ?, progress_at = UTC_TIMESTAMP(6) WHERE id = ?",
    )
    .bind(serde_json::json!({ "tenant": HOSTILE }).to_string())
    .bind(serde_json::json!({ "rows": 5, "note": HOSTILE }).to_string())
    .bind(id)
    .execute(queue.mysql_pool().unwrap())
    .await
    .expect("set metadata and progress");
    let router = Dashboard::new(queue.clone()).router();
    let page = get(&router, &format!("/jobs/{id}")).await.body;
    assert!(page.contains("<dt>Progress</dt>"), "{page}");
    assert!(page.contains("&quot;rows&quot;:5"), "{page}");
    assert!(page.contains("<h2>Metadata</h2>"), "{page}");
    assert!(page.contains("&quot;tenant&quot;"), "{page}");
    assert!(!page.contains("<script>"), "{page}");
}

#[tokio::test]
async fn the_job_list_filters_on_metadata() {
    let queue = fresh_queue("web_meta").await;
    let acme = insert_job(&queue, "default", "kind", "key:acme", "{}", "ready", None).await;
    let globex = insert_job(&queue, "default", "kind", "key:globex", "{}", "ready", None).await;
    for (id, tenant) in [(acme, "acme"), (globex, "globex")] {
        sqlx::query("UPDATE job_queue SET metadata = ? WHERE id = ?")
            .bind(serde_json::json!({ "tenant": tenant }).to_string())
            .bind(id)
            .execute(queue.mysql_pool().unwrap())
            .await
            .expect("set metadata");
    }
    let query = JobFilter::default().meta("tenant", "acme");
    let page = queue.list(&query, None, 50).await.expect("page");
    assert_eq!(page.jobs.iter().map(|j| j.id).collect::<Vec<_>>(), [acme]);
    assert_eq!(queue.count(&query).await.expect("count"), 1);

    let router = Dashboard::new(queue.clone()).router();
    let list = get(&router, "/jobs?meta=tenant%3Dacme").await.body;
    assert!(list.contains(&format!("href=\"/jobs/{acme}\"")), "{list}");
    assert!(
        !list.contains(&format!("href=\"/jobs/{globex}\"")),
        "{list}"
    );
    let bad = get(&router, "/jobs?meta=tenant").await;
    assert_eq!(bad.status, StatusCode::BAD_REQUEST);
    assert!(bad.body.contains("is not key=value"), "{}", bad.body);
}

#[tokio::test]
async fn every_value_from_the_database_is_escaped() {
    let queue = fresh_queue("web_escape").await;
    let payload = serde_json::json!({ "note": HOSTILE }).to_string();
    let id = insert_job(
        &queue,
        "q<b>x",
        &format!("kind{HOSTILE}"),
        &format!("key{HOSTILE}"),
        &payload,
        "failed",
        Some(HOSTILE),
    )
    .await;
    let router = Dashboard::new(queue.clone()).router();
    for path in [
        "/".to_owned(),
        "/live".into(),
        "/jobs".into(),
        format!("/jobs/{id}"),
        "/jobs?status=failed".into(),
    ] {
        let r = get(&router, &path).await;
        assert_eq!(r.status, StatusCode::OK, "{path}: {}", r.body);
        assert!(
            !r.body.contains("<script>alert"),
            "{path} shows a live script tag: {}",
            r.body
        );
        assert!(
            !r.body.contains("<img"),
            "{path} shows a live img tag: {}",
            r.body
        );
        assert!(
            !r.body.contains("<b>"),
            "{path} shows the queue's tag: {}",
            r.body
        );
    }
    let page = get(&router, &format!("/jobs/{id}")).await.body;
    // The payload, the key, the kind and the error are each there, as text.
    assert!(
        page.matches(
            "&lt;script&gt;alert(1)&lt;/script&gt;&quot;&gt;&lt;img src=x onerror=alert(2)&gt;"
        )
        .count()
            >= 3,
        "{page}"
    );
    assert!(
        page.contains(
            "&lt;script&gt;alert(1)&lt;/script&gt;\\&quot;&gt;&lt;img src=x onerror=alert(2)&gt;"
        ),
        "the payload: {page}"
    );
    assert!(page.contains("q&lt;b&gt;x"), "{page}");
}

/// The job page lists the job's attempts, newest first, with their workers, outcomes and
/// (escaped) errors, and its output.
#[tokio::test]
async fn the_job_page_lists_the_attempts_and_the_output() {
    use jobqueue_runtime::__store::Finish;
    let queue = fresh_queue("web_attempts").await;
    let id = insert_job(
        &queue,
        "default",
        "web_export",
        "web:1",
        "{}",
        "ready",
        None,
    )
    .await;
    let store = queue.store();
    let router = Dashboard::new(queue.clone()).router();
    let page = get(&router, &format!("/jobs/{id}")).await.body;
    assert!(page.contains("No attempt has ended yet."), "{page}");

    assert_eq!(
        store.claim("default", "worker-a", 1).await.unwrap().len(),
        1
    );
    let retry = Finish::Retry {
        delay: Duration::ZERO,
        error: format!("smtp {HOSTILE}"),
    };
    store.finish("worker-a", id, 1, &retry).await.unwrap();
    sqlx::query("UPDATE job_queue SET status = 'ready' WHERE id = ?")
        .bind(id)
        .execute(queue.mysql_pool().unwrap())
        .await
        .unwrap();
    assert_eq!(
        store.claim("default", "worker-b", 1).await.unwrap().len(),
        1
    );
    assert!(store
        .complete_with_output("worker-b", id, 2, r#"{"rows":3}"#)
        .await
        .unwrap());

    let page = get(&router, &format!("/jobs/{id}")).await.body;
    assert!(!page.contains("not kept"), "{page}");
    let table = &page[page
        .find("<table class=\"attempts\">")
        .expect("attempts table")..];
    let table = &table[..table.find("</table>").unwrap()];
    let rows: Vec<&str> = table.split("<tr>").skip(2).collect();
    assert_eq!(rows.len(), 2, "{table}");
    assert!(
        rows[0].starts_with("<td class=\"n\">2</td>"),
        "newest first: {table}"
    );
    assert!(rows[0].contains("<td>worker-b</td>"), "{table}");
    assert!(rows[0].contains(">done<"), "{table}");
    assert!(rows[1].contains("<td>worker-a</td>"), "{table}");
    assert!(rows[1].contains(">retry<"), "{table}");
    assert!(
        rows[1].contains("smtp &lt;script&gt;alert(1)&lt;/script&gt;"),
        "the error, escaped: {table}"
    );
    assert!(page.contains("<h2>Output</h2>"), "{page}");
    assert!(page.contains("&quot;rows&quot;: 3"), "{page}");
}

#[tokio::test]
async fn actions_need_the_pages_token_and_a_same_site_request() {
    let queue = fresh_queue("web_csrf").await;
    let id = insert_job(
        &queue,
        "default",
        "k",
        "csrf-1",
        "{}",
        "failed",
        Some("boom"),
    )
    .await;
    let router = Dashboard::new(queue.clone()).router();
    let token = csrf_of(&get(&router, &format!("/jobs/{id}")).await.body);
    let path = format!("/jobs/{id}/retry");

    // The token is bound to the browser's session cookie; a forged form cannot know it.
    let none = post(&router, &path, "").await;
    assert_eq!(none.status, StatusCode::FORBIDDEN, "{}", none.body);
    let wrong = post(&router, &path, "csrf=AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA").await;
    assert_eq!(wrong.status, StatusCode::FORBIDDEN, "{}", wrong.body);
    // Nor does the token serve another session, or none.
    let other = post_with_cookie(
        &router,
        &path,
        &format!("csrf={token}"),
        Some("othersessionothersessionothers__"),
    )
    .await;
    assert_eq!(other.status, StatusCode::FORBIDDEN, "{}", other.body);
    let no_cookie = post_with_cookie(&router, &path, &format!("csrf={token}"), None).await;
    assert_eq!(
        no_cookie.status,
        StatusCode::FORBIDDEN,
        "{}",
        no_cookie.body
    );
    let cross = send(
        &router,
        Request::post(&path)
            .header(header::CONTENT_TYPE, "application/x-www-form-urlencoded")
            .header("sec-fetch-site", "cross-site")
            .body(Body::from(format!("csrf={token}")))
            .unwrap(),
    )
    .await;
    assert_eq!(cross.status, StatusCode::FORBIDDEN, "{}", cross.body);
    // A GET never changes anything.
    assert_eq!(
        get(&router, &path).await.status,
        StatusCode::METHOD_NOT_ALLOWED
    );
    assert_eq!(
        row(&queue, id).await.status,
        JobStatus::Failed,
        "refused requests changed nothing"
    );

    // A dashboard restarted with no secret of its own has a new key: the old form expired.
    let restarted = Dashboard::new(queue.clone()).router();
    let expired = post(&restarted, &path, &format!("csrf={token}")).await;
    assert_eq!(expired.status, StatusCode::FORBIDDEN);
    assert!(
        expired.body.contains("the form expired"),
        "{}",
        expired.body
    );
    assert_eq!(row(&queue, id).await.status, JobStatus::Failed);

    // The same session's token is accepted.
    let ok = post(&router, &path, &format!("csrf={token}")).await;
    assert_eq!(ok.status, StatusCode::SEE_OTHER, "{}", ok.body);
    assert_eq!(row(&queue, id).await.status, JobStatus::Ready);
    let shown = get(&router, ok.location.as_deref().unwrap()).await.body;
    assert!(
        shown.contains("1 job changed"),
        "the action says how many rows it changed: {shown}"
    );
}

#[tokio::test]
async fn read_only_mode_hides_and_refuses_actions() {
    let queue = fresh_queue("web_read_only").await;
    let id = insert_job(&queue, "default", "k", "ro-1", "{}", "failed", Some("boom")).await;
    let router = Dashboard::new(queue.clone()).read_only(true).router();
    for path in ["/".to_owned(), "/jobs".into(), format!("/jobs/{id}")] {
        let page = get(&router, &path).await.body;
        assert!(
            !page.contains("method=\"post\""),
            "{path} offers an action: {page}"
        );
        assert!(
            !page.contains("/bulk?"),
            "{path} offers a bulk action: {page}"
        );
    }
    // A token from a dashboard that allows actions does not help: read-only refuses all.
    let writable = Dashboard::new(queue.clone()).router();
    let token = csrf_of(&get(&writable, &format!("/jobs/{id}")).await.body);
    for (path, form) in [
        (format!("/jobs/{id}/retry"), format!("csrf={token}")),
        (format!("/jobs/{id}/cancel"), format!("csrf={token}")),
        ("/queues/default/pause".into(), format!("csrf={token}")),
        (
            "/purge".into(),
            format!("csrf={token}&status=failed&older_than_hours=0"),
        ),
        ("/bulk".into(), format!("csrf={token}&action=retry")),
    ] {
        let r = post(&router, &path, &form).await;
        assert_eq!(r.status, StatusCode::FORBIDDEN, "{path}: {}", r.body);
    }
    assert_eq!(
        get(&router, "/bulk?action=retry").await.status,
        StatusCode::FORBIDDEN
    );
    assert_eq!(row(&queue, id).await.status, JobStatus::Failed);
    assert!(queue.paused_queues().await.unwrap().is_empty());
}

#[tokio::test]
async fn redacted_job_data_keeps_queue_kind_and_status() {
    let queue = fresh_queue("web_hide").await;
    let id = insert_job(
        &queue,
        "mail",
        "send_welcome",
        "welcome:ada",
        r#"{"email":"ada@example.invalid"}"#,
        "failed",
        Some("smtp refused"),
    )
    .await;
    #[allow(deprecated)]
    let router = Dashboard::new(queue.clone()).hide_payloads(true).router();
    let page = get(&router, &format!("/jobs/{id}")).await.body;
    for hidden in ["ada@example.invalid", "welcome:ada", "smtp refused"] {
        assert!(!page.contains(hidden), "{hidden} is shown: {page}");
    }
    assert!(page.contains("Payloads are hidden"), "{page}");
    for kept in ["send_welcome", "mail", "failed"] {
        assert!(page.contains(kept), "{kept} is still shown: {page}");
    }
    let shown = Dashboard::new(queue.clone()).router();
    assert!(get(&shown, &format!("/jobs/{id}"))
        .await
        .body
        .contains("ada@example.invalid"));
}

#[tokio::test]
async fn the_job_list_filters_and_pages_in_the_order_of_its_status() {
    let queue = fresh_queue("web_list").await;
    let mut ids: Vec<Seeded> = Vec::new();
    for i in 0..130u32 {
        let (q, kind, status) = match i % 3 {
            0 => ("alpha", "export", "failed"),
            1 => ("beta", "export", "done"),
            _ => ("alpha", "mail", "ready"),
        };
        let key = format!("{}:{i}", if i % 2 == 0 { "even" } else { "odd" });
        ids.push((
            insert_job(&queue, q, kind, &key, "{}", status, None).await,
            q,
            kind,
            status,
            key,
        ));
    }
    // Pages of 50, following each page's cursor, give every matching job once, in the
    // listing's order: newest first without a status and for finished jobs (each finished
    // as it was inserted), next to run first for waiting ones.
    let check = |query: JobFilter, expect: Vec<u64>| {
        let queue = queue.clone();
        async move {
            let mut got = Vec::new();
            let mut cursor = None;
            loop {
                let page = queue.list(&query, cursor.as_ref(), 50).await.unwrap();
                assert!(page.jobs.len() <= 50);
                got.extend(page.jobs.iter().map(|j| j.id));
                match page.next {
                    Some(next) => cursor = Some(next),
                    None => break,
                }
            }
            assert_eq!(got, expect, "{query:?}");
        }
    };
    let newest_first = |f: &dyn Fn(&Seeded) -> bool| {
        let mut v: Vec<u64> = ids.iter().filter(|j| f(j)).map(|j| j.0).collect();
        v.reverse();
        v
    };
    check(JobFilter::default(), newest_first(&|_| true)).await;
    check(
        JobFilter::default().queue("alpha"),
        newest_first(&|j| j.1 == "alpha"),
    )
    .await;
    check(
        JobFilter::default().kind("mail"),
        newest_first(&|j| j.2 == "mail"),
    )
    .await;
    check(
        JobFilter::default().status(JobStatus::Failed),
        newest_first(&|j| j.3 == "failed"),
    )
    .await;
    check(
        JobFilter::default().key_prefix("odd:"),
        newest_first(&|j| j.4.starts_with("odd:")),
    )
    .await;
    check(
        JobFilter::default()
            .queue("alpha")
            .status(JobStatus::Ready)
            .key_prefix("even"),
        {
            // Ready jobs by run_at, each due when it was inserted: the oldest first.
            let mut v =
                newest_first(&|j| j.1 == "alpha" && j.3 == "ready" && j.4.starts_with("even"));
            v.reverse();
            v
        },
    )
    .await;
    // LIKE's own characters in a prefix are literal.
    check(JobFilter::default().key_prefix("%"), Vec::new()).await;
    // A time range: all jobs were enqueued within the last minutes, none in the future.
    let now = queue.now().await.unwrap();
    check(
        JobFilter::default().created(Some(now + chrono::Duration::minutes(1)), None),
        Vec::new(),
    )
    .await;
    check(
        JobFilter::default().created(
            Some(now - chrono::Duration::hours(1)),
            Some(now + chrono::Duration::seconds(1)),
        ),
        newest_first(&|_| true),
    )
    .await;

    // The page links each row to its job and the next page by keyset.
    let router = Dashboard::new(queue.clone()).router();
    let page = get(&router, "/jobs?queue=alpha&status=failed").await.body;
    let failed_alpha = newest_first(&|j| j.1 == "alpha" && j.3 == "failed");
    assert!(
        page.contains(&format!("href=\"/jobs/{}\"", failed_alpha[0])),
        "{page}"
    );
    assert!(
        !page.contains("rel=\"next\""),
        "44 failed jobs fit one page: {page}"
    );
    let all = get(&router, "/jobs").await.body;
    let next = newest_first(&|_| true)[49];
    assert!(
        all.contains(&format!("cursor={next}\" rel=\"next\">Older »")),
        "{all}"
    );
    // The cursor of a listing by id is the id: links of earlier releases (`before=`) still
    // lead to the same page.
    for link in [
        format!("/jobs?cursor={next}"),
        format!("/jobs?before={next}"),
    ] {
        let second = get(&router, &link).await.body;
        assert!(
            second.contains(&format!("href=\"/jobs/{}\"", newest_first(&|_| true)[50])),
            "{second}"
        );
        assert!(
            !second.contains(&format!("href=\"/jobs/{next}\"")),
            "{second}"
        );
    }
    // A listing of done jobs pages by when they finished, newest first; its cursor names
    // the status, and the page says so. (Ten more of each, for a second page.)
    for i in 0..10 {
        insert_job(
            &queue,
            "beta",
            "export",
            &format!("more:{i}"),
            "{}",
            "done",
            None,
        )
        .await;
        insert_job(
            &queue,
            "beta",
            "mail",
            &format!("later:{i}"),
            "{}",
            "ready",
            None,
        )
        .await;
    }
    let done_ids: Vec<u64> = queue
        .list(&JobFilter::default().status(JobStatus::Done), None, 100)
        .await
        .unwrap()
        .jobs
        .iter()
        .map(|j| j.id)
        .collect();
    assert_eq!(done_ids.len(), 53);
    assert!(done_ids.windows(2).all(|w| w[0] > w[1]), "{done_ids:?}");
    let done = get(&router, "/jobs?status=done").await.body;
    assert!(done.contains("newest finished first"), "{done}");
    let link = done
        .split("rel=\"next\"")
        .next()
        .and_then(|head| head.rsplit("href=\"").next())
        .map(|href| href.trim_end_matches("\" ").replace("&amp;", "&"))
        .expect("a link to the next page");
    assert!(link.starts_with("/jobs?status=done&cursor=done."), "{link}");
    let second = get(&router, &link).await.body;
    assert!(
        second.contains(&format!("href=\"/jobs/{}\"", done_ids[50])),
        "{second}"
    );
    // Ready jobs: next to run first, the next page "later".
    let ready = get(&router, "/jobs?status=ready").await.body;
    assert!(ready.contains("next to run first"), "{ready}");
    assert!(ready.contains("\" rel=\"next\">Later »"), "{ready}");
    // A cursor of another listing, or none at all, is refused with a message.
    let other = get(&router, &link.replace("status=done", "status=failed")).await;
    assert_eq!(other.status, StatusCode::BAD_REQUEST);
    assert!(
        other.body.contains("continues a listing of done jobs"),
        "{}",
        other.body
    );
    let bad = get(&router, "/jobs?cursor=yesterday").await;
    assert_eq!(bad.status, StatusCode::BAD_REQUEST);
    assert!(bad.body.contains("invalid cursor"), "{}", bad.body);
}

#[tokio::test]
async fn bulk_actions_confirm_the_count_and_say_how_many_changed() {
    let queue = fresh_queue("web_bulk").await;
    for i in 0..3 {
        insert_job(
            &queue,
            "one",
            "k",
            &format!("one-f-{i}"),
            "{}",
            "failed",
            Some("x"),
        )
        .await;
    }
    for i in 0..2 {
        insert_job(
            &queue,
            "two",
            "k",
            &format!("two-f-{i}"),
            "{}",
            "failed",
            Some("x"),
        )
        .await;
    }
    for i in 0..4 {
        insert_job(
            &queue,
            "one",
            "k",
            &format!("one-r-{i}"),
            "{}",
            "ready",
            None,
        )
        .await;
    }
    let running = insert_job(&queue, "one", "k", "one-running", "{}", "running", None).await;
    let router = Dashboard::new(queue.clone()).router();

    let confirm = get(&router, "/bulk?queue=one&status=failed&action=retry").await;
    assert!(
        confirm.body.contains("id=\"bulk-count\">3<"),
        "{}",
        confirm.body
    );
    let token = csrf_of(&confirm.body);
    let done = post(
        &router,
        "/bulk",
        &format!("csrf={token}&queue=one&status=failed&action=retry"),
    )
    .await;
    assert_eq!(done.status, StatusCode::SEE_OTHER, "{}", done.body);
    let shown = get(&router, done.location.as_deref().unwrap()).await.body;
    assert!(shown.contains("Retried 3 jobs."), "{shown}");
    assert_eq!(
        queue
            .count(&JobFilter::default().queue("one").status(JobStatus::Failed))
            .await
            .unwrap(),
        0
    );
    assert_eq!(
        queue
            .count(&JobFilter::default().queue("two").status(JobStatus::Failed))
            .await
            .unwrap(),
        2
    );

    // Cancel every job of queue `one`: only the 7 ready ones can be; the running one is left.
    let confirm = get(&router, "/bulk?queue=one&action=cancel").await.body;
    assert!(confirm.contains("id=\"bulk-count\">7<"), "{confirm}");
    let done = post(
        &router,
        "/bulk",
        &format!("csrf={token}&queue=one&action=cancel"),
    )
    .await;
    let shown = get(&router, done.location.as_deref().unwrap()).await.body;
    assert!(shown.contains("Cancelled 7 jobs."), "{shown}");
    assert_eq!(
        queue
            .count(
                &JobFilter::default()
                    .queue("one")
                    .status(JobStatus::Cancelled)
            )
            .await
            .unwrap(),
        7
    );
    assert_eq!(row(&queue, running).await.status, JobStatus::Running);
}

#[tokio::test]
async fn blocked_jobs_are_counted_listed_and_cancelled() {
    let queue = fresh_queue("web_blocked").await;
    let mut blocked = Vec::new();
    for i in 0..3 {
        blocked
            .push(insert_job(&queue, "lim", "k", &format!("b-{i}"), "{}", "blocked", None).await);
    }
    insert_job(&queue, "lim", "k", "r-0", "{}", "ready", None).await;
    let router = Dashboard::new(queue.clone()).router();

    // The overview counts them, with a link to the list of them.
    let live = get(&router, "/live").await.body;
    assert!(live.contains("<th class=\"n\">Blocked</th>"), "{live}");
    assert!(
        live.contains("<a href=\"/jobs?queue=lim&amp;status=blocked\">3</a>"),
        "{live}"
    );
    // The list filters on them, and a wrong status names them among the right ones.
    let list = get(&router, "/jobs?queue=lim&status=blocked").await.body;
    assert!(
        list.contains("<option value=\"blocked\" selected>"),
        "{list}"
    );
    assert!(list.contains("b-2") && !list.contains("r-0"), "{list}");
    let wrong = get(&router, "/jobs?status=stuck").await;
    assert_eq!(wrong.status, StatusCode::BAD_REQUEST);
    assert!(
        wrong.body.contains(
            "unknown status &quot;stuck&quot;: use scheduled, ready, blocked, running, done, failed or cancelled"
        ),
        "{}",
        wrong.body
    );

    // A blocked job's page offers Cancel, which cancels it.
    let page = get(&router, &format!("/jobs/{}", blocked[0])).await.body;
    assert!(
        page.contains(&format!("action=\"/jobs/{}/cancel\"", blocked[0])),
        "{page}"
    );
    let token = csrf_of(&page);
    let r = post(
        &router,
        &format!("/jobs/{}/cancel", blocked[0]),
        &format!("csrf={token}"),
    )
    .await;
    assert!(get(&router, r.location.as_deref().unwrap())
        .await
        .body
        .contains("cancelled: 1 job changed"));
    assert_eq!(row(&queue, blocked[0]).await.status, JobStatus::Cancelled);

    // The bulk cancel's confirmation counts what it cancels: the ready and the blocked jobs.
    let confirm = get(&router, "/bulk?queue=lim&action=cancel").await.body;
    assert!(confirm.contains("id=\"bulk-count\">3<"), "{confirm}");
    assert!(confirm.contains("scheduled, ready or blocked"), "{confirm}");
    let done = post(
        &router,
        "/bulk",
        &format!("csrf={token}&queue=lim&action=cancel"),
    )
    .await;
    let shown = get(&router, done.location.as_deref().unwrap()).await.body;
    assert!(shown.contains("Cancelled 3 jobs."), "{shown}");
}

#[tokio::test]
async fn pause_resume_cancel_and_purge_say_what_changed() {
    let queue = fresh_queue("web_pause").await;
    insert_job(&queue, "mail", "k", "d1", "{}", "done", None).await;
    insert_job(&queue, "mail", "k", "d2", "{}", "done", None).await;
    let ready = insert_job(&queue, "mail", "k", "r1", "{}", "ready", None).await;
    let router = Dashboard::new(queue.clone()).router();
    let overview = get(&router, "/").await.body;
    let token = csrf_of(&overview);
    assert!(
        overview.contains("action=\"/queues/mail/pause\""),
        "{overview}"
    );

    let r = post(&router, "/queues/mail/pause", &format!("csrf={token}")).await;
    assert_eq!(r.status, StatusCode::SEE_OTHER);
    assert!(get(&router, r.location.as_deref().unwrap())
        .await
        .body
        .contains("Queue mail paused: 1 queue changed."));
    assert_eq!(
        queue.paused_queues().await.unwrap(),
        vec!["mail".to_owned()]
    );
    let again = post(&router, "/queues/mail/pause", &format!("csrf={token}")).await;
    assert!(get(&router, again.location.as_deref().unwrap())
        .await
        .body
        .contains("0 queues changed"));
    let live = get(&router, "/live").await.body;
    assert!(
        live.contains("badge paused") && live.contains("/queues/mail/resume"),
        "{live}"
    );
    let r = post(&router, "/queues/mail/resume", &format!("csrf={token}")).await;
    assert!(get(&router, r.location.as_deref().unwrap())
        .await
        .body
        .contains("1 queue changed"));
    assert!(queue.paused_queues().await.unwrap().is_empty());

    let r = post(
        &router,
        &format!("/jobs/{ready}/cancel"),
        &format!("csrf={token}"),
    )
    .await;
    assert!(get(&router, r.location.as_deref().unwrap())
        .await
        .body
        .contains("cancelled: 1 job changed"));
    assert_eq!(row(&queue, ready).await.status, JobStatus::Cancelled);

    let r = post(
        &router,
        "/purge",
        &format!("csrf={token}&status=done&older_than_hours=0"),
    )
    .await;
    let shown = get(&router, r.location.as_deref().unwrap()).await.body;
    assert!(shown.contains("Purged 2 jobs done"), "{shown}");
    assert_eq!(
        queue
            .count(&JobFilter::default().status(JobStatus::Done))
            .await
            .unwrap(),
        0
    );
}

/// The sum of `queue`'s (done, failed) over a throughput read.
fn throughput_of(minutes: &[jobqueue::admin::ThroughputMinute], queue: &str) -> (u64, u64) {
    minutes
        .iter()
        .filter(|m| m.queue == queue)
        .fold((0, 0), |(d, f), m| (d + m.done, f + m.failed))
}

/// The (done, failed) of `name` in the kept throughput counts.
async fn kept_throughput(queue: &Queue, name: &str) -> (i64, i64) {
    sqlx::query_as(
        "SELECT CAST(COALESCE(SUM(done), 0) AS SIGNED), CAST(COALESCE(SUM(failed), 0) AS SIGNED) \
         FROM job_queue_throughput WHERE queue = ?",
    )
    .bind(name)
    .fetch_one(queue.mysql_pool().unwrap())
    .await
    .unwrap()
}

#[tokio::test]
async fn the_throughput_is_kept_through_pruning_and_counts_each_job_once() {
    let queue = fresh_queue("web_throughput").await;
    // Three jobs done ten minutes ago, two failed now (not yet countable: a count stops 15 s
    // before now, so they are read from the table at each look).
    for i in 0..3 {
        let id = insert_job(&queue, "t", "k", &format!("done-{i}"), "{}", "done", None).await;
        sqlx::query(
            "UPDATE job_queue SET finished_at = UTC_TIMESTAMP(6) - INTERVAL 10 MINUTE WHERE id = ?",
        )
        .bind(id)
        .execute(queue.mysql_pool().unwrap())
        .await
        .unwrap();
    }
    for i in 0..2 {
        insert_job(
            &queue,
            "t",
            "k",
            &format!("failed-{i}"),
            "{}",
            "failed",
            Some("e"),
        )
        .await;
    }
    // No worker has counted: the first look counts what is countable and keeps it.
    let minutes = queue.throughput(60).await.unwrap();
    assert_eq!(throughput_of(&minutes, "t"), (3, 2), "{minutes:?}");
    assert!(
        minutes
            .iter()
            .any(|m| m.queue == "t" && m.done == 3 && (9..=11).contains(&m.minutes_ago)),
        "the done jobs in their minute: {minutes:?}"
    );
    let kept = kept_throughput(&queue, "t").await;
    assert_eq!(
        kept,
        (3, 0),
        "the done jobs are kept, the failed ones not yet"
    );

    // Pruned jobs stay in the chart.
    sqlx::query("DELETE FROM job_queue WHERE status = 'done'")
        .execute(queue.mysql_pool().unwrap())
        .await
        .unwrap();
    let minutes = queue.throughput(60).await.unwrap();
    assert_eq!(throughput_of(&minutes, "t"), (3, 2), "{minutes:?}");

    // Once the failed jobs are countable, a count keeps them, and a look reads them from
    // the kept counts only, not also from the table.
    wait_for(
        "the failed jobs to be countable",
        Duration::from_secs(60),
        || async {
            let n: i64 = sqlx::query_scalar(
                "SELECT COUNT(*) FROM job_queue \
             WHERE status = 'failed' AND finished_at < UTC_TIMESTAMP(6) - INTERVAL 15 SECOND",
            )
            .fetch_one(queue.mysql_pool().unwrap())
            .await
            .unwrap();
            (n == 2).then_some(())
        },
    )
    .await;
    queue.store().count_throughput().await.unwrap();
    let kept = kept_throughput(&queue, "t").await;
    assert_eq!(kept, (3, 2));
    // A second count adds nothing: each job is counted once.
    queue.store().count_throughput().await.unwrap();
    let minutes = queue.throughput(60).await.unwrap();
    assert_eq!(throughput_of(&minutes, "t"), (3, 2), "{minutes:?}");
}

#[tokio::test]
async fn the_overview_shows_each_queue_in_one_statement() {
    let queue = fresh_queue("web_overview").await;
    for (q, status, n) in [
        ("alpha", "ready", 3),
        ("alpha", "failed", 2),
        ("beta", "done", 4),
        ("beta", "scheduled", 1),
    ] {
        for i in 0..n {
            insert_job(
                &queue,
                q,
                "k",
                &format!("{q}-{status}-{i}"),
                "{}",
                status,
                None,
            )
            .await;
        }
    }
    queue.pause("gamma").await.unwrap();
    let stats = queue.queue_overview().await.unwrap();
    let names: Vec<_> = stats.iter().map(|s| s.queue.as_str()).collect();
    assert_eq!(names, ["alpha", "beta", "gamma"]);
    assert_eq!(
        (
            stats[0].counts.ready,
            stats[0].counts.failed,
            stats[0].paused,
        ),
        (3, 2, false)
    );
    assert!(stats[0].oldest_ready_secs.is_some());
    assert_eq!(
        (
            stats[1].counts.done,
            stats[1].counts.scheduled,
            stats[1].oldest_ready_secs
        ),
        (4, 1, None)
    );
    assert!(stats[2].paused);
    let minutes = queue.throughput(60).await.unwrap();
    let done: u64 = minutes
        .iter()
        .filter(|m| m.queue == "beta")
        .map(|m| m.done)
        .sum();
    let failed: u64 = minutes
        .iter()
        .filter(|m| m.queue == "alpha")
        .map(|m| m.failed)
        .sum();
    assert_eq!((done, failed), (4, 2));

    let router = Dashboard::new(queue.clone()).router();
    let page = get(&router, "/").await.body;
    assert!(
        page.contains("<div id=\"live\" data-src=\"/live\">"),
        "{page}"
    );
    assert!(page.contains("<svg class=\"chart\""), "{page}");
    assert!(
        page.contains("4 done") && page.contains("2 failed"),
        "{page}"
    );
    let live = get(&router, "/live").await.body;
    assert!(
        !live.contains("<html"),
        "the live part is a fragment: {live}"
    );
    assert!(
        live.contains("href=\"/jobs?queue=alpha&amp;status=ready\">3</a>"),
        "{live}"
    );

    // Mounted under a path, every link and form stays under it.
    let app = axum::Router::new().nest("/ops/jobs", Dashboard::new(queue.clone()).router());
    let page = get(&app, "/ops/jobs").await.body;
    assert!(
        page.contains("href=\"/ops/jobs/assets/style.css\""),
        "{page}"
    );
    assert!(page.contains("data-src=\"/ops/jobs/live\""), "{page}");
    assert!(
        page.contains("action=\"/ops/jobs/queues/gamma/resume\""),
        "{page}"
    );
    let live = get(&app, "/ops/jobs/live").await.body;
    assert!(
        live.contains("href=\"/ops/jobs/jobs?queue=alpha&amp;status=ready\""),
        "{live}"
    );
    let list = get(&app, "/ops/jobs/jobs?queue=alpha").await.body;
    assert!(
        list.contains("action=\"/ops/jobs/jobs\"") && list.contains("href=\"/ops/jobs/jobs/"),
        "{list}"
    );
    assert_eq!(
        get(&app, "/ops/jobs/assets/dashboard.js").await.status,
        StatusCode::OK
    );
}

#[tokio::test]
async fn a_token_or_basic_auth_guards_every_page() {
    let queue = fresh_queue("web_auth").await;
    let router = Dashboard::new(queue.clone())
        .auth(Auth::Token("s3cret-s3cret-s3cret".into()))
        .router();
    let b64 = |s: &str| base64::engine::general_purpose::STANDARD.encode(s);
    let with = |value: String| {
        Request::get("/")
            .header(header::AUTHORIZATION, value)
            .body(Body::empty())
            .unwrap()
    };
    assert_eq!(get(&router, "/").await.status, StatusCode::UNAUTHORIZED);
    assert_eq!(
        get(&router, "/assets/style.css").await.status,
        StatusCode::UNAUTHORIZED
    );
    assert_eq!(
        send(&router, with("Bearer wrong".into())).await.status,
        StatusCode::UNAUTHORIZED
    );
    assert_eq!(
        send(&router, with("Bearer s3cret-s3cret-s3cret".into()))
            .await
            .status,
        StatusCode::OK
    );
    assert_eq!(
        send(
            &router,
            with(format!("Basic {}", b64("any:s3cret-s3cret-s3cret")))
        )
        .await
        .status,
        StatusCode::OK
    );

    let router = Dashboard::new(queue)
        .auth(Auth::Basic {
            user: "ops".into(),
            password: "pw-pw-pw-pw-pw".into(),
        })
        .router();
    assert_eq!(
        send(
            &router,
            with(format!("Basic {}", b64("ops:pw-pw-pw-pw-pw")))
        )
        .await
        .status,
        StatusCode::OK
    );
    assert_eq!(
        send(&router, with(format!("Basic {}", b64("ops:no"))))
            .await
            .status,
        StatusCode::UNAUTHORIZED
    );
    assert_eq!(
        send(
            &router,
            with(format!("Basic {}", b64("eve:pw-pw-pw-pw-pw")))
        )
        .await
        .status,
        StatusCode::UNAUTHORIZED
    );

    // Off loopback, serving needs one of them.
    let open = "0.0.0.0:8080".parse().unwrap();
    let err = jobqueue_web::check_listen(open, None).unwrap_err();
    assert!(
        err.contains("--token") && err.contains("127.0.0.1"),
        "{err}"
    );
    assert!(jobqueue_web::check_listen(open, Some(&Auth::Token("t".repeat(16)))).is_ok());
    assert!(jobqueue_web::check_listen("127.0.0.1:8080".parse().unwrap(), None).is_ok());
    assert!(jobqueue_web::check_listen("[::1]:8080".parse().unwrap(), None).is_ok());
}

#[tokio::test]
async fn workers_write_a_heartbeat_and_delete_it_on_shutdown() {
    let queue = fresh_queue("web_workers").await;
    // A worker that died long ago, and one that stopped writing a minute ago.
    sqlx::query(
        "INSERT INTO job_queue_worker (owner, host, pid, version, queues, concurrency, running, started_at, last_seen) VALUES \
         ('old:1:1', 'h', 1, '0.1.0', 'x', 1, 0, UTC_TIMESTAMP(6) - INTERVAL 3 HOUR, UTC_TIMESTAMP(6) - INTERVAL 2 HOUR), \
         ('silent:2:2', 'h', 2, '0.1.0', 'x', 1, 1, UTC_TIMESTAMP(6) - INTERVAL 3 HOUR, UTC_TIMESTAMP(6) - INTERVAL 1 MINUTE)",
    )
    .execute(queue.mysql_pool().unwrap())
    .await
    .unwrap();
    let worker = quick_worker(&queue)
        .queues(["hb_a", "hb_b"])
        .concurrency(3)
        .build()
        .unwrap();
    let owner = worker.owner().to_owned();
    let (handle, task) = start(worker);
    let workers = wait_for(
        "the worker's heartbeat and the old row's removal",
        Duration::from_secs(10),
        || async {
            let w = queue.workers().await.unwrap();
            (w.iter().any(|w| w.owner == owner) && !w.iter().any(|w| w.owner == "old:1:1"))
                .then_some(w)
        },
    )
    .await;
    let me = workers.iter().find(|w| w.owner == owner).unwrap();
    assert_eq!(me.queues, ["hb_a", "hb_b"]);
    assert_eq!((me.concurrency, me.running, me.gone), (3, 0, false));
    assert_eq!(me.pid, std::process::id());
    let silent = workers.iter().find(|w| w.owner == "silent:2:2").unwrap();
    assert!(silent.gone);

    let router = Dashboard::new(queue.clone()).router();
    let page = get(&router, "/workers").await.body;
    assert!(
        page.contains(&owner) && page.contains("hb_a, hb_b") && page.contains("0 / 3"),
        "{page}"
    );
    assert!(page.contains("badge failed\">gone"), "{page}");

    stop(&handle, task).await;
    let left: Vec<_> = queue
        .workers()
        .await
        .unwrap()
        .into_iter()
        .map(|w| w.owner)
        .collect();
    assert_eq!(left, ["silent:2:2"], "a stopped worker deletes its row");
}

#[job(name = "web_hourly", queue = "web_periodic", cron = "0 0 * * * *")]
async fn web_hourly() -> Result<(), JobError> {
    Ok(())
}

#[tokio::test]
async fn the_periodic_page_shows_schedule_next_tick_and_last_outcome() {
    let queue: Queue = fresh_queue("web_periodic").await;
    let worker = quick_worker(&queue)
        .queues(["web_periodic_none"])
        .build()
        .unwrap();
    let (handle, task) = start(worker);
    wait_for(
        "the worker to write the schedule",
        Duration::from_secs(20),
        || async {
            queue
                .periodic_jobs()
                .await
                .unwrap()
                .into_iter()
                .find(|p| p.kind == "web_hourly" && p.schedule.is_some())
        },
    )
    .await;
    stop(&handle, task).await;
    // Read once the worker has stopped: a pass at the top of the hour before that moves the
    // last tick, and with it the next one the page shows.
    let job = queue
        .periodic_jobs()
        .await
        .unwrap()
        .into_iter()
        .find(|p| p.kind == "web_hourly")
        .expect("the schedule");
    assert_eq!(job.schedule.as_deref(), Some("0 0 * * * *"));
    let next = job.next_tick.expect("a next tick");
    assert!(
        next > job.last_tick && next - job.last_tick <= chrono::Duration::hours(1),
        "{job:?}"
    );
    assert_eq!(chrono::Timelike::minute(&next), 0);

    // The latest tick's job failed: its outcome and error are shown.
    let failed = insert_job(
        &queue,
        "web_periodic",
        "web_hourly",
        "web_hourly@x",
        "{}",
        "failed",
        Some("disk <full>"),
    )
    .await;
    sqlx::query("UPDATE job_queue_cron SET last_job_id = ? WHERE kind = 'web_hourly'")
        .bind(failed)
        .execute(queue.mysql_pool().unwrap())
        .await
        .unwrap();
    let router = Dashboard::new(queue.clone()).router();
    let page = get(&router, "/periodic").await.body;
    assert!(
        page.contains("web_hourly") && page.contains("0 0 * * * *"),
        "{page}"
    );
    assert!(
        page.contains(&next.format("%Y-%m-%d %H:%M:%S").to_string()),
        "{page}"
    );
    assert!(
        page.contains(&format!("href=\"/jobs/{failed}\""))
            && page.contains("badge failed")
            && page.contains("disk &lt;full&gt;"),
        "{page}"
    );
}
