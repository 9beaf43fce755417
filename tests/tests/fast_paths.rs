//! The paths that make the worker and enqueue fast, held to what they must still guarantee:
//! a worker with more than 256 slots fills them in one pass (a claim takes at most 256 jobs
//! per transaction); an idle worker finds a job that another process enqueued within its
//! idle probe's interval, and never claims for jobs of a paused queue; a bulk enqueue that
//! takes its ids from the `INSERT` itself reports the id of every row right, whether the
//! server hands out consecutive ids or not, and with keys already taken in any chunk.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use jobqueue::{job, Data, Enqueued, JobError, JobStatus, Queue, Worker};
use tests::{
    count_status, fresh_database, migrated_queue, row, start, stop, wait_for, wait_status,
};

// ---------------------------------------------------------------------------------------
// 1. More than 256 slots.
// ---------------------------------------------------------------------------------------

/// Holds every job until `parties` jobs run at once.
#[derive(Clone)]
struct Gate(Arc<tokio::sync::Barrier>);

#[job(name = "fast_wide", queue = "fast_wide")]
async fn wide(n: u32, gate: Data<Gate>) -> Result<(), JobError> {
    let _ = n;
    let Gate(barrier) = &*gate;
    barrier.wait().await;
    Ok(())
}

/// 300 jobs that can only finish together need all 300 slots at once. The worker polls
/// only every 120 s, so a worker that claimed 256 and waited for its next poll would not
/// finish them within the test's bound.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_with_300_slots_fills_them_all_in_one_pass() {
    let queue = migrated_queue(&fresh_database("fast_wide").await).await;
    let out = queue
        .enqueue_many((0..300).map(|n| Wide { n }))
        .await
        .expect("enqueue");
    assert_eq!(out.iter().filter(|e| e.is_new()).count(), 300);
    let (handle, task) = start(
        Worker::builder(queue.clone())
            .queues(["fast_wide"])
            .concurrency(300)
            .poll_interval(Duration::from_secs(120), Duration::from_secs(120))
            .idle_probe(None)
            .data(Gate(Arc::new(tokio::sync::Barrier::new(300))))
            .build()
            .expect("build"),
    );
    // Far below the next poll (96 s at the earliest), with room for a busy machine, where
    // writing 300 outcomes has taken over 20 s.
    wait_for("300 jobs done", Duration::from_secs(60), || async {
        (count_status(&queue, JobStatus::Done).await == 300).then_some(())
    })
    .await;
    let metrics = handle.metrics();
    stop(&handle, task).await;
    assert_eq!(metrics.claimed, 300, "each job claimed once");
    assert_eq!(metrics.succeeded, 300);
}

// ---------------------------------------------------------------------------------------
// 2. The idle probe.
// ---------------------------------------------------------------------------------------

#[job(name = "fast_idle", queue = "fast_idle")]
async fn idle_job(n: u32) -> Result<(), JobError> {
    let _ = n;
    Ok(())
}

/// An idle worker that polls with claims only every 10 s starts a job that another
/// process's `Queue` enqueued (no in-process wake-up) within its probe's interval, and
/// claims nothing while its probes see only a ready job in a paused queue.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_worker_finds_a_job_from_elsewhere_at_its_probe_and_skips_paused_queues() {
    let url = fresh_database("fast_idle").await;
    let queue = migrated_queue(&url).await;
    let (handle, task) = start(
        Worker::builder(queue.clone())
            .queues(["fast_idle"])
            .poll_interval(Duration::from_secs(10), Duration::from_secs(10))
            .idle_probe(Some(Duration::from_millis(20)))
            .maintenance(false)
            .build()
            .expect("build"),
    );
    wait_for("the first empty claim", Duration::from_secs(10), || async {
        (handle.metrics().empty_idle >= 1).then_some(())
    })
    .await;
    // Another process: a queue of its own, whose enqueues wake nobody here.
    let elsewhere = Queue::connect(&url).await.expect("second queue");
    let id = elsewhere
        .enqueue(IdleJob { n: 1 })
        .await
        .expect("enqueue")
        .id();
    let done = wait_status(&queue, id, JobStatus::Done, Duration::from_secs(5)).await;
    assert_eq!(done.attempts, 1);

    // Paused: the probe must not see the ready job, so no claim is made for it.
    elsewhere.pause("fast_idle").await.expect("pause");
    let paused = elsewhere
        .enqueue(IdleJob { n: 2 })
        .await
        .expect("enqueue")
        .id();
    let claims = |m: jobqueue::metrics::MetricsSnapshot| m.claimed + m.empty_idle + m.empty_paused;
    let before = handle.metrics();
    // Thirty probes look at the paused queue's ready job: none may lead to a claim.
    wait_for(
        "thirty probes of the paused queue",
        Duration::from_secs(10),
        || async { (handle.metrics().idle_probes >= before.idle_probes + 30).then_some(()) },
    )
    .await;
    let made = claims(handle.metrics()) - claims(before);
    assert!(
        made <= 1,
        "claims while the only ready job was paused: {made}"
    );
    assert_eq!(row(&queue, paused).await.status, JobStatus::Ready);
    elsewhere.resume("fast_idle").await.expect("resume");
    wait_status(&queue, paused, JobStatus::Done, Duration::from_secs(5)).await;
    stop(&handle, task).await;
}

