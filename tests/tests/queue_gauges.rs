//! The queue gauges are counted by one worker of the fleet per interval: the turn is taken in
//! the database, so any number of workers cost one count per interval.

use std::time::Duration;

use jobqueue::testing::TestDatabase;
use jobqueue::{Backend, JobStatus};
use metrics_exporter_prometheus::PrometheusBuilder;
use tests::{count_status, fresh_queue, quick_worker, start, stop, wait_for};

async fn one_of_many_workers_takes_the_turn_to_count_the_gauges(backend: Backend) {
    let db = TestDatabase::new_on(backend, "queue_gauges")
        .await
        .expect("a test database");
    let url = db.keep();
    // Four processes' worth of pools, four callers each, all at once.
    let mut queues = Vec::new();
    for _ in 0..4 {
        queues.push(tests::migrated_queue(&url).await);
    }
    let race = |every: Duration| {
        let callers: Vec<_> = queues
            .iter()
            .flat_map(|q| std::iter::repeat_n(q.store(), 4))
            .map(|store| tokio::spawn(async move { store.take_gauge_turn(every).await }))
            .collect();
        async move {
            let mut taken = 0;
            for c in callers {
                taken += usize::from(c.await.expect("caller").expect("take the turn"));
            }
            taken
        }
    };
    assert_eq!(race(Duration::from_secs(60)).await, 1, "first interval");
    assert_eq!(
        race(Duration::from_secs(60)).await,
        0,
        "the interval has not passed: nobody counts again"
    );
    // Once the last count is older than the interval, the next race has one winner again.
    // (A count is read as a BIGINT on both databases.)
    let old_enough = match backend {
        Backend::Postgres => {
            "SELECT COUNT(*) FROM job_queue_gauge_refresh \
             WHERE refreshed_at < job_queue_now() - INTERVAL '500 milliseconds'"
        }
        _ => {
            "SELECT COUNT(*) FROM job_queue_gauge_refresh \
             WHERE refreshed_at < UTC_TIMESTAMP(6) - INTERVAL 500000 MICROSECOND"
        }
    };
    let first = queues[0].clone();
    tests::wait_for(
        "the turn to be half a second old",
        Duration::from_secs(10),
        || {
            let queue = first.clone();
            async move { (tests::sql_i64(&queue, old_enough, &[]).await == 1).then_some(()) }
        },
    )
    .await;
    assert_eq!(race(Duration::from_millis(500)).await, 1, "next interval");
}

tests::on_every_backend!(one_of_many_workers_takes_the_turn_to_count_the_gauges);

#[tokio::test(flavor = "multi_thread")]
async fn blocked_jobs_are_counted_and_published() {
    let recorder = PrometheusBuilder::new().build_recorder();
    let metrics = recorder.handle();
    metrics::set_global_recorder(recorder).expect("the only recorder of this test binary");
    let queue = fresh_queue("queue_gauges_blocked").await;
    // Jobs of a queue no worker serves: two wait for a slot of their limit, one is ready.
    for (key, status) in [("b-0", "blocked"), ("b-1", "blocked"), ("r-0", "ready")] {
        sqlx::query(
            "INSERT INTO job_queue (queue, kind, task_key, payload, status) \
             VALUES ('gauged', 'k', ?, '{}', ?)",
        )
        .bind(key)
        .bind(status)
        .execute(queue.mysql_pool().unwrap())
        .await
        .unwrap();
    }
    assert_eq!(count_status(&queue, JobStatus::Blocked).await, 2);

    let (handle, task) = start(quick_worker(&queue).queues(["idle"]).build().unwrap());
    let shown = wait_for("the gauges", Duration::from_secs(30), || async {
        let text = metrics.render();
        text.contains("jobqueue_queue_jobs{queue=\"gauged\"")
            .then_some(text)
    })
    .await;
    stop(&handle, task).await;
    for line in [
        "jobqueue_queue_jobs{queue=\"gauged\",status=\"blocked\"} 2",
        "jobqueue_queue_jobs{queue=\"gauged\",status=\"waiting\"} 1",
    ] {
        assert!(shown.lines().any(|l| l == line), "{line} in {shown}");
    }
    let stored: Vec<(String, u64)> = sqlx::query_as(
        "SELECT CAST(status AS CHAR), jobs FROM job_queue_gauges WHERE queue = 'gauged' \
         ORDER BY status",
    )
    .fetch_all(queue.mysql_pool().unwrap())
    .await
    .unwrap();
    assert_eq!(stored, [("ready".to_owned(), 1), ("blocked".to_owned(), 2)]);
}
