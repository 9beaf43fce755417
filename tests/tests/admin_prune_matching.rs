//! `Queue::prune_matching`: an operator's prune narrowed to a queue or a kind deletes exactly
//! the old finished jobs it matches, and its statements go through the (status, finish time)
//! index.

use std::time::Duration;

use jobqueue::admin::JobFilter;
use jobqueue::{JobStatus, Queue};
use jobqueue_runtime::__store::statements::{prune_matching_count, prune_matching_select};
use tests::{fresh_queue, fresh_queue_on, on_every_backend, sql_exec, sql_i64, Backend};

/// 40 jobs: queues a and b, kinds x and y, done 10 days or 1 hour ago, some failed.
async fn seed(queue: &Queue) {
    let sql = match queue.backend() {
        Backend::Postgres => {
            "INSERT INTO job_queue (queue, kind, task_key, payload, status, attempts, run_at, finished_at) \
             SELECT CASE WHEN seq % 2 = 0 THEN 'a' ELSE 'b' END, \
               CASE WHEN seq % 4 < 2 THEN 'x' ELSE 'y' END, 'k:' || seq, '{}', \
               CASE WHEN seq % 5 = 0 THEN 'failed' ELSE 'done' END, 1, job_queue_now(), \
               job_queue_now() - CASE WHEN seq <= 20 THEN 240 ELSE 1 END * INTERVAL '1 hour' \
             FROM generate_series(1, 40) AS seq"
        }
        _ => {
            "INSERT INTO job_queue (queue, kind, task_key, payload, status, attempts, run_at, finished_at) \
             SELECT IF(seq % 2 = 0, 'a', 'b'), IF(seq % 4 < 2, 'x', 'y'), CONCAT('k:', seq), '{}', \
               IF(seq % 5 = 0, 'failed', 'done'), 1, UTC_TIMESTAMP(6), \
               UTC_TIMESTAMP(6) - INTERVAL IF(seq <= 20, 240, 1) HOUR \
             FROM seq_1_to_40"
        }
    };
    assert_eq!(sql_exec(queue, sql, &[]).await, 40, "seed");
}

/// A week before the server's clock, in the queue's SQL.
fn week_ago(queue: &Queue) -> &'static str {
    match queue.backend() {
        Backend::Postgres => "job_queue_now() - INTERVAL '7 days'",
        _ => "UTC_TIMESTAMP(6) - INTERVAL 7 DAY",
    }
}

async fn count(queue: &Queue, sql: &str) -> u64 {
    let sql = sql.replace("{week_ago}", week_ago(queue));
    sql_i64(queue, &sql, &[]).await as u64
}

async fn prune_matching_deletes_only_the_matching_old_jobs(backend: Backend) {
    let queue = fresh_queue_on(backend, "prune_matching").await;
    seed(&queue).await;
    let week = Duration::from_secs(7 * 86_400);
    let total = count(&queue, "SELECT COUNT(*) FROM job_queue").await;

    let in_a = JobFilter::default().status(JobStatus::Done).queue("a");
    let expected = count(
        &queue,
        "SELECT COUNT(*) FROM job_queue WHERE status = 'done' AND queue = 'a' \
         AND finished_at < {week_ago}",
    )
    .await;
    assert!(expected > 0);
    assert_eq!(
        queue.prunable_matching(&in_a, week).await.unwrap(),
        expected
    );
    assert_eq!(queue.prune_matching(&in_a, week).await.unwrap(), expected);
    assert_eq!(
        count(&queue, "SELECT COUNT(*) FROM job_queue").await,
        total - expected
    );
    // Nothing of queue a that is old and done is left; everything else is.
    assert_eq!(queue.prunable_matching(&in_a, week).await.unwrap(), 0);
    assert_eq!(
        count(
            &queue,
            "SELECT COUNT(*) FROM job_queue WHERE queue = 'b' OR status = 'failed' \
             OR finished_at > {week_ago}"
        )
        .await,
        total - expected
    );

    // A kind, and a status other than done.
    let failed_y = JobFilter::default().status(JobStatus::Failed).kind("y");
    let expected = count(
        &queue,
        "SELECT COUNT(*) FROM job_queue WHERE status = 'failed' AND kind = 'y' \
         AND finished_at < {week_ago}",
    )
    .await;
    assert_eq!(
        queue.prune_matching(&failed_y, week).await.unwrap(),
        expected
    );
    assert_eq!(
        count(
            &queue,
            "SELECT COUNT(*) FROM job_queue WHERE status = 'failed' AND kind = 'y' \
             AND finished_at < {week_ago}"
        )
        .await,
        0
    );

    // A status is required, and must be a finished one.
    let err = queue
        .prune_matching(&JobFilter::default().queue("a"), week)
        .await
        .unwrap_err();
    assert!(err.to_string().contains("needs a status"), "{err}");
    let err = queue
        .prunable_matching(&JobFilter::default().status(JobStatus::Ready), week)
        .await
        .unwrap_err();
    assert!(
        err.to_string().contains("done, failed or cancelled"),
        "{err}"
    );
}