/// The server closes every connection of an idle worker (a `wait_timeout` reached while it
/// was busy, a restart). The probe's kept connection fails once; the probe goes on at once on
/// a new one instead of switching off for its cool-down, and a job enqueued elsewhere still
/// starts within the probe's interval, not at the next 10 s poll.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_probe_whose_connection_was_closed_goes_on_on_a_new_one() {
    let url = fresh_database("fast_idle_closed").await;
    let queue = migrated_queue(&url).await;
    let (handle, task) = start(
        Worker::builder(queue.clone())
            .queues(["fast_idle"])
            .poll_interval(Duration::from_secs(10), Duration::from_secs(10))
            .idle_probe(Some(Duration::from_millis(20)))
            .maintenance(false)
            .build()
            .expect("build"),
    );
    wait_for("five probes", Duration::from_secs(10), || async {
        (handle.metrics().idle_probes >= 5).then_some(())
    })
    .await;
    let outside = sqlx::MySqlPool::connect(&url).await.expect("connect");
    let others: Vec<i64> = sqlx::query_scalar(
        "SELECT ID FROM information_schema.PROCESSLIST \
         WHERE DB = DATABASE() AND ID <> CONNECTION_ID()",
    )
    .fetch_all(&outside)
    .await
    .expect("list sessions");
    assert!(!others.is_empty());
    for id in others {
        // A session may end by itself meanwhile.
        let _ = sqlx::query(&format!("KILL {id}")).execute(&outside).await;
    }
    let before = handle.metrics().idle_probes;
    wait_for(
        "five probes after the connections were closed",
        Duration::from_secs(5),
        || async { (handle.metrics().idle_probes >= before + 5).then_some(()) },
    )
    .await;
    let elsewhere = Queue::connect(&url).await.expect("second queue");
    let id = elsewhere
        .enqueue(IdleJob { n: 3 })
        .await
        .expect("enqueue")
        .id();
    let done = wait_status(&queue, id, JobStatus::Done, Duration::from_secs(5)).await;
    assert_eq!(done.attempts, 1);
    stop(&handle, task).await;
}

#[tokio::test]
async fn the_idle_probe_interval_is_checked() {
    let queue = migrated_queue(&fresh_database("fast_idle_setting").await).await;
    let err = Worker::builder(queue)
        .queues(["fast_idle"])
        .idle_probe(Some(Duration::from_millis(2)))
        .build()
        .expect_err("2 ms is too short");
    let message = err.to_string();
    assert!(
        message.contains("idle probe") && message.contains("at least 10 ms"),
        "{message}"
    );
}

// ---------------------------------------------------------------------------------------
// 3. Bulk enqueue's ids.
// ---------------------------------------------------------------------------------------

#[job(name = "fast_bulk", queue = "fast_bulk", key = "bulk:{n}")]
async fn bulk(n: u32) -> Result<(), JobError> {
    let _ = n;
    Ok(())
}

