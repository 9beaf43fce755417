//! The queue core against a real server: claims under contention, SKIP LOCKED, the indexes
//! behind every maintenance query, fencing, reclaim and promotion, idempotent enqueue, and
//! the errors bad input gets.
//!
//! Rows are driven through the store's protocol steps (the runtime's `__store` test door)
//! with arbitrary owner names; no worker runs here.

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;
use std::time::{Duration, Instant};

use jobqueue::admin::CancelOutcome;
use jobqueue::testing::TestServer;
use jobqueue::{
    EnqueueOptions, Enqueued, Error, Job, JobContext, JobError, JobOptions, JobStatus, Queue,
    QueueConfig,
};
use jobqueue_runtime::__store::{Finish, Reclaimed};
use serde::{Deserialize, Serialize, Serializer};
use sqlx::mysql::{MySqlConnection, MySqlPoolOptions, MySqlRow};
use sqlx::types::chrono::NaiveDateTime;
use sqlx::{Connection, Executor, MySqlPool, Row};
use tests::{fresh_database, fresh_queue, row as job, LogCapture};

// ---------------------------------------------------------------------------------------
// Job kinds
// ---------------------------------------------------------------------------------------

/// The ordinary job of these tests; its derived key depends on `n` only.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct Task {
    n: u64,
}

impl Job for Task {
    const KIND: &'static str = "store_task";
    const OPTIONS: JobOptions = JobOptions::DEFAULT.max_attempts(3).priority(3);

    async fn run(self, _ctx: JobContext) -> Result<(), JobError> {
        Ok(())
    }
}

jobqueue::register!(Task);

/// Arguments with a map keyed by a tuple: JSON object keys must be strings.
#[derive(Debug, Serialize, Deserialize)]
struct TupleKeyed {
    weights: HashMap<(u32, u32), u32>,
}

impl Job for TupleKeyed {
    const KIND: &'static str = "store_tuple_keyed";
    const OPTIONS: JobOptions = JobOptions::DEFAULT;

    async fn run(self, _ctx: JobContext) -> Result<(), JobError> {
        Ok(())
    }
}

jobqueue::register!(TupleKeyed);

/// Arguments whose `Serialize` impl refuses.
#[derive(Debug, Deserialize)]
struct Unserializable {
    #[allow(dead_code)]
    path: String,
}

impl Serialize for Unserializable {
    fn serialize<S: Serializer>(&self, _serializer: S) -> Result<S::Ok, S::Error> {
        Err(serde::ser::Error::custom(
            "an open file handle cannot be serialized",
        ))
    }
}

impl Job for Unserializable {
    const KIND: &'static str = "store_unserializable";
    const OPTIONS: JobOptions = JobOptions::DEFAULT;

    async fn run(self, _ctx: JobContext) -> Result<(), JobError> {
        Ok(())
    }
}

jobqueue::register!(Unserializable);

/// Arguments of any size.
#[derive(Debug, Serialize, Deserialize)]
struct Blob {
    text: String,
}

impl Job for Blob {
    const KIND: &'static str = "store_blob";
    const OPTIONS: JobOptions = JobOptions::DEFAULT;

    async fn run(self, _ctx: JobContext) -> Result<(), JobError> {
        Ok(())
    }
}

jobqueue::register!(Blob);

// ---------------------------------------------------------------------------------------
// Helpers
// ---------------------------------------------------------------------------------------

fn keyed(key: &str) -> EnqueueOptions {
    EnqueueOptions::default().key(key)
}

async fn count(pool: &MySqlPool, sql: &str) -> i64 {
    sqlx::query_scalar(sql)
        .fetch_one(pool)
        .await
        .unwrap_or_else(|e| panic!("{sql}: {e}"))
}

/// Makes a running job's lease run out now (test setup: no waiting for a real lease).
async fn expire_lease(queue: &Queue, id: u64) {
    let matched = sqlx::query(
        "UPDATE job_queue SET lease_until = UTC_TIMESTAMP(6) - INTERVAL 1 SECOND WHERE id = ?",
    )
    .bind(id)
    .execute(queue.pool())
    .await
    .expect("expire lease")
    .rows_affected();
    assert_eq!(matched, 1, "job {id} to expire");
}

/// A text column of a raw row (EXPLAIN output and binary-collated columns come back as
/// bytes on some servers).
fn text_col(row: &MySqlRow, name: &str) -> Option<String> {
    match row.try_get::<Option<String>, _>(name) {
        Ok(s) => s,
        Err(_) => row
            .try_get::<Option<Vec<u8>>, _>(name)
            .unwrap_or_else(|e| panic!("column {name}: {e}"))
            .map(|b| String::from_utf8_lossy(&b).into_owned()),
    }
}

// ---------------------------------------------------------------------------------------
// 1. Same-row contention
// ---------------------------------------------------------------------------------------

/// Three claimers racing over ten ready jobs get disjoint sets that cover all ten, and each
/// row records the claimer that got it.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_claimers_get_disjoint_jobs() {
    let queue = fresh_queue("store_contention").await;
    let mut all = BTreeSet::new();
    for n in 0..10 {
        let outcome = queue.enqueue(Task { n }).await.expect("enqueue");
        assert!(outcome.is_new(), "{outcome:?}");
        all.insert(outcome.id());
    }

    let start = Arc::new(tokio::sync::Barrier::new(3));
    let mut claimers = Vec::new();
    for i in 0..3 {
        let store = queue.store();
        let pool = queue.pool().clone();
        let start = start.clone();
        claimers.push(tokio::spawn(async move {
            let owner = format!("worker-{i}");
            let mut got = Vec::new();
            start.wait().await;
            loop {
                let claimed = store.claim("default", &owner, 4).await.expect("claim");
                assert!(claimed.len() <= 4, "{owner} claimed {}", claimed.len());
                if claimed.is_empty() {
                    // SKIP LOCKED: an empty claim may only mean that the rest is locked by
                    // the others right now. Stop when no ready row is left at all.
                    let ready = count(
                        &pool,
                        "SELECT COUNT(*) FROM job_queue WHERE status = 'ready'",
                    )
                    .await;
                    if ready == 0 {
                        break;
                    }
                    tokio::task::yield_now().await;
                    continue;
                }
                for c in claimed {
                    assert_eq!(c.attempt, 1, "job {} claimed twice", c.id);
                    got.push(c.id);
                }
            }
            (owner, got)
        }));
    }
    let mut results = Vec::new();
    for c in claimers {
        results.push(c.await.expect("claimer task"));
    }

    let total: usize = results.iter().map(|(_, got)| got.len()).sum();
    assert_eq!(total, 10, "each job claimed exactly once: {results:?}");
    let sets: Vec<BTreeSet<u64>> = results
        .iter()
        .map(|(_, got)| got.iter().copied().collect())
        .collect();
    for (i, a) in sets.iter().enumerate() {
        assert_eq!(a.len(), results[i].1.len(), "duplicates within one claimer");
        for b in &sets[i + 1..] {
            assert!(
                a.is_disjoint(b),
                "two claimers got the same job: {results:?}"
            );
        }
    }
    let union: BTreeSet<u64> = sets.iter().flatten().copied().collect();
    assert_eq!(union, all, "the claims cover every job");

    for (owner, got) in &results {
        for &id in got {
            let row = job(&queue, id).await;
            assert_eq!(row.status, JobStatus::Running, "job {id}");
            assert_eq!(row.lease_owner.as_deref(), Some(owner.as_str()), "job {id}");
            assert_eq!(row.attempts, 1, "job {id}");
            assert!(row.lease_until.is_some(), "job {id} has a lease");
        }
    }
    assert_eq!(
        queue.counts(None).await.expect("counts"),
        vec![(JobStatus::Running, 10)]
    );
}

// ---------------------------------------------------------------------------------------
// 2. SKIP LOCKED
// ---------------------------------------------------------------------------------------