#[tokio::test]
async fn prune_matching_statements_use_the_status_time_index() {
    let queue = fresh_queue("prune_matching_plan").await;
    seed(&queue).await;
    // A batch after the first starts at the finish time the previous one ended at.
    let from = chrono::Utc::now().naive_utc() - chrono::Duration::days(30);
    let query = JobFilter::default()
        .status(JobStatus::Done)
        .queue("a")
        .kind("x");
    for (sql, args) in [
        prune_matching_count(&query, 1_000_000),
        prune_matching_select(&query, 1_000_000, None, 500),
        prune_matching_select(&query, 1_000_000, Some(from), 500),
    ] {
        let plan = queue.store().explain(&sql, &args).await.expect("EXPLAIN");
        let (_, access, key, _, extra) = plan
            .iter()
            .find(|(table, ..)| table == "job_queue")
            .unwrap_or_else(|| panic!("no plan row for job_queue: {plan:?}"));
        assert_eq!(
            key.as_deref(),
            Some("job_queue_status_at"),
            "{sql}: {plan:?}"
        );
        assert_eq!(access, "range", "{sql}: {plan:?}");
        assert!(!extra.contains("filesort"), "{sql}: {plan:?}");
    }
}

on_every_backend!(prune_matching_deletes_only_the_matching_old_jobs);

/// The same on PostgreSQL: with a table of some size (and its statistics), no statement
/// scans the table, and each batch's locking read is a range of one of the status-time
/// indexes (by status, by queue and status, or by kind and status) in its order, without a
/// sort. (The count may take the `(queue, status, ...)`
/// range of the claim index instead: the same rows.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn prune_matching_statements_use_a_status_time_index_on_postgres() {
    use jobqueue_runtime::__store::statements::postgres::{
        prune_matching_count, prune_matching_select,
    };
    let queue = fresh_queue_on(Backend::Postgres, "prune_matching_plan").await;
    sql_exec(
        &queue,
        "INSERT INTO job_queue (queue, kind, task_key, payload, status, attempts, run_at, finished_at) \
         SELECT CASE WHEN seq % 2 = 0 THEN 'a' ELSE 'b' END, \
           CASE WHEN seq % 4 < 2 THEN 'x' ELSE 'y' END, 'k:' || seq, '{}', \
           (ARRAY['done', 'failed', 'ready', 'scheduled', 'cancelled'])[seq % 5 + 1], 1, \
           job_queue_now(), job_queue_now() - seq * INTERVAL '1 minute' \
         FROM generate_series(1, 200000) AS seq",
        &[],
    )
    .await;
    sql_exec(&queue, "ANALYZE job_queue", &[]).await;
    let from = chrono::Utc::now().naive_utc() - chrono::Duration::days(30);
    let query = JobFilter::default()
        .status(JobStatus::Done)
        .queue("a")
        .kind("x");
    let (sql, args) = prune_matching_count(&query, 1_000_000);
    let plan = queue.store().explain(&sql, &args).await.expect("EXPLAIN");
    assert!(
        plan.iter().any(|(_, _, index, ..)| index.is_some())
            && plan.iter().all(|(_, node, ..)| node != "Seq Scan"),
        "{sql}: {plan:?}"
    );
    for (sql, args) in [
        prune_matching_select(&query, 1_000_000, None, 500),
        prune_matching_select(&query, 1_000_000, Some(from), 500),
    ] {
        let plan = queue.store().explain(&sql, &args).await.expect("EXPLAIN");
        assert!(
            plan.iter().any(|(_, _, index, ..)| matches!(
                index.as_deref(),
                Some(
                    "job_queue_status_at"
                        | "job_queue_queue_status_at"
                        | "job_queue_kind_status_at"
                )
            )),
            "{sql}: {plan:?}"
        );
        assert!(
            plan.iter().all(|(_, node, ..)| node != "Seq Scan"),
            "{sql}: {plan:?}"
        );
        assert!(
            plan.iter().all(|(_, node, ..)| node != "Sort"),
            "{sql}: {plan:?}"
        );
    }
}
