//! The queue gauges are counted by one worker of the fleet per interval: the turn is taken in
//! the database, so any number of workers cost one count per interval.

use std::time::Duration;

use tests::fresh_database;

#[tokio::test(flavor = "multi_thread")]
async fn one_of_many_workers_takes_the_turn_to_count_the_gauges() {
    let url = fresh_database("queue_gauges").await;
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
    let pool = queues[0].pool().clone();
    tests::wait_for(
        "the turn to be half a second old",
        Duration::from_secs(10),
        || {
            let pool = pool.clone();
            async move {
                let age: i64 = sqlx::query_scalar(
                    "SELECT TIMESTAMPDIFF(MICROSECOND, refreshed_at, UTC_TIMESTAMP(6)) \
                 FROM job_queue_gauge_refresh",
                )
                .fetch_one(&pool)
                .await
                .expect("the turn's row");
                (age > 500_000).then_some(())
            }
        },
    )
    .await;
    assert_eq!(race(Duration::from_millis(500)).await, 1, "next interval");
}