/// A row another transaction holds is skipped at once, never waited for; it is claimable
/// once that transaction ends.
#[tokio::test(flavor = "multi_thread")]
async fn claim_skips_a_locked_row_without_waiting() {
    let url = fresh_database("store_skip_locked").await;
    // A claim that waited for the lock would fail after one second (and be retried), so a
    // prompt answer proves it did not wait. Session-level: no other test is affected.
    let pool = tests::pool_with_session(&url, 4, "SET SESSION innodb_lock_wait_timeout = 1").await;
    let queue = Queue::from_pool(pool).await.expect("queue");
    queue.migrate().await.expect("migrate");
    let wait_timeout: u64 = sqlx::query_scalar("SELECT @@SESSION.innodb_lock_wait_timeout")
        .fetch_one(queue.pool())
        .await
        .expect("read timeout");
    assert_eq!(
        wait_timeout, 1,
        "the queue's sessions give up on a lock after 1 s"
    );

    let mut ids = Vec::new();
    for n in 0..3 {
        ids.push(queue.enqueue(Task { n }).await.expect("enqueue").id());
    }
    // The first row in claim order (same priority, lowest id), locked by someone else.
    let mut holder = MySqlConnection::connect(&url).await.expect("holder");
    let mut tx = holder.begin().await.expect("begin");
    let locked: u64 = sqlx::query_scalar("SELECT id FROM job_queue WHERE id = ? FOR UPDATE")
        .bind(ids[0])
        .fetch_one(&mut *tx)
        .await
        .expect("lock the row");
    assert_eq!(locked, ids[0]);

    // Whether a claim waited is judged by its lock wait timeout, not by a stopwatch: a
    // claim that waited for the held row would have hit it and been retried.
    let store = queue.store();
    let began = Instant::now();
    let claimed = store.claim("default", "worker-a", 10).await.expect("claim");
    println!("the claim beside a locked row took {:?}", began.elapsed());
    let got: Vec<u64> = claimed.iter().map(|c| c.id).collect();
    assert_eq!(got, ids[1..], "the unlocked rows, and never the locked one");
    assert_eq!(
        queue.metrics().conflict_retries,
        0,
        "no lock wait timeout was retried: the claim did not wait for the locked row"
    );
    // While the lock is held, a claim finds nothing, also without waiting.
    let again = store.claim("default", "worker-a", 10).await.expect("claim");
    assert!(again.is_empty(), "{again:?}");
    assert_eq!(
        queue.metrics().conflict_retries,
        0,
        "no lock wait timeout was retried: the second claim did not wait either"
    );
    assert_eq!(job(&queue, ids[0]).await.status, JobStatus::Ready);

    tx.commit().await.expect("release");
    let last = store.claim("default", "worker-b", 10).await.expect("claim");
    let got: Vec<u64> = last.iter().map(|c| c.id).collect();
    assert_eq!(got, vec![ids[0]], "the formerly locked row");
    let row = job(&queue, ids[0]).await;
    assert_eq!(row.status, JobStatus::Running);
    assert_eq!(row.lease_owner.as_deref(), Some("worker-b"));
}

// ---------------------------------------------------------------------------------------
// 3. EXPLAIN of the claim, promote, reclaim and prune SELECTs
// ---------------------------------------------------------------------------------------

// The statements come from the store itself, so the EXPLAIN test checks the SQL the runtime runs.
use jobqueue_runtime::__store::statements::{
    complete_in_sql, key_history_sql, release_sql, ATTEMPT_LOG_SELECT, BLOCKED_IN_QUEUE,
    BRING_FORWARD_SELECT, CLAIM_SELECT, CONCURRENCY_KEY_OF_JOB, OUTPUT_AFTER_COMMIT, OUTPUT_SELECT,
    PROGRESS_UPDATE, PROMOTE_PROBE, PROMOTE_SELECT, PRUNE_SELECT, RECLAIM_SELECT,
};
use jobqueue_runtime::__store::statements::{ready_probe_sql, COUNT_GAUGES};

/// One row of an `EXPLAIN`.
#[derive(Debug)]
struct PlanRow {
    table: String,
    access: String,
    key: Option<String>,
    #[allow(dead_code)] // shown in failure messages
    key_len: Option<String>,
    key_ref: Option<String>,
    rows: u64,
    extra: String,
}

async fn explain(pool: &MySqlPool, sql: &str, binds: &[&str]) -> Vec<PlanRow> {
    let explain = format!("EXPLAIN {sql}");
    let mut q = sqlx::query(&explain);
    for b in binds {
        q = q.bind(*b);
    }
    let rows = q
        .fetch_all(pool)
        .await
        .unwrap_or_else(|e| panic!("{explain}: {e}"));
    rows.iter()
        .map(|r| PlanRow {
            table: text_col(r, "table").unwrap_or_default(),
            access: text_col(r, "type").unwrap_or_default(),
            key: text_col(r, "key"),
            key_len: text_col(r, "key_len"),
            key_ref: text_col(r, "ref"),
            rows: r
                .try_get::<Option<u64>, _>("rows")
                .ok()
                .flatten()
                .or_else(|| text_col(r, "rows").and_then(|s| s.parse().ok()))
                .unwrap_or(0),
            extra: text_col(r, "Extra").unwrap_or_default(),
        })
        .collect()
}

/// How a plan must reach `job_queue`.
enum Access {
    /// Equality lookups on this many leading index columns.
    Ref(usize),
    /// A range of the index.
    Range,
}

