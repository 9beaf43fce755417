//! Bulk enqueue (`Queue::enqueue_many`) against a real server: taking its ids from the
//! `INSERT` itself, it reports the id of every row right, whether the server hands out
//! consecutive ids or not, and with keys already taken in any chunk; a batch larger than the
//! server's `max_allowed_packet` is sent in pieces and stored whole; and the rows, so the
//! claims, keep the caller's order.
//!
//! Every test has its own database and its own job kinds (one registry serves the whole
//! binary). The bulk enqueue's protocol (duplicates inside the batch and of existing rows, in
//! a handful of statements) is in `store_protocol.rs`; its uniqueness races in
//! `lifecycle_enqueue.rs`.

use std::collections::HashMap;

use jobqueue::{job, Backend, Enqueued, JobError, Queue, QueueConfig};
use tests::{
    fresh_database, fresh_queue_on, init_tracing, migrated_queue, on_every_backend, row, sql_i64,
};

/// (id, task_key) of the rows `sql` selects (those two columns), on either database.
async fn ids_and_keys(queue: &Queue, sql: &str) -> Vec<(u64, String)> {
    match queue.backend() {
        Backend::Postgres => sqlx::query_as::<_, (i64, String)>(sql)
            .fetch_all(queue.postgres_pool().unwrap())
            .await
            .expect("rows")
            .into_iter()
            .map(|(id, k)| (id as u64, k))
            .collect(),
        _ => sqlx::query_as::<_, (u64, Vec<u8>)>(sql)
            .fetch_all(queue.mysql_pool().unwrap())
            .await
            .expect("rows")
            .into_iter()
            .map(|(id, k)| (id, String::from_utf8(k).expect("utf-8 key")))
            .collect(),
    }
}

// ---------------------------------------------------------------------------------------
// Bulk enqueue's ids.
// ---------------------------------------------------------------------------------------

#[job(name = "fast_bulk", queue = "fast_bulk", key = "bulk:{n}")]
async fn bulk(n: u32) -> Result<(), JobError> {
    let _ = n;
    Ok(())
}

/// Every `New(id)` names the row that holds its job's key.
async fn assert_ids_match_keys(queue: &Queue, keys: &[u32], out: &[Enqueued]) {
    let rows: HashMap<u64, String> = ids_and_keys(
        queue,
        "SELECT id, task_key FROM job_queue WHERE kind = 'fast_bulk'",
    )
    .await
    .into_iter()
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
async fn concurrent_bulk_enqueues_report_the_id_of_every_row(backend: Backend) {
    let queue = fresh_queue_on(backend, "fast_bulk_concurrent").await;
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
    let total = sql_i64(&queue, "SELECT COUNT(*) FROM job_queue", &[]).await;
    assert_eq!(total, 10_000);
}

/// A session that hands out every third id (`auto_increment_increment = 3`): the ids of a
/// multi-row `INSERT` are not consecutive, and are read by key instead. MySQL only: a
/// PostgreSQL insert returns its ids.
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
async fn bulk_enqueue_with_taken_keys_in_a_later_chunk(backend: Backend) {
    let queue = fresh_queue_on(backend, "fast_bulk_taken").await;
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
            Some(holder) => assert_eq!(e.duplicate_of(), Some(*holder), "job {n}"),
            None => assert!(e.is_new(), "job {n}: {e:?}"),
        }
    }
    assert_ids_match_keys(&queue, &keys, &out).await;
    let total = sql_i64(&queue, "SELECT COUNT(*) FROM job_queue", &[]).await;
    assert_eq!(total, 2_500, "each key once");
}

// ---------------------------------------------------------------------------------------
// A bulk enqueue larger than `max_allowed_packet` succeeds.
// ---------------------------------------------------------------------------------------

