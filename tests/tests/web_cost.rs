//! The dashboard's queries on a large table: with 1,000,000 finished and 100,000 waiting jobs,
//! each page's statements are served by indexes (EXPLAIN), the job list reads rows in id
//! order without a sort, and the overview is one statement. Prints each page's time.

mod web_support;

use std::time::Instant;

use axum::http::StatusCode;
use jobqueue::admin::JobFilter;
use jobqueue::{JobStatus, Queue};
use jobqueue_runtime::__store::statements::dashboard_statements;
use jobqueue_web::Dashboard;
use tests::fresh_queue;
use web_support::get;

async fn seed(queue: &Queue) {
    let pool = queue.pool();
    let started = Instant::now();
    // Done jobs over the last week (a retention of 7 days at 1.6 jobs/s), every 47th failed (47 is prime to the 5 queues, so each queue has failed jobs), in 5 queues and 10 kinds.
    sqlx::query(
        "INSERT INTO job_queue (queue, kind, task_key, payload, status, attempts, created_at, updated_at, run_at, finished_at) \
         SELECT CONCAT('q', seq % 5), CONCAT('kind_', seq % 10), CONCAT('done:', seq), '{}', \
           IF(seq % 47 = 0, 'failed', 'done'), 1, \
           UTC_TIMESTAMP(6) - INTERVAL (1000000 - seq) * 600000 MICROSECOND, UTC_TIMESTAMP(6), UTC_TIMESTAMP(6), \
           UTC_TIMESTAMP(6) - INTERVAL (1000000 - seq) * 600000 MICROSECOND \
         FROM seq_1_to_1000000",
    )
    .execute(pool)
    .await
    .expect("seed finished jobs");
    sqlx::query(
        "INSERT INTO job_queue (queue, kind, task_key, payload, status, run_at) \
         SELECT CONCAT('q', seq % 5), CONCAT('kind_', seq % 10), CONCAT('wait:', seq), '{}', \
           IF(seq % 2 = 0, 'ready', 'scheduled'), UTC_TIMESTAMP(6) + INTERVAL IF(seq % 2 = 0, -1, 1) * CAST(seq AS SIGNED) SECOND \
         FROM seq_1_to_100000",
    )
    .execute(pool)
    .await
    .expect("seed waiting jobs");
    sqlx::query("ANALYZE TABLE job_queue")
        .execute(pool)
        .await
        .unwrap();
    println!("seeded 1,100,000 jobs in {:?}", started.elapsed());
}

#[tokio::test]
async fn dashboard_queries_use_indexes_on_a_million_jobs() {
    let queue = fresh_queue("web_cost").await;
    seed(&queue).await;
    let now = queue.now().await.unwrap();
    let filters = [
        JobFilter::default(),
        JobFilter::default().status(JobStatus::Failed),
        JobFilter::default().status(JobStatus::Ready),
        JobFilter::default().queue("q3"),
        JobFilter::default().kind("kind_7"),
        JobFilter::default().queue("q3").status(JobStatus::Failed),
        JobFilter::default().kind("kind_7").status(JobStatus::Done),
        JobFilter::default().key_prefix("done:12345"),
        JobFilter::default()
            .status(JobStatus::Failed)
            .created(Some(now - chrono::Duration::minutes(30)), Some(now)),
    ];
    let mut problems = Vec::new();
    for (i, filter) in filters.iter().enumerate() {
        for before in [None, Some(500_000)] {
            let statements = dashboard_statements(filter, before);
            // Only the first filter's run checks the statements that do not depend on it.
            let checked = if i == 0 && before.is_none() {
                statements.len()
            } else {
                2
            };
            for (n, (sql, args)) in statements.iter().take(checked).enumerate() {
                let plan = queue.store().explain(sql, args).await.expect("EXPLAIN");
                for (table, kind, key, rows, extra) in &plan {
                    println!("{filter:?} before={before:?} #{n}: {table} {kind} {key:?} rows={rows:?} {extra}");
                    let big = table == "job_queue" || table == "j";
                    if big && (kind == "ALL" || key.is_none()) {
                        problems.push(format!(
                            "full scan of {table}: {sql} {args:?} -> {kind} {key:?} {extra}"
                        ));
                    }
                    // The page (statement 0) reads rows in id order: never a sort, but for a
                    // key prefix alone, which sorts only the keys it matches.
                    let prefix_only = filter.key_prefix.is_some()
                        && filter.status.is_none()
                        && filter.queue.is_none()
                        && filter.kind.is_none();
                    if n == 0 && extra.contains("filesort") && !prefix_only {
                        problems.push(format!("sorted page: {sql} {args:?} -> {key:?} {extra}"));
                    }
                }
            }
        }
    }
    assert!(problems.is_empty(), "{problems:#?}");

    // Page times through the router, each page loaded once warm (the server's caches).
    let router = Dashboard::new(queue.clone()).router();
    let id = queue
        .list(&JobFilter::default().status(JobStatus::Failed), None, 1)
        .await
        .unwrap()
        .jobs[0]
        .id;
    for path in [
        "/".to_owned(),
        "/live".into(),
        "/jobs".into(),
        "/jobs?status=failed".into(),
        "/jobs?queue=q3&status=failed&before=500000".into(),
        "/jobs?kind=kind_7".into(),
        "/jobs?key=done%3A12345".into(),
        format!("/jobs/{id}"),
        "/workers".into(),
        "/periodic".into(),
        "/bulk?queue=q3&status=failed&action=retry".into(),
    ] {
        let _ = get(&router, &path).await;
        // A dashboard of its own, so the overview is read, not taken from the viewers' share.
        let fresh = Dashboard::new(queue.clone()).router();
        let started = Instant::now();
        let r = get(&fresh, &path).await;
        let took = started.elapsed();
        assert_eq!(r.status, StatusCode::OK, "{path}: {}", r.body);
        println!("page {path}: {took:?}");
    }
    let stats = queue.queue_overview().await.unwrap();
    assert_eq!(
        stats.iter().map(|s| s.done + s.failed).sum::<u64>(),
        1_000_000
    );
    assert_eq!(
        stats.iter().map(|s| s.ready + s.scheduled).sum::<u64>(),
        100_000
    );
}