/// Checks the plan of `sql` reads `job_queue` through `index`, in index order: no filesort,
/// no temporary table, no full scan, and only a part of the table.
async fn assert_plan(
    pool: &MySqlPool,
    what: &str,
    sql: &str,
    binds: &[&str],
    index: &str,
    access: Access,
) {
    let total = count(pool, "SELECT COUNT(*) FROM job_queue").await as u64;
    let plan = explain(pool, sql, binds).await;
    let main = plan
        .iter()
        .find(|row| row.table == "job_queue")
        .unwrap_or_else(|| panic!("{what}: no plan row for job_queue: {plan:#?}"));
    assert_eq!(
        main.key.as_deref(),
        Some(index),
        "{what} uses {index}: {plan:#?}"
    );
    match access {
        Access::Ref(columns) => {
            assert_eq!(main.access, "ref", "{what}: {plan:#?}");
            let consts = main.key_ref.as_deref().unwrap_or("").split(',').count();
            assert_eq!(
                consts, columns,
                "{what} looks up {columns} leading columns of {index}: {plan:#?}"
            );
        }
        Access::Range => {
            assert_eq!(main.access, "range", "{what}: {plan:#?}");
            assert!(
                main.rows < total / 2,
                "{what} expects to read {} of {total} rows: {plan:#?}",
                main.rows
            );
        }
    }
    for row in &plan {
        assert_ne!(row.access, "ALL", "{what}: full scan: {plan:#?}");
        assert!(
            !row.extra.contains("filesort") && !row.extra.contains("temporary"),
            "{what} needs a sort: {plan:#?}"
        );
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn maintenance_queries_use_their_indexes() {
    let queue = fresh_queue("store_explain").await;
    // 3,600 jobs over three queues and four priorities...
    let mut tx = queue.pool().begin().await.expect("begin");
    let mut n = 0;
    for q in ["default", "emails", "exports"] {
        for priority in [-5i16, 0, 3, 10] {
            let jobs: Vec<Task> = (n..n + 300).map(|n| Task { n }).collect();
            n += 300;
            let options = EnqueueOptions::default().queue(q).priority(priority);
            let outcomes = queue
                .enqueue_many_in(&mut tx, jobs, options)
                .await
                .expect("enqueue");
            assert!(outcomes.iter().all(|o| o.is_new()));
        }
    }
    tx.commit().await.expect("commit");
    // ...spread over every status, with run_at and lease_until on both sides of now.
    sqlx::query(
        "UPDATE job_queue SET \
           status = ELT(1 + id % 6, 'scheduled', 'ready', 'running', 'done', 'failed', 'cancelled'), \
           run_at = UTC_TIMESTAMP(6) + INTERVAL (id % 120) MINUTE - INTERVAL 60 MINUTE, \
           lease_owner = IF(id % 6 = 2, CONCAT('worker-', id % 7), NULL), \
           lease_until = IF(id % 6 = 2, UTC_TIMESTAMP(6) + INTERVAL (id % 60) SECOND - INTERVAL 30 SECOND, NULL), \
           attempts = IF(id % 6 IN (0, 1), 0, 1), \
           finished_at = IF(id % 6 >= 3, UTC_TIMESTAMP(6), NULL)",
    )
    .execute(queue.pool())
    .await
    .expect("mix statuses");
    sqlx::query("ANALYZE TABLE job_queue")
        .execute(queue.pool())
        .await
        .expect("analyze");
    let statuses = queue.counts(None).await.expect("counts");
    assert_eq!(statuses.len(), 6, "every status is present: {statuses:?}");

    let pool = queue.pool();
    // A job's history and output: one row, by primary key.
    for (what, sql) in [
        ("attempt history", ATTEMPT_LOG_SELECT),
        ("output", OUTPUT_SELECT),
    ] {
        let plan = explain(pool, sql, &["1000"]).await;
        assert_eq!(plan.len(), 1, "{what}: {plan:#?}");
        assert_eq!(plan[0].key.as_deref(), Some("PRIMARY"), "{what}: {plan:#?}");
        assert_eq!(plan[0].access, "const", "{what}: {plan:#?}");
    }
    assert_plan(
        pool,
        "claim",
        CLAIM_SELECT,
        &["default", "default", "10"],
        "job_queue_claim",
        Access::Ref(2),
    )
    .await;
    assert_plan(
        pool,
        "idle probe",
        &ready_probe_sql(2),
        &["default", "default", "other", "other"],
        "job_queue_claim",
        Access::Ref(2),
    )
    .await;
    assert_plan(
        pool,
        "promote",
        PROMOTE_SELECT,
        &["100"],
        "job_queue_status_at",
        Access::Range,
    )
    .await;
    assert_plan(
        pool,
        "promote probe",
        PROMOTE_PROBE,
        &[],
        "job_queue_status_at",
        Access::Range,
    )
    .await;
    assert_plan(
        pool,
        "reclaim",
        RECLAIM_SELECT,
        &["100"],
        "job_queue_status_at",
        Access::Range,
    )
    .await;
    assert_plan(
        pool,
        "prune",
        PRUNE_SELECT,
        &["done", "3600000000", "1000"],
        "job_queue_status_at",
        Access::Range,
    )
    .await;
    // The gauges' count reads the waiting, running and failed rows' range of the status-time
    // index, never the finished rows; it groups its few result rows in a temporary table.
    let plan = explain(pool, COUNT_GAUGES, &[]).await;
    assert!(
        plan.iter().any(|row| row.table == "job_queue"
            && row.key.as_deref() == Some("job_queue_status_at")
            && row.access == "range"),
        "gauges: {plan:#?}"
    );
    // A job's completion in its own transaction: one row, by primary key, so that it locks
    // nothing else.
    assert_plan(
        pool,
        "complete in a transaction",
        &complete_in_sql(),
        &["7", "worker-0", "1"],
        "PRIMARY",
        Access::Range,
    )
    .await;
    // `jobqueue::testing::drain` moving time forward in a test database.
    assert_plan(
        pool,
        "bring forward",
        BRING_FORWARD_SELECT,
        &["emails", "500"],
        "job_queue_claim",
        Access::Ref(2),
    )
    .await;
    // The jobs a drain left blocked in a queue.
    assert_plan(
        pool,
        "blocked in queue",
        BLOCKED_IN_QUEUE,
        &["emails", "5"],
        "job_queue_claim",
        Access::Ref(2),
    )
    .await;
    // The older jobs of a key: the released range of its prefix, newest first.
    assert_plan(
        pool,
        "jobs of a key",
        &key_history_sql(),
        &["sync:1\u{0}", "sync:1\u{1}", "sync:1", "10"],
        "job_queue_task_key",
        Access::Range,
    )
    .await;
    // The release of a key whose holder no longer blocks it: the holder, by its key.
    // (Of a key that exists: MySQL plans no index for a key that matches no row.)
    let some_key: String = sqlx::query_scalar("SELECT CAST(MAX(task_key) AS CHAR) FROM job_queue")
        .fetch_one(pool)
        .await
        .expect("a key");
    let plan = explain(pool, &release_sql(), &[&some_key]).await;
    assert!(
        plan.iter().any(|row| row.table == "job_queue"
            && row.key.as_deref() == Some("job_queue_task_key")
            && row.rows <= 1),
        "the release reads one row by its key: {plan:#?}"
    );
    // A running job's progress: one row by its id, through the primary key or the
    // (status, id) index, which the optimizer may equally pick for `status = ? AND id = ?`.
    let plan = explain(pool, PROGRESS_UPDATE, &["{}", "5", "worker-1", "1"]).await;
    assert!(
        plan.iter().any(|row| row.table == "job_queue"
            && matches!(
                row.key.as_deref(),
                Some("PRIMARY" | "job_queue_list_status")
            )
            && row.rows <= 1),
        "progress write reads one row by id: {plan:#?}"
    );
    // After a completion in the job's own transaction: its output, and its concurrency key
    // (to wake the key's next job), each one row by its id (through the primary key or,
    // for `status = 'done' AND id = ?`, the (status, id) index).
    for (what, sql, binds) in [
        (
            "output after the commit",
            OUTPUT_AFTER_COMMIT,
            &["{}", "5", "1"][..],
        ),
        (
            "concurrency key of a job",
            CONCURRENCY_KEY_OF_JOB,
            &["5"][..],
        ),
    ] {
        let plan = explain(pool, sql, binds).await;
        assert!(
            plan.iter().any(|row| row.table == "job_queue"
                && matches!(
                    row.key.as_deref(),
                    Some("PRIMARY" | "job_queue_list_status")
                )
                && row.rows <= 1),
            "{what} reads one row by id: {plan:#?}"
        );
    }
}

/// Every status waits on one time (a scheduled job on `run_at`, a running one on
/// `lease_until`, a finished one on `finished_at`), and the table keeps those times in one
/// computed column under one index: a status change rewrites three secondary index entries
/// (the claim, the status time, the status list), not five.
#[tokio::test(flavor = "multi_thread")]
async fn the_time_a_status_waits_on_is_one_column_under_one_index() {
    let queue = fresh_queue("store_status_at").await;
    let jobs: Vec<Task> = (0..60).map(|n| Task { n }).collect();
    queue.enqueue_many(jobs).await.expect("enqueue");
    sqlx::query(
        "UPDATE job_queue SET \
           status = ELT(1 + id % 7, 'scheduled', 'ready', 'running', 'done', 'failed', 'cancelled', 'blocked'), \
           run_at = UTC_TIMESTAMP(6) + INTERVAL id MINUTE, \
           lease_until = IF(id % 7 = 2, UTC_TIMESTAMP(6) + INTERVAL id SECOND, NULL), \
           finished_at = IF(id % 7 BETWEEN 3 AND 5, UTC_TIMESTAMP(6) - INTERVAL id SECOND, NULL)",
    )
    .execute(queue.pool())
    .await
    .expect("mix statuses");
    let pool = queue.pool();
    for (statuses, column) in [
        ("'scheduled', 'ready', 'blocked'", "run_at"),
        ("'running'", "lease_until"),
        ("'done', 'failed', 'cancelled'", "finished_at"),
    ] {
        let rows = count(
            pool,
            &format!("SELECT COUNT(*) FROM job_queue WHERE status IN ({statuses})"),
        )
        .await;
        let matching = count(
            pool,
            &format!(
                "SELECT COUNT(*) FROM job_queue WHERE status IN ({statuses}) \
                 AND status_at = {column}"
            ),
        )
        .await;
        assert!(rows > 0, "the mix has {statuses} rows");
        assert_eq!(
            matching, rows,
            "status_at of {statuses} rows is their {column}"
        );
    }
    let indexes: BTreeSet<String> = sqlx::query(
        "SELECT DISTINCT INDEX_NAME FROM information_schema.STATISTICS \
         WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = 'job_queue'",
    )
    .fetch_all(pool)
    .await
    .expect("indexes")
    .iter()
    .map(|r| text_col(r, "INDEX_NAME").expect("name"))
    .collect();
    let expected: BTreeSet<String> = [
        "PRIMARY",
        "job_queue_task_key",
        "job_queue_claim",
        "job_queue_status_at",
        "job_queue_list_status",
        "job_queue_list_queue",
        "job_queue_list_kind",
    ]
    .into_iter()
    .map(String::from)
    .collect();
    assert_eq!(indexes, expected, "the job table's indexes");
    let with_status: i64 = count(
        pool,
        "SELECT COUNT(DISTINCT INDEX_NAME) FROM information_schema.STATISTICS \
         WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = 'job_queue' AND COLUMN_NAME = 'status'",
    )
    .await;
    assert_eq!(with_status, 3, "indexes a status change rewrites");
}

/// The limits' statements on their side tables: a key's slots and blocked jobs are found
/// by the key (a prefix of the primary key), a claim's slots by the holder index; none
/// scans a table or sorts.
#[tokio::test(flavor = "multi_thread")]
async fn limit_statements_use_their_indexes() {
    use jobqueue_runtime::__store::statements::{
        lock_free_slots_sql, BLOCKED_DELETE_JOB, BLOCKED_SELECT, FREE_CONCURRENCY_SLOT,
        FREE_RATE_SLOT, ORPHAN_SLOTS, SLOT_OF_CLAIM, SLOT_RELEASE, WAKE_SCAN,
    };
    let queue = fresh_queue("store_explain_limits").await;
    let pool = queue.pool();
    // 500 keys of 8 slots, half of them held; 500 keys with 10 blocked jobs each.
    sqlx::query(
        "INSERT INTO job_queue_slot (slot_key, slot_no, job_id, attempt) \
         WITH RECURSIVE k (i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM k WHERE i < 499), \
           s (j) AS (SELECT 0 UNION ALL SELECT j + 1 FROM s WHERE j < 7) \
         SELECT CONCAT('c:key-', i), j, IF(j % 2 = 0, i * 8 + j, NULL), IF(j % 2 = 0, 1, NULL) FROM k, s",
    )
    .execute(pool)
    .await
    .expect("fill slots");
    sqlx::query(
        "INSERT INTO job_queue_blocked (slot_key, priority, job_id) \
         WITH RECURSIVE k (i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM k WHERE i < 499), \
           s (j) AS (SELECT 0 UNION ALL SELECT j + 1 FROM s WHERE j < 9) \
         SELECT CONCAT('c:key-', i), j % 3, i * 10 + j FROM k, s",
    )
    .execute(pool)
    .await
    .expect("fill blocked");
    for table in ["job_queue_slot", "job_queue_blocked"] {
        sqlx::query(&format!("ANALYZE TABLE {table}"))
            .execute(pool)
            .await
            .expect("analyze");
    }
    let lock_slots = lock_free_slots_sql(3);
    let cases: [(&str, &str, &[&str], &str, &str); 9] = [
        (
            "lock of the free slots a claim takes",
            &lock_slots,
            &["c:key-7", "1", "c:key-9", "3", "c:key-9", "5"],
            "job_queue_slot",
            "PRIMARY",
        ),
        (
            "free concurrency slot",
            FREE_CONCURRENCY_SLOT,
            &["c:key-7", "8"],
            "job_queue_slot",
            "PRIMARY",
        ),
        (
            "free rate slot",
            FREE_RATE_SLOT,
            &["c:key-7", "8"],
            "job_queue_slot",
            "PRIMARY",
        ),
        (
            "blocked jobs of a key",
            BLOCKED_SELECT,
            &["c:key-7", "1"],
            "job_queue_blocked",
            "PRIMARY",
        ),
        (
            "orphaned slots",
            ORPHAN_SLOTS,
            &[],
            "s",
            "job_queue_slot_holder",
        ),
        ("keys to wake", WAKE_SCAN, &[""], "s", "PRIMARY"),
        // A completion in the job's own transaction finds its slot without a lock, then
        // frees it by primary key.
        (
            "slot of a claim",
            SLOT_OF_CLAIM,
            &["16", "1"],
            "job_queue_slot",
            "job_queue_slot_holder",
        ),
        (
            "release of one slot",
            SLOT_RELEASE,
            &["c:key-2", "0", "16", "1"],
            "job_queue_slot",
            "PRIMARY",
        ),
        (
            "the waiting row of a cancelled job",
            BLOCKED_DELETE_JOB,
            &["7"],
            "job_queue_blocked",
            "job_queue_blocked_job",
        ),
    ];
    for (what, sql, binds, table, index) in cases {
        let plan = explain(pool, sql, binds).await;
        let row = plan
            .iter()
            .find(|r| r.table == table)
            .unwrap_or_else(|| panic!("{what}: no plan row for {table}: {plan:#?}"));
        assert_eq!(row.key.as_deref(), Some(index), "{what}: {plan:#?}");
        for r in plan.iter().filter(|r| !r.table.starts_with('<')) {
            assert_ne!(r.access, "ALL", "{what}: full scan: {plan:#?}");
            assert!(!r.extra.contains("filesort"), "{what} sorts: {plan:#?}");
        }
    }
    // The claim read of the job table is the one above; the job rows it joins are read
    // by primary key.
    let plan = explain(pool, ORPHAN_SLOTS, &[]).await;
    let jobs = plan.iter().find(|r| r.table == "j").expect("the job table");
    assert_eq!(
        (jobs.access.as_str(), jobs.key.as_deref()),
        ("eq_ref", Some("PRIMARY")),
        "{plan:#?}"
    );
}

// ---------------------------------------------------------------------------------------
// 4. Fencing
// ---------------------------------------------------------------------------------------

/// After its lease was taken back and the job claimed again, the first owner's writes all
/// match nothing and change nothing; the new owner's work is recorded.
#[tokio::test(flavor = "multi_thread")]
async fn a_lost_lease_writes_nothing() {
    let queue = fresh_queue("store_fencing").await;
    let store = queue.store();
    let id = queue.enqueue(Task { n: 1 }).await.expect("enqueue").id();

    let a = store.claim("default", "worker-a", 1).await.expect("claim");
    assert_eq!((a.len(), a[0].id, a[0].attempt), (1, id, 1));
    expire_lease(&queue, id).await;
    let reclaimed = store.reclaim(10).await.expect("reclaim");
    assert_eq!(reclaimed.ready, vec![(id, 1, "worker-a".to_owned())]);
    assert!(reclaimed.failed.is_empty() && reclaimed.cancelled.is_empty());
    let row = job(&queue, id).await;
    assert_eq!(row.status, JobStatus::Ready);
    assert_eq!(row.attempts, 1, "a reclaim keeps the attempt count");
    assert_eq!(row.lease_owner, None);

    let b = store.claim("default", "worker-b", 1).await.expect("claim");
    assert_eq!((b.len(), b[0].id, b[0].attempt), (1, id, 2));
    let before = job(&queue, id).await;
    assert_eq!(before.status, JobStatus::Running);
    assert_eq!(before.lease_owner.as_deref(), Some("worker-b"));
    assert_eq!(before.attempts, 2);

    // A, with its own (stale) claim.
    assert_eq!(
        store
            .complete("worker-a", &[(id, 1)])
            .await
            .expect("complete"),
        vec![id],
        "A's complete reports the job as lost"
    );
    assert_eq!(
        store.renew("worker-a", &[id], true).await.expect("renew"),
        0
    );
    assert_eq!(
        store.renew("worker-a", &[id], false).await.expect("renew"),
        0
    );
    let endings = [
        Finish::Fail {
            error: "A gave up".into(),
        },
        Finish::Retry {
            delay: Duration::ZERO,
            error: "A wants a retry".into(),
        },
        Finish::Cancelled {
            error: "A cancels".into(),
        },
        Finish::HandBack,
    ];
    for how in &endings {
        assert!(
            store
                .finish("worker-a", id, 1, how)
                .await
                .expect("finish")
                .is_none(),
            "A's {how:?} matched a row"
        );
        // The right attempt under the wrong owner, and the right owner with a stale attempt,
        // match nothing either: both halves of the token count.
        assert!(store
            .finish("worker-a", id, 2, how)
            .await
            .expect("finish")
            .is_none());
        assert!(store
            .finish("worker-b", id, 1, how)
            .await
            .expect("finish")
            .is_none());
    }
    assert_eq!(
        store
            .complete("worker-b", &[(id, 1)])
            .await
            .expect("complete"),
        vec![id],
        "B with A's attempt number"
    );

    let after = job(&queue, id).await;
    assert_eq!(
        format!("{after:?}"),
        format!("{before:?}"),
        "the row is untouched by every fenced-out write"
    );

    // B's own writes work.
    assert_eq!(
        store.renew("worker-b", &[id], false).await.expect("renew"),
        1
    );
    assert!(
        store
            .complete("worker-b", &[(id, 2)])
            .await
            .expect("complete")
            .is_empty(),
        "B still holds the job"
    );
    let done = job(&queue, id).await;
    assert_eq!(done.status, JobStatus::Done);
    assert_eq!(done.attempts, 2);
    assert_eq!((done.lease_owner, done.lease_until), (None, None));
    assert!(done.finished_at.is_some());
    // And once done, even B's stale writes match nothing.
    assert!(store
        .finish("worker-b", id, 2, &Finish::HandBack)
        .await
        .expect("finish")
        .is_none());
    assert_eq!(job(&queue, id).await.status, JobStatus::Done);
}

// ---------------------------------------------------------------------------------------
// 5. Reclaim and promote
// ---------------------------------------------------------------------------------------

/// Expired leases come back as ready (attempts kept), failed (last attempt, earlier error
/// kept) or cancelled (cancel pending); a live lease is left alone.
#[tokio::test(flavor = "multi_thread")]
async fn reclaim_takes_back_expired_leases() {
    let queue = fresh_queue("store_reclaim").await;
    let store = queue.store();
    let again = queue.enqueue(Task { n: 1 }).await.expect("enqueue").id();
    let last = queue
        .enqueue_with(Task { n: 2 }, EnqueueOptions::default().max_attempts(2))
        .await
        .expect("enqueue")
        .id();
    let cancel = queue.enqueue(Task { n: 3 }).await.expect("enqueue").id();
    let live = queue.enqueue(Task { n: 4 }).await.expect("enqueue").id();

    let claimed = store.claim("default", "worker-a", 4).await.expect("claim");
    assert_eq!(claimed.len(), 4);
    // `last` fails its first attempt, is retried at once and claimed for its last attempt.
    let retry = Finish::Retry {
        delay: Duration::ZERO,
        error: "smtp timeout".into(),
    };
    assert_eq!(
        store
            .finish("worker-a", last, 1, &retry)
            .await
            .expect("retry"),
        Some(JobStatus::Scheduled)
    );
    assert_eq!(job(&queue, last).await.status, JobStatus::Scheduled);
    assert_eq!(store.promote(10).await.expect("promote"), 1);
    let second = store.claim("default", "worker-b", 4).await.expect("claim");
    assert_eq!(second.len(), 1);
    assert_eq!((second[0].id, second[0].attempt), (last, 2));
    // An operator asks to cancel `cancel` while it runs.
    assert_eq!(
        queue.cancel(cancel).await.expect("cancel"),
        CancelOutcome::Requested
    );
    assert!(job(&queue, cancel).await.cancel_requested);

    for id in [again, last, cancel] {
        expire_lease(&queue, id).await;
    }
    let live_before = job(&queue, live).await;
    let Reclaimed {
        ready,
        failed,
        cancelled,
        ..
    } = store.reclaim(100).await.expect("reclaim");
    assert_eq!(ready, vec![(again, 1, "worker-a".to_owned())]);
    assert_eq!(failed, vec![(last, 2, "worker-b".to_owned())]);
    assert_eq!(cancelled, vec![cancel]);

    let row = job(&queue, again).await;
    assert_eq!(row.status, JobStatus::Ready);
    assert_eq!(row.attempts, 1, "attempts unchanged");
    assert_eq!((row.lease_owner, row.lease_until), (None, None));
    let error = row.last_error.expect("a reason");
    assert!(
        error.contains("lease") && error.contains("worker-a") && error.contains("expired"),
        "{error}"
    );

    let row = job(&queue, last).await;
    assert_eq!(row.status, JobStatus::Failed);
    assert_eq!((row.attempts, row.max_attempts), (2, 2));
    assert!(row.finished_at.is_some());
    let error = row.last_error.expect("a reason");
    assert!(
        error.contains("lease") && error.contains("last attempt"),
        "{error}"
    );
    assert!(
        error.contains("smtp timeout"),
        "the earlier error is kept: {error}"
    );

    let row = job(&queue, cancel).await;
    assert_eq!(row.status, JobStatus::Cancelled);
    assert!(row.finished_at.is_some());
    assert!(row.last_error.expect("a reason").contains("cancel"));

    assert_eq!(
        format!("{:?}", job(&queue, live).await),
        format!("{live_before:?}"),
        "a lease that has not run out is not touched"
    );
    let nothing = store.reclaim(100).await.expect("reclaim");
    assert!(nothing.ready.is_empty() && nothing.failed.is_empty() && nothing.cancelled.is_empty());
}

/// A due scheduled job becomes ready and claimable; one due later stays scheduled.
#[tokio::test(flavor = "multi_thread")]
async fn promote_makes_due_jobs_ready() {
    let queue = fresh_queue("store_promote").await;
    let store = queue.store();
    let hour = EnqueueOptions::default().delay(Duration::from_secs(3600));
    let due = queue
        .enqueue_with(Task { n: 1 }, hour.clone())
        .await
        .expect("enqueue")
        .id();
    let later = queue
        .enqueue_with(Task { n: 2 }, hour)
        .await
        .expect("enqueue")
        .id();
    assert_eq!(
        store.promote(100).await.expect("promote"),
        0,
        "nothing is due yet"
    );
    assert!(store
        .claim("default", "worker-a", 10)
        .await
        .expect("claim")
        .is_empty());

    sqlx::query("UPDATE job_queue SET run_at = UTC_TIMESTAMP(6) - INTERVAL 1 SECOND WHERE id = ?")
        .bind(due)
        .execute(queue.pool())
        .await
        .expect("make due");
    assert_eq!(store.promote(100).await.expect("promote"), 1);
    assert_eq!(job(&queue, due).await.status, JobStatus::Ready);
    assert_eq!(job(&queue, later).await.status, JobStatus::Scheduled);
    assert_eq!(store.promote(100).await.expect("promote"), 0);

    let claimed = store.claim("default", "worker-a", 10).await.expect("claim");
    let got: Vec<u64> = claimed.iter().map(|c| c.id).collect();
    assert_eq!(got, vec![due]);
}

// ---------------------------------------------------------------------------------------
// 6. Idempotent enqueue
// ---------------------------------------------------------------------------------------

/// The same key twice: one row, the second a logged `Duplicate` of the first.
#[tokio::test(flavor = "current_thread")]
async fn the_same_key_twice_is_one_job_and_logged() {
    let (logs, _guard) = LogCapture::install("jobqueue_runtime=info");
    let queue = fresh_queue("store_duplicate").await;
    let key = "report:2026-11:customer-42";
    let first = queue
        .enqueue_with(Task { n: 1 }, keyed(key))
        .await
        .expect("enqueue");
    let Enqueued::New(id) = first else {
        panic!("first enqueue: {first:?}")
    };
    let second = queue
        .enqueue_with(Task { n: 2 }, keyed(key))
        .await
        .expect("enqueue");
    assert_eq!(second, Enqueued::Duplicate(id));
    assert_eq!(
        count(queue.pool(), "SELECT COUNT(*) FROM job_queue").await,
        1
    );
    assert_eq!(
        job(&queue, id).await.payload,
        serde_json::json!({ "n": 1 }),
        "the duplicate did not overwrite the job"
    );

    // Derived keys: equal arguments are the same job.
    let a = queue.enqueue(Task { n: 7 }).await.expect("enqueue");
    let b = queue.enqueue(Task { n: 7 }).await.expect("enqueue");
    assert!(a.is_new());
    assert_eq!(b, Enqueued::Duplicate(a.id()));

    let lines = logs.lines_with(&["duplicate", key, &format!("existing_id={id}")]);
    assert_eq!(
        lines.len(),
        1,
        "one duplicate logged with key and id:\n{}",
        logs.text()
    );
    assert_eq!(
        logs.lines_with(&["duplicate", &format!("existing_id={}", a.id())])
            .len(),
        1,
        "{}",
        logs.text()
    );
    assert_eq!(queue.metrics().duplicates, 2);
}

/// An application pool as a user would have: the server's default isolation level.
async fn app_pool(url: &str) -> MySqlPool {
    MySqlPoolOptions::new()
        .max_connections(4)
        .connect(url)
        .await
        .expect("application pool")
}

/// A job enqueued in a transaction that rolls back is gone with it.
#[tokio::test(flavor = "multi_thread")]
async fn enqueue_in_a_rolled_back_transaction_leaves_nothing() {
    let url = fresh_database("store_rollback").await;
    let queue = Queue::connect(&url).await.expect("connect");
    queue.migrate().await.expect("migrate");
    let app = app_pool(&url).await;

    let mut tx = app.begin().await.expect("begin");
    let outcome = queue
        .enqueue_in(&mut tx, Task { n: 1 })
        .await
        .expect("enqueue");
    let Enqueued::New(id) = outcome else {
        panic!("{outcome:?}")
    };
    let inside: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM job_queue WHERE id = ?")
        .bind(id)
        .fetch_one(&mut *tx)
        .await
        .expect("count");
    assert_eq!(inside, 1, "visible inside the transaction");
    tx.rollback().await.expect("rollback");

    assert!(queue.job(id).await.expect("read").is_none());
    assert_eq!(
        count(queue.pool(), "SELECT COUNT(*) FROM job_queue").await,
        0
    );
    // The key is free again.
    assert!(queue
        .enqueue(Task { n: 1 })
        .await
        .expect("enqueue")
        .is_new());
}

/// A duplicate inside the caller's transaction does not abort it: the caller's own writes
/// before and after it commit.
#[tokio::test(flavor = "multi_thread")]
async fn a_duplicate_does_not_abort_the_callers_transaction() {
    let url = fresh_database("store_outbox").await;
    let queue = Queue::connect(&url).await.expect("connect");
    queue.migrate().await.expect("migrate");
    let app = app_pool(&url).await;
    sqlx::query("CREATE TABLE orders (id BIGINT PRIMARY KEY, note VARCHAR(64) NOT NULL)")
        .execute(&app)
        .await
        .expect("create orders");
    let existing = queue
        .enqueue_with(Task { n: 1 }, keyed("order:7412"))
        .await
        .expect("enqueue")
        .id();

    let mut tx = app.begin().await.expect("begin");
    // A read first, so that a REPEATABLE READ snapshot exists before the next enqueue.
    let orders: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM orders")
        .fetch_one(&mut *tx)
        .await
        .expect("read");
    assert_eq!(orders, 0);
    sqlx::query("INSERT INTO orders VALUES (7412, 'before')")
        .execute(&mut *tx)
        .await
        .expect("insert order");
    let dup = queue
        .enqueue_in_with(&mut tx, Task { n: 2 }, keyed("order:7412"))
        .await
        .expect("enqueue");
    assert_eq!(dup, Enqueued::Duplicate(existing));
    // A key another connection commits after this transaction's snapshot was taken: the
    // duplicate still names its row.
    let late = queue
        .enqueue_with(Task { n: 3 }, keyed("order:7413"))
        .await
        .expect("enqueue")
        .id();
    let dup_late = queue
        .enqueue_in_with(&mut tx, Task { n: 4 }, keyed("order:7413"))
        .await
        .expect("enqueue of a key committed after the snapshot");
    assert_eq!(dup_late, Enqueued::Duplicate(late));
    sqlx::query("INSERT INTO orders VALUES (7413, 'after')")
        .execute(&mut *tx)
        .await
        .expect("insert after the duplicate");
    let fresh = queue
        .enqueue_in_with(&mut tx, Task { n: 5 }, keyed("order:7414"))
        .await
        .expect("enqueue");
    assert!(fresh.is_new());
    tx.commit().await.expect("commit");

    let notes: Vec<String> = sqlx::query_scalar("SELECT note FROM orders ORDER BY id")
        .fetch_all(&app)
        .await
        .expect("orders");
    assert_eq!(notes, ["before", "after"]);
    assert_eq!(
        count(queue.pool(), "SELECT COUNT(*) FROM job_queue").await,
        3
    );
    assert_eq!(
        job(&queue, existing).await.payload,
        serde_json::json!({ "n": 1 })
    );
    assert_eq!(job(&queue, fresh.id()).await.task_key, "order:7414");
}

/// Statements the server has run for this session so far.
async fn questions(pool: &MySqlPool) -> u64 {
    let row = sqlx::query("SHOW SESSION STATUS LIKE 'Questions'")
        .fetch_one(pool)
        .await
        .expect("status");
    text_col(&row, "Value")
        .and_then(|v| v.parse().ok())
        .expect("a number")
}

/// 1,200 jobs with duplicates inside the batch and of rows that exist: one outcome per
/// job, in order, with the right ids, in a handful of statements.
#[tokio::test(flavor = "multi_thread")]
async fn enqueue_many_reports_every_job() {
    let url = fresh_database("store_many").await;
    // One connection, so that its session counters count every statement of the batch.
    let queue = Queue::connect_with(&url, QueueConfig::default().max_connections(1))
        .await
        .expect("connect");
    queue.migrate().await.expect("migrate");
    let mut ids: HashMap<u64, u64> = HashMap::new();
    for n in 1000..1100 {
        ids.insert(n, queue.enqueue(Task { n }).await.expect("enqueue").id());
    }

    // 0..1100, with every 11th job repeated right after itself: 1,200 jobs, 1,100 keys, of
    // which 100 exist already.
    let mut batch = Vec::new();
    for n in 0..1100 {
        batch.push(n);
        if n % 11 == 0 {
            batch.push(n);
        }
    }
    assert_eq!(batch.len(), 1200);
    let before = questions(queue.pool()).await;
    let outcomes = queue
        .enqueue_many(batch.iter().map(|&n| Task { n }))
        .await
        .expect("enqueue_many");
    let statements = questions(queue.pool()).await - before;

    assert_eq!(outcomes.len(), batch.len());
    for (&n, outcome) in batch.iter().zip(&outcomes) {
        match ids.get(&n) {
            Some(&id) => assert_eq!(*outcome, Enqueued::Duplicate(id), "job n={n}"),
            None => {
                let Enqueued::New(id) = *outcome else {
                    panic!("job n={n}: {outcome:?}, expected New")
                };
                ids.insert(n, id);
            }
        }
    }
    assert_eq!(outcomes.iter().filter(|o| o.is_new()).count(), 1000);
    assert_eq!(outcomes.iter().filter(|o| o.is_duplicate()).count(), 200);

    // The ids are those of the rows with each job's key.
    let rows: Vec<(u64, Vec<u8>)> = sqlx::query_as("SELECT id, task_key FROM job_queue")
        .fetch_all(queue.pool())
        .await
        .expect("rows");
    assert_eq!(rows.len(), 1100);
    let by_key: HashMap<Vec<u8>, u64> = rows.into_iter().map(|(id, k)| (k, id)).collect();
    for n in 0..1100 {
        let key = Task { n }.task_key().expect("key");
        assert_eq!(by_key.get(key.as_bytes()), Some(&ids[&n]), "job n={n}");
    }
    // Per 500 jobs: a SELECT of the keys that exist, one multi-row INSERT, a SELECT of the
    // new ids; plus BEGIN, COMMIT and the status query. One statement per job would be 1,200.
    assert!(
        statements <= 15,
        "enqueue_many of 1,200 jobs took {statements} statements"
    );
}

/// Eight tasks enqueue one key at once: exactly one of them inserts it.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_enqueues_of_one_key_give_one_job() {
    let queue = fresh_queue("store_race").await;
    for round in 0..5 {
        let key = format!("race:{round}");
        let start = Arc::new(tokio::sync::Barrier::new(8));
        let mut tasks = Vec::new();
        for n in 0..8 {
            let queue = queue.clone();
            let key = key.clone();
            let start = start.clone();
            tasks.push(tokio::spawn(async move {
                start.wait().await;
                queue
                    .enqueue_with(Task { n }, EnqueueOptions::default().key(key))
                    .await
                    .expect("enqueue")
            }));
        }
        let mut outcomes = Vec::new();
        for t in tasks {
            outcomes.push(t.await.expect("task"));
        }
        assert_eq!(
            outcomes.iter().filter(|o| o.is_new()).count(),
            1,
            "round {round}: {outcomes:?}"
        );
        let row = queue
            .job_by_key(&key)
            .await
            .expect("read")
            .expect("the row");
        assert!(
            outcomes.iter().all(|o| o.id() == row.id),
            "round {round}: every outcome names row {}: {outcomes:?}",
            row.id
        );
    }
    assert_eq!(
        count(queue.pool(), "SELECT COUNT(*) FROM job_queue").await,
        5
    );
}

// ---------------------------------------------------------------------------------------
// 7. Bad input
// ---------------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread")]
async fn bad_keys_are_refused_with_the_fix() {
    let queue = fresh_queue("store_bad_keys").await;
    for long in ["k".repeat(256), "ключ".repeat(64)] {
        let err = queue
            .enqueue_with(Task { n: 1 }, keyed(&long))
            .await
            .expect_err("a key over 255 characters");
        let msg = err.to_string();
        let Error::InvalidKey { key, reason } = err else {
            panic!("{err:?}")
        };
        assert_eq!(key.chars().count(), 80, "the key is cut in the message");
        assert!(
            msg.contains("256 characters") && msg.contains("limit of 255"),
            "{msg}"
        );
        assert!(
            msg.contains("shorter key") && msg.contains("fit_key"),
            "{msg}"
        );
        assert!(reason.contains("256"), "{reason}");
    }
    // 255 characters fit, however many bytes they take.
    let widest = "🦀".repeat(255);
    let ok = queue
        .enqueue_with(Task { n: 1 }, keyed(&widest))
        .await
        .expect("255 four-byte characters");
    assert_eq!(job(&queue, ok.id()).await.task_key, widest);

    let err = queue
        .enqueue_with(Task { n: 2 }, keyed(""))
        .await
        .expect_err("an empty key");
    let msg = err.to_string();
    assert!(matches!(err, Error::InvalidKey { .. }), "{err:?}");
    assert!(msg.contains("empty"), "{msg}");
    assert!(msg.contains("leave `key` unset"), "the fix: {msg}");

    assert_eq!(
        count(queue.pool(), "SELECT COUNT(*) FROM job_queue").await,
        1
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn bad_queue_names_are_refused_with_the_fix() {
    let queue = fresh_queue("store_bad_queues").await;
    for (name, culprit) in [
        ("a'; DROP TABLE job_queue; --", "'\\''"),
        ("my queue", "' '"),
        ("\"quoted\"", "'\"'"),
        ("emails`", "'`'"),
        ("очередь", "'о'"),
    ] {
        let err = queue
            .enqueue_with(Task { n: 1 }, EnqueueOptions::default().queue(name))
            .await
            .expect_err(name);
        let msg = err.to_string();
        let Error::InvalidQueue { queue: q, .. } = &err else {
            panic!("{name}: {err:?}")
        };
        assert_eq!(q, name);
        assert!(msg.contains(culprit), "{name}: names the character: {msg}");
        assert!(
            msg.contains("use letters, digits, `_`, `-`, `.` and `:`"),
            "{name}: the fix: {msg}"
        );
    }
    let err = queue
        .enqueue_with(Task { n: 1 }, EnqueueOptions::default().queue(""))
        .await
        .expect_err("an empty queue name");
    assert!(matches!(err, Error::InvalidQueue { .. }), "{err:?}");
    assert_eq!(
        count(queue.pool(), "SELECT COUNT(*) FROM job_queue").await,
        0
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn unserializable_arguments_are_refused() {
    let queue = fresh_queue("store_bad_payload").await;
    let weights = HashMap::from([((1, 2), 3)]);
    // With a derived key (serialized for the key) and with an explicit one (for the payload).
    for options in [EnqueueOptions::default(), keyed("weights")] {
        let err = queue
            .enqueue_with(
                TupleKeyed {
                    weights: weights.clone(),
                },
                options,
            )
            .await
            .expect_err("a map with tuple keys");
        let msg = err.to_string();
        let Error::Serialize { kind, .. } = err else {
            panic!("{err:?}")
        };
        assert_eq!(kind, "store_tuple_keyed");
        assert!(msg.contains("`store_tuple_keyed`"), "{msg}");
        assert!(msg.contains("key must be a string"), "the problem: {msg}");
        assert!(msg.contains("serializable to JSON"), "the fix: {msg}");
    }
    for options in [EnqueueOptions::default(), keyed("file")] {
        let err = queue
            .enqueue_with(Unserializable { path: "/x".into() }, options)
            .await
            .expect_err("a refusing Serialize impl");
        let msg = err.to_string();
        assert!(
            matches!(
                err,
                Error::Serialize {
                    kind: "store_unserializable",
                    ..
                }
            ),
            "{err:?}"
        );
        assert!(
            msg.contains("an open file handle cannot be serialized"),
            "{msg}"
        );
    }
    assert_eq!(
        count(queue.pool(), "SELECT COUNT(*) FROM job_queue").await,
        0
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn oversized_payloads_are_refused() {
    let url = fresh_database("store_big_payload").await;
    let queue = Queue::connect_with(&url, QueueConfig::default().max_payload_bytes(1024))
        .await
        .expect("connect");
    queue.migrate().await.expect("migrate");

    // `{"text":"..."}` is 11 bytes around the text.
    let at_limit = Blob {
        text: "x".repeat(1024 - 11),
    };
    assert_eq!(serde_json::to_string(&at_limit).unwrap().len(), 1024);
    assert!(queue
        .enqueue(at_limit)
        .await
        .expect("exactly at the limit")
        .is_new());

    let err = queue
        .enqueue(Blob {
            text: "y".repeat(1024 - 10),
        })
        .await
        .expect_err("one byte over");
    let msg = err.to_string();
    let Error::PayloadTooLarge { kind, size, limit } = err else {
        panic!("{err:?}")
    };
    assert_eq!((kind.as_str(), size, limit), ("store_blob", 1025, 1024));
    assert!(
        msg.contains("1025 bytes") && msg.contains("limit of 1024"),
        "{msg}"
    );
    assert!(msg.contains("store large data elsewhere"), "the fix: {msg}");
    assert_eq!(
        count(queue.pool(), "SELECT COUNT(*) FROM job_queue").await,
        1
    );
}

/// Keys are stored and compared byte for byte: quotes and SQL in them are data, case and
/// accents matter, and each deduplicates only against itself.
#[tokio::test(flavor = "multi_thread")]
async fn unusual_keys_are_kept_byte_for_byte() {
    let queue = fresh_queue("store_key_bytes").await;
    let keys = [
        "'; DROP TABLE job_queue; --",
        "\" OR 1=1 --",
        "back\\slash",
        "100%_like",
        "ключ",
        "🔑🦀",
        "A",
        "a",
        "ß",
        "ss",
        "é",
        "e\u{301}",
        "x",
        " x",
        "x y",
    ];
    let mut ids = Vec::new();
    for (n, key) in keys.iter().enumerate() {
        let outcome = queue
            .enqueue_with(Task { n: n as u64 }, keyed(key))
            .await
            .expect(key);
        assert!(outcome.is_new(), "{key:?} is a new key: {outcome:?}");
        ids.push(outcome.id());
    }
    for (key, &id) in keys.iter().zip(&ids) {
        let row = job(&queue, id).await;
        assert_eq!(row.task_key, *key);
        let stored: Vec<u8> =
            sqlx::query_scalar("SELECT CAST(task_key AS BINARY) FROM job_queue WHERE id = ?")
                .bind(id)
                .fetch_one(queue.pool())
                .await
                .expect("bytes");
        assert_eq!(stored, key.as_bytes(), "{key:?} stored as given");
        assert_eq!(
            queue.job_by_key(key).await.expect("by key").map(|r| r.id),
            Some(id),
            "{key:?} finds its own row"
        );
        let again = queue
            .enqueue_with(Task { n: 999 }, keyed(key))
            .await
            .expect(key);
        assert_eq!(
            again,
            Enqueued::Duplicate(id),
            "{key:?} deduplicates against itself"
        );
    }
    // The same keys in one batch, in reverse: every one a duplicate of its own row.
    let mut tx = queue.pool().begin().await.expect("begin");
    for (key, &id) in keys.iter().zip(&ids).rev() {
        let outcome = queue
            .enqueue_in_with(&mut tx, Task { n: 1000 }, keyed(key))
            .await
            .expect(key);
        assert_eq!(outcome, Enqueued::Duplicate(id), "{key:?}");
    }
    tx.commit().await.expect("commit");

    // Keys compare byte for byte: a trailing space makes another key.
    let plain = queue
        .enqueue_with(Task { n: 1001 }, keyed("trail"))
        .await
        .expect("trail");
    let spaced = queue
        .enqueue_with(Task { n: 1001 }, keyed("trail "))
        .await
        .expect("x with a space");
    assert!(plain.is_new() && spaced.is_new(), "{plain:?} {spaced:?}");
    assert_ne!(plain.id(), spaced.id());
    assert_eq!(
        queue.job_by_key("trail ").await.unwrap().unwrap().id,
        spaced.id()
    );
    // Control characters are refused.
    let err = queue
        .enqueue_with(Task { n: 1002 }, keyed("line\nbreak"))
        .await
        .expect_err("a control character");
    assert!(
        err.to_string().contains("control characters; remove them"),
        "{err}"
    );

    assert_eq!(
        count(queue.pool(), "SELECT COUNT(*) FROM job_queue").await,
        keys.len() as i64 + 2,
        "the table is still there, one row per key"
    );
}

// ---------------------------------------------------------------------------------------
// 8. A read-only server
// ---------------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread")]
async fn a_read_only_server_is_refused() {
    let server = tokio::task::spawn_blocking(TestServer::start)
        .await
        .expect("start task")
        .unwrap_or_else(|e| panic!("{e}"));
    let url = server
        .create_database("store_read_only")
        .await
        .expect("database");
    let mut admin = MySqlConnection::connect(&url).await.expect("admin");
    admin
        .execute("SET GLOBAL read_only = ON")
        .await
        .expect("read_only on");

    let err = Queue::connect(&url).await.expect_err("a read-only server");
    let Error::UnsupportedServer(msg) = &err else {
        panic!("{err:?}")
    };
    assert!(msg.contains("read_only=ON"), "names the problem: {msg}");
    assert!(
        msg.contains("point the queue at the primary"),
        "the fix: {msg}"
    );

    // The same server, writable again, is accepted: read_only alone was refused.
    admin
        .execute("SET GLOBAL read_only = OFF")
        .await
        .expect("read_only off");
    let queue = Queue::connect(&url).await.expect("a writable server");
    queue.migrate().await.expect("migrate");
    queue.pool().close().await;
    admin.close().await.expect("close");
    tokio::task::spawn_blocking(move || drop(server))
        .await
        .expect("stop the server");
}

// ---------------------------------------------------------------------------------------
// 9. Delays, start times and priorities
// ---------------------------------------------------------------------------------------

async fn db_time(pool: &MySqlPool, expr: &str) -> NaiveDateTime {
    sqlx::query_scalar(&format!("SELECT {expr}"))
        .fetch_one(pool)
        .await
        .expect("time")
}

#[tokio::test(flavor = "multi_thread")]
async fn delays_start_times_and_priorities_are_stored() {
    let queue = fresh_queue("store_delay").await;
    let pool = queue.pool();

    let delayed = queue
        .enqueue_with(
            Task { n: 1 },
            EnqueueOptions::default().delay(Duration::from_secs(3600)),
        )
        .await
        .expect("enqueue")
        .id();
    let row = job(&queue, delayed).await;
    assert_eq!(row.status, JobStatus::Scheduled);
    let ahead_us: i64 = sqlx::query_scalar(
        "SELECT TIMESTAMPDIFF(MICROSECOND, UTC_TIMESTAMP(6), run_at) FROM job_queue WHERE id = ?",
    )
    .bind(delayed)
    .fetch_one(pool)
    .await
    .expect("run_at");
    assert!(
        (3_590_000_000..=3_600_000_000).contains(&ahead_us),
        "run_at is an hour ahead of the database clock: {ahead_us} µs"
    );

    let past = db_time(pool, "UTC_TIMESTAMP(6) - INTERVAL 1 HOUR").await;
    let early = queue
        .enqueue_with(
            Task { n: 2 },
            EnqueueOptions::default().run_at(past.and_utc()),
        )
        .await
        .expect("enqueue")
        .id();
    let row = job(&queue, early).await;
    assert_eq!(
        row.status,
        JobStatus::Ready,
        "a start time in the past is ready now"
    );
    assert_eq!(row.run_at, past.and_utc());

    let future = db_time(pool, "UTC_TIMESTAMP(6) + INTERVAL 1 HOUR").await;
    let late = queue
        .enqueue_with(
            Task { n: 3 },
            EnqueueOptions::default().run_at(future.and_utc()),
        )
        .await
        .expect("enqueue")
        .id();
    let row = job(&queue, late).await;
    assert_eq!(row.status, JobStatus::Scheduled);
    assert_eq!(row.run_at, future.and_utc());

    let now = queue
        .enqueue_with(
            Task { n: 4 },
            EnqueueOptions::default().delay(Duration::ZERO),
        )
        .await
        .expect("enqueue")
        .id();
    assert_eq!(job(&queue, now).await.status, JobStatus::Ready);

    // Priorities: the kind's default (3), and overrides; lower is claimed first.
    let urgent = queue
        .enqueue_with(
            Task { n: 5 },
            EnqueueOptions::default().priority(-7).max_attempts(9),
        )
        .await
        .expect("enqueue")
        .id();
    let row = job(&queue, urgent).await;
    assert_eq!((row.priority, row.max_attempts), (-7, 9));
    let row = job(&queue, early).await;
    assert_eq!(
        (row.priority, row.max_attempts),
        (3, 3),
        "the kind's defaults"
    );
    let lazy = queue
        .enqueue_with(Task { n: 6 }, EnqueueOptions::default().priority(i16::MAX))
        .await
        .expect("enqueue")
        .id();
    assert_eq!(job(&queue, lazy).await.priority, i16::MAX);

    let claimed = queue
        .store()
        .claim("default", "worker-a", 10)
        .await
        .expect("claim");
    let order: Vec<u64> = claimed.iter().map(|c| c.id).collect();
    assert_eq!(
        order,
        vec![urgent, early, now, lazy],
        "by priority, then id"
    );
}
