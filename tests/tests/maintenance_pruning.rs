//! Pruning of finished jobs past their retention, by the workers' maintenance: one worker
//! works off a backlog larger than one minute's quota within seconds, and a recent job
//! stays. It failed before the change it guards.

use std::time::{Duration, Instant};

use jobqueue::{job, JobStatus};
use tests::{fresh_queue, init_tracing, quick_worker, row, start, stop, wait_for, wait_status};

/// A job that does nothing; the test looks at rows, not at effects.
#[job(name = "hardening_conn_noop", queue = "conn")]
async fn noop(n: u64) {
    let _ = n;
}

// ---------------------------------------------------------------------------------------
// Pruning keeps up with a large backlog
// ---------------------------------------------------------------------------------------

/// One worker's maintenance deletes a backlog of 30,000 finished jobs past their retention
/// within seconds, rather than 10,000 a minute.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pruning_works_off_a_backlog_larger_than_one_minutes_quota() {
    init_tracing();
    let queue = fresh_queue("conn_prune").await;
    sqlx::query(
        "INSERT INTO job_queue (queue, kind, task_key, payload, status, priority, run_at, attempts, \
           max_attempts, lease_ms, created_at, updated_at, finished_at) \
         SELECT 'conn', 'hardening_conn_noop', CONCAT('old-', n), '{\"n\":0}', 'done', 0, \
           UTC_TIMESTAMP(6) - INTERVAL 9 DAY, 1, 25, 30000, UTC_TIMESTAMP(6) - INTERVAL 9 DAY, \
           UTC_TIMESTAMP(6) - INTERVAL 8 DAY, UTC_TIMESTAMP(6) - INTERVAL 8 DAY \
         FROM (SELECT a.d + 10 * b.d + 100 * c.d + 1000 * e.d + 10000 * f.d AS n \
               FROM (SELECT 0 d UNION ALL SELECT 1 UNION ALL SELECT 2 UNION ALL SELECT 3 UNION ALL SELECT 4 \
                     UNION ALL SELECT 5 UNION ALL SELECT 6 UNION ALL SELECT 7 UNION ALL SELECT 8 UNION ALL SELECT 9) a, \
                    (SELECT 0 d UNION ALL SELECT 1 UNION ALL SELECT 2 UNION ALL SELECT 3 UNION ALL SELECT 4 \
                     UNION ALL SELECT 5 UNION ALL SELECT 6 UNION ALL SELECT 7 UNION ALL SELECT 8 UNION ALL SELECT 9) b, \
                    (SELECT 0 d UNION ALL SELECT 1 UNION ALL SELECT 2 UNION ALL SELECT 3 UNION ALL SELECT 4 \
                     UNION ALL SELECT 5 UNION ALL SELECT 6 UNION ALL SELECT 7 UNION ALL SELECT 8 UNION ALL SELECT 9) c, \
                    (SELECT 0 d UNION ALL SELECT 1 UNION ALL SELECT 2 UNION ALL SELECT 3 UNION ALL SELECT 4 \
                     UNION ALL SELECT 5 UNION ALL SELECT 6 UNION ALL SELECT 7 UNION ALL SELECT 8 UNION ALL SELECT 9) e, \
                    (SELECT 0 d UNION ALL SELECT 1 UNION ALL SELECT 2) f) numbers",
    )
    .execute(queue.mysql_pool().unwrap())
    .await
    .unwrap();
    let old = tests::count_status(&queue, JobStatus::Done).await;
    assert_eq!(old, 30_000);
    // A recent one stays.
    let recent = queue.enqueue(Noop { n: 1 }).await.unwrap().id();

    let worker = quick_worker(&queue).queues(["conn"]).build().unwrap();
    let t0 = Instant::now();
    let (handle, task) = start(worker);
    wait_status(&queue, recent, JobStatus::Done, Duration::from_secs(20)).await;
    wait_for(
        "the backlog of 30,000 old done jobs to be pruned",
        // A busy machine's margin; at 10,000 a minute it would take three.
        Duration::from_secs(90),
        || async {
            let n = tests::count_status(&queue, JobStatus::Done).await;
            (n == 1).then_some(())
        },
    )
    .await;
    println!("pruned 30,000 rows in {:?}", t0.elapsed());
    stop(&handle, task).await;
    assert_eq!(row(&queue, recent).await.status, JobStatus::Done);
}