#[job(name = "regressions_bulky")]
async fn bulky(n: u32, blob: String) {
    let _ = (n, blob);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bulk_enqueue_larger_than_max_allowed_packet_is_stored_whole() {
    init_tracing();
    let url = fresh_database("regressions_packet").await;
    let probe = Queue::connect(&url).await.unwrap();
    let packet: i64 = sqlx::query_scalar("SELECT CAST(@@max_allowed_packet AS SIGNED)")
        .fetch_one(probe.mysql_pool().unwrap())
        .await
        .unwrap();
    let packet = usize::try_from(packet).unwrap();
    // 300 KiB per job at the usual 16 MiB (about 50 jobs per packet), and payloads adding up
    // to more than twice the packet whatever its size.
    let blob_len = (packet / 50).max(300 * 1024);
    let count = (2 * packet).div_ceil(blob_len) + 10;
    let queue = Queue::connect_with(
        &url,
        QueueConfig::default().max_payload_bytes(blob_len + 1024),
    )
    .await
    .unwrap();
    queue.migrate().await.unwrap();

    let blob = "x".repeat(blob_len);
    let outcomes = queue
        .enqueue_many((0..count as u32).map(|n| Bulky {
            n,
            blob: blob.clone(),
        }))
        .await
        .unwrap_or_else(|e| {
            panic!("enqueue of {count} jobs of {blob_len} bytes (packet {packet}) failed: {e}")
        });
    assert_eq!(outcomes.len(), count);
    assert!(outcomes.iter().all(|o| o.is_new()));

    let (rows, bytes): (i64, i64) = sqlx::query_as(
        "SELECT COUNT(*), CAST(SUM(LENGTH(payload)) AS SIGNED) FROM job_queue WHERE status = 'ready'",
    )
    .fetch_one(queue.mysql_pool().unwrap())
    .await
    .unwrap();
    assert_eq!(rows, count as i64, "every job is stored");
    assert!(
        bytes as usize > 2 * packet,
        "{bytes} bytes of payload stored, packet {packet}"
    );
    for o in [outcomes[0], outcomes[count - 1]] {
        let r = row(&queue, o.id()).await;
        assert_eq!(r.payload["blob"].as_str().map(str::len), Some(blob_len));
    }
}

// ---------------------------------------------------------------------------------------
// A bulk enqueue keeps the caller's order.
// ---------------------------------------------------------------------------------------

#[job(name = "regressions_ordered", key = "regressions_ordered:{label}")]
async fn ordered(label: String) {
    let _ = label;
}

async fn a_bulk_enqueue_keeps_the_callers_order(backend: Backend) {
    init_tracing();
    let queue = fresh_queue_on(backend, "regressions_order").await;
    // Keys in descending order, so that an insert in key order would reverse the batch;
    // 1100 jobs take several statements.
    let labels: Vec<String> = (0..1100).rev().map(|n| format!("{n:05}")).collect();
    let outcomes = queue
        .enqueue_many(labels.iter().map(|label| Ordered {
            label: label.clone(),
        }))
        .await
        .unwrap();
    assert!(outcomes.iter().all(|o| o.is_new()));
    let ids: Vec<u64> = outcomes.iter().map(|o| o.id()).collect();
    assert!(
        ids.windows(2).all(|w| w[0] < w[1]),
        "ids follow the input order: {:?}",
        &ids[..10]
    );

    let keys: Vec<String> = ids_and_keys(&queue, "SELECT id, task_key FROM job_queue ORDER BY id")
        .await
        .into_iter()
        .map(|(_, k)| k)
        .collect();
    let expected: Vec<String> = labels
        .iter()
        .map(|l| format!("regressions_ordered:{l}"))
        .collect();
    assert_eq!(
        keys, expected,
        "rows, and so claims, follow the input order"
    );
}

on_every_backend!(
    concurrent_bulk_enqueues_report_the_id_of_every_row,
    bulk_enqueue_with_taken_keys_in_a_later_chunk,
    a_bulk_enqueue_keeps_the_callers_order,
);