/// Every `New(id)` names the row that holds its job's key.
async fn assert_ids_match_keys(queue: &Queue, keys: &[u32], out: &[Enqueued]) {
    let rows: HashMap<u64, String> = sqlx::query_as::<_, (u64, Vec<u8>)>(
        "SELECT id, task_key FROM job_queue WHERE kind = 'fast_bulk'",
    )
    .fetch_all(queue.pool())
    .await
    .expect("rows")
    .into_iter()
    .map(|(id, k)| (id, String::from_utf8(k).expect("utf-8 key")))
    .collect();
    assert_eq!(keys.len(), out.len());
    for (n, e) in keys.iter().zip(out) {
        assert_eq!(
            rows.get(&e.id()).map(String::as_str),
            Some(format!("bulk:{n}").as_str()),
            "job {n} reported as {e:?}"
        );
    }
}

/// Four bulk enqueues at once, of three chunks each: every id is right.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_bulk_enqueues_report_the_id_of_every_row() {
    let queue = migrated_queue(&fresh_database("fast_bulk_concurrent").await).await;
    let tasks: Vec<_> = (0..4u32)
        .map(|t| {
            let queue = queue.clone();
            tokio::spawn(async move {
                let keys: Vec<u32> = (0..2_500).map(|i| t * 10_000 + i).collect();
                let out = queue
                    .enqueue_many(keys.iter().map(|&n| Bulk { n }))
                    .await
                    .expect("enqueue_many");
                (keys, out)
            })
        })
        .collect();
    for t in tasks {
        let (keys, out) = t.await.expect("task");
        assert!(
            out.iter().copied().all(Enqueued::is_new),
            "all keys are new"
        );
        assert_ids_match_keys(&queue, &keys, &out).await;
    }
    let total: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM job_queue")
        .fetch_one(queue.pool())
        .await
        .unwrap();
    assert_eq!(total, 10_000);
}

/// A session that hands out every third id (`auto_increment_increment = 3`): the ids of a
/// multi-row `INSERT` are not consecutive, and are read by key instead.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bulk_ids_are_right_when_the_server_skips_ids() {
    let url = fresh_database("fast_bulk_increment").await;
    migrated_queue(&url).await;
    let pool = tests::pool_with_session(&url, 2, "SET SESSION auto_increment_increment = 3").await;
    let queue = Queue::from_pool(pool).await.expect("queue");
    let keys: Vec<u32> = (0..1_500).collect();
    let out = queue
        .enqueue_many(keys.iter().map(|&n| Bulk { n }))
        .await
        .expect("enqueue_many");
    assert!(out.iter().copied().all(Enqueued::is_new));
    assert_ids_match_keys(&queue, &keys, &out).await;
    let gaps: Vec<u64> = out.windows(2).map(|w| w[1].id() - w[0].id()).collect();
    assert!(
        gaps.iter().all(|g| *g == 3),
        "ids three apart: {:?}",
        &gaps[..5]
    );
}

/// Keys already taken in the second of three chunks: the first chunk goes in whole, the
/// second reports each taken key as a duplicate of its holder, the third goes the careful
/// way too; every id is right and nothing is inserted twice.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bulk_enqueue_with_taken_keys_in_a_later_chunk() {
    let queue = migrated_queue(&fresh_database("fast_bulk_taken").await).await;
    let taken: Vec<u32> = (1_000..2_000).filter(|n| n % 3 == 0).collect();
    let first = queue
        .enqueue_many(taken.iter().map(|&n| Bulk { n }))
        .await
        .expect("first enqueue");
    let holders: HashMap<u32, u64> = taken
        .iter()
        .copied()
        .zip(first.iter().copied().map(Enqueued::id))
        .collect();
    let keys: Vec<u32> = (0..2_500).collect();
    let out = queue
        .enqueue_many(keys.iter().map(|&n| Bulk { n }))
        .await
        .expect("second enqueue");
    for (n, e) in keys.iter().zip(&out) {
        match holders.get(n) {
            Some(holder) => assert_eq!(*e, Enqueued::Duplicate(*holder), "job {n}"),
            None => assert!(e.is_new(), "job {n}: {e:?}"),
        }
    }
    assert_ids_match_keys(&queue, &keys, &out).await;
    let total: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM job_queue")
        .fetch_one(queue.pool())
        .await
        .unwrap();
    assert_eq!(total, 2_500, "each key once");
}
