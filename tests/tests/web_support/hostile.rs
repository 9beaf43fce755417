//! The hostile table of the dashboard's bounded-cost tests (`web_bounded.rs`) and its browser
//! test (`web_browser_hostile.rs`), written with plain SQL as a producer in another language
//! or an operator at a console could: huge payloads, JSON the server accepts and this
//! library cannot read, an output and a history that are not JSON, a long error, and
//! 20,000 queues.
#![allow(dead_code, unreachable_pub)]

use jobqueue::Queue;

use crate::web_support::insert_job;

/// The big payloads: 40 JSON arrays of 4 MiB each, built by the server.
pub const BIG_JOBS: usize = 40;
pub const BIG_ARRAY_ITEMS: usize = 2 * 1024 * 1024;

/// Distinct queues, each with one ready job.
pub const QUEUES: usize = 20_000;

/// The hostile jobs' ids.
pub struct Hostile {
    /// `{"n": 1e400}` in the payload of a failed job.
    pub payload: u64,
    /// `[1e400]` in the metadata of a failed job.
    pub metadata: u64,
    /// `1e400` as the progress of a running job.
    pub progress: u64,
    /// Every JSON column out of range at once, on a ready job.
    pub all: u64,
    /// A done job whose output is not JSON.
    pub output: u64,
    /// A failed job whose attempt history is not JSON.
    pub history: u64,
    /// A failed job with the longest error the column holds (64 KiB - 1).
    pub long_error: u64,
    /// A failed job whose payload is 4 MiB (the newest of them).
    pub big: u64,
}

pub async fn seed(queue: &Queue) -> Hostile {
    let pool = queue.mysql_pool().unwrap();
    // 20,000 queues, each with one ready job, in rows of 1,000 per statement.
    for chunk in 0..QUEUES / 1000 {
        let values: Vec<String> = (0..1000)
            .map(|i| {
                let n = chunk * 1000 + i;
                format!("('q{n:05}', 'many', 'many:{n}', '{{}}', 'ready')")
            })
            .collect();
        sqlx::query(&format!(
            "INSERT INTO job_queue (queue, kind, task_key, payload, status) VALUES {}",
            values.join(",")
        ))
        .execute(pool)
        .await
        .expect("insert the queues' jobs");
    }
    let payload = insert_job(
        queue,
        "hostile",
        "poison",
        "poison:payload",
        r#"{"n": 1e400}"#,
        "failed",
        Some("boom"),
    )
    .await;
    let metadata = insert_job(
        queue,
        "hostile",
        "poison",
        "poison:metadata",
        "{}",
        "failed",
        None,
    )
    .await;
    sqlx::query("UPDATE job_queue SET metadata = '[1e400]' WHERE id = ?")
        .bind(metadata)
        .execute(pool)
        .await
        .expect("set the metadata");
    let progress = insert_job(
        queue,
        "hostile",
        "poison",
        "poison:progress",
        "{}",
        "running",
        None,
    )
    .await;
    sqlx::query(
        "UPDATE job_queue SET progress = '1e400', progress_at = UTC_TIMESTAMP(6), \
         lease_owner = 'w', lease_until = UTC_TIMESTAMP(6) + INTERVAL 1 HOUR, attempts = 1 WHERE id = ?",
    )
    .bind(progress)
    .execute(pool)
    .await
    .expect("set the progress");
    let all = insert_job(
        queue,
        "hostile",
        "poison",
        "poison:all",
        "[1e400]",
        "ready",
        None,
    )
    .await;
    sqlx::query(
        "UPDATE job_queue SET metadata = '{\"t\": 1e400}', progress = '[1e400]', \
         progress_at = UTC_TIMESTAMP(6) WHERE id = ?",
    )
    .bind(all)
    .execute(pool)
    .await
    .expect("set every JSON column");
    let output = insert_job(
        queue,
        "hostile",
        "poison",
        "poison:output",
        "{}",
        "done",
        None,
    )
    .await;
    sqlx::query("UPDATE job_queue SET output = 'not json <b>at all</b>' WHERE id = ?")
        .bind(output)
        .execute(pool)
        .await
        .expect("set the output");
    let history = insert_job(
        queue,
        "hostile",
        "poison",
        "poison:history",
        "{}",
        "failed",
        Some("failed"),
    )
    .await;
    sqlx::query("UPDATE job_queue SET attempt_log = 'not a history <i>' WHERE id = ?")
        .bind(history)
        .execute(pool)
        .await
        .expect("set the history");
    let long_error = insert_job(
        queue,
        "hostile",
        "poison",
        "poison:error",
        "{}",
        "failed",
        None,
    )
    .await;
    sqlx::query(
        "UPDATE job_queue SET last_error = CONCAT('<e>', REPEAT('e', 65535 - 4), '!') WHERE id = ?",
    )
    .bind(long_error)
    .execute(pool)
    .await
    .expect("set the long error");
    // The big payloads last: the newest jobs, the first page of the list.
    let mut big = 0;
    for i in 0..BIG_JOBS {
        big = sqlx::query(
            "INSERT INTO job_queue (queue, kind, task_key, payload, status, attempts, last_error, finished_at) \
             VALUES ('big', 'huge', ?, CONCAT('[', REPEAT('0,', ?), '0]'), 'failed', 1, 'too big', UTC_TIMESTAMP(6))",
        )
        .bind(format!("big:{i}"))
        .bind((BIG_ARRAY_ITEMS - 1) as u64)
        .execute(pool)
        .await
        .expect("insert a big job")
        .last_insert_id();
    }
    Hostile {
        payload,
        metadata,
        progress,
        all,
        output,
        history,
        long_error,
        big,
    }
}
