//! The plans MySQL and MariaDB choose for the runtime's statements (EXPLAIN), on tables
//! large enough for the optimizer to choose: the claim, promotion, reclaim and prune SELECTs
//! and the limits' statements on their side tables are served by their indexes, in index
//! order (no filesort, no temporary table, no full scan); every status waits on one time
//! column under one index; and the dashboard's queries on a table of 1,000,000 finished and
//! 100,000 waiting jobs are served by indexes, the job list reading rows in id order without
//! a sort and the overview in one statement (each page's time is printed).
//!
//! The statements come from the store itself (the runtime's `__store` test door), so the
//! plans checked are those of the SQL the runtime runs. Every plan check of the workspace is
//! in this file: another backend gets a plan file of its own.
//!
//! ```text
//! cargo test -p tests --test mysql_query_plans -- --nocapture
//! ```

mod web_support;

use std::collections::BTreeSet;
use std::time::Instant;

use axum::http::StatusCode;
use jobqueue::admin::JobFilter;
use jobqueue::{EnqueueOptions, Job, JobContext, JobError, JobOptions, JobStatus, Queue};
use jobqueue_runtime::__store::statements::dashboard_statements;
use jobqueue_web::Dashboard;
use serde::{Deserialize, Serialize};
use sqlx::{MySqlPool, Row};
use tests::{count, fresh_queue, text_col};
use web_support::get;

/// The ordinary job of these tests, as in `store_protocol.rs`; its derived key depends on
/// `n` only.
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

// ---------------------------------------------------------------------------------------
// EXPLAIN of the claim, promote, reclaim and prune SELECTs
// ---------------------------------------------------------------------------------------

// The statements come from the store itself, so the EXPLAIN test checks the SQL the runtime runs.
use jobqueue_runtime::__store::statements::{
    claim_lock_sql, complete_in_sql, key_history_sql, release_sql, ATTEMPT_LOG_SELECT,
    BLOCKED_IN_QUEUE, BRING_FORWARD_SELECT, CLAIM_SELECT, CONCURRENCY_KEY_OF_JOB,
    OUTPUT_AFTER_COMMIT, OUTPUT_SELECT, PROGRESS_UPDATE, PROMOTE_PROBE, PROMOTE_SELECT,
    PRUNE_SELECT, RECLAIM_SELECT,
};
use jobqueue_runtime::__store::statements::{
    count_gauges_sql, ready_probe_sql, COUNT_THROUGHPUT, GAUGE_QUEUES,
};

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
    let mut tx = queue.mysql_pool().unwrap().begin().await.expect("begin");
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
    .execute(queue.mysql_pool().unwrap())
    .await
    .expect("mix statuses");
    sqlx::query("ANALYZE TABLE job_queue")
        .execute(queue.mysql_pool().unwrap())
        .await
        .expect("analyze");
    let statuses = queue.counts(None).await.expect("counts");
    assert_eq!(statuses.len(), 6, "every status is present: {statuses:?}");

    let pool = queue.mysql_pool().unwrap();
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
    // The claim's locking read: its candidates by primary key, so that it locks those rows
    // and no gap; padded lists repeat an id.
    for n in [8, 32, 128] {
        let ids: Vec<String> = (0..n).map(|i| (1 + 6 * i).to_string()).collect();
        let args: Vec<&str> = ids.iter().map(String::as_str).collect();
        assert_plan(
            pool,
            "claim's lock",
            &claim_lock_sql(n),
            &args,
            "PRIMARY",
            Access::Range,
        )
        .await;
    }
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
    // The gauges' count finds the queues by a loose scan of the queue index (one dive per
    // queue, not an entry per job), then reads only the index entries of each queue's
    // waiting, running and failed jobs: no row, and no entry of a finished job.
    let plan = explain(pool, GAUGE_QUEUES, &[]).await;
    assert!(
        plan.iter().any(|row| row.table == "job_queue"
            && row.key.as_deref() == Some("job_queue_list_queue")
            && row.extra.contains("Using index for group-by")),
        "gauge queues: {plan:#?}"
    );
    let plan = explain(pool, &count_gauges_sql(2), &["default", "other"]).await;
    assert!(
        plan.iter().any(|row| row.table == "job_queue"
            && row.key.as_deref() == Some("job_queue_queue_status_at")
            && row.access == "range"
            && row.extra.contains("Using index")),
        "gauges: {plan:#?}"
    );
    // The throughput count reads the finished rows of its few seconds only: a range of the
    // status-time index from where the last count stopped.
    let plan = explain(
        pool,
        COUNT_THROUGHPUT,
        &["2026-01-01 00:00:00", "2026-01-01 00:00:05"],
    )
    .await;
    assert!(
        plan.iter().any(|row| row.table == "job_queue"
            && row.key.as_deref() == Some("job_queue_status_at")
            && row.access == "range"),
        "throughput: {plan:#?}"
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
        &["emails", "-32768", "-32768", "0", "500"],
        "job_queue_claim",
        Access::Range,
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
    // A running job's progress: one row by its id, through the primary key.
    let plan = explain(pool, PROGRESS_UPDATE, &["{}", "5", "worker-1", "1"]).await;
    assert!(
        plan.iter().any(|row| row.table == "job_queue"
            && row.key.as_deref() == Some("PRIMARY")
            && row.rows <= 1),
        "progress write reads one row by id: {plan:#?}"
    );
    // After a completion in the job's own transaction: its output, and its concurrency key
    // (to wake the key's next job), each one row by its id, through the primary key.
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
                && row.key.as_deref() == Some("PRIMARY")
                && row.rows <= 1),
            "{what} reads one row by id: {plan:#?}"
        );
    }
}

/// Every status waits on one time (a scheduled job on `run_at`, a running one on
/// `lease_until`, a finished one on `finished_at`), and the table keeps those times in one
/// computed column under one index: a status change rewrites three secondary index entries
/// (the claim, the status time, and the queue's status time that status listings of one
/// queue read), not five.
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
    .execute(queue.mysql_pool().unwrap())
    .await
    .expect("mix statuses");
    let pool = queue.mysql_pool().unwrap();
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
        "job_queue_queue_status_at",
        "job_queue_list_queue",
        "job_queue_list_kind",
        "job_queue_kind_status_at",
        "job_queue_list_queue_kind",
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
    // The claim index, the status time's, and the listings' by queue and by kind.
    assert_eq!(with_status, 4, "indexes a status change rewrites");
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
    let pool = queue.mysql_pool().unwrap();
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
// The dashboard's queries on a million jobs
// ---------------------------------------------------------------------------------------

async fn seed(queue: &Queue) {
    let pool = queue.mysql_pool().unwrap();
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
        JobFilter::default().status(JobStatus::Done),
        JobFilter::default().status(JobStatus::Ready),
        JobFilter::default().status(JobStatus::Scheduled),
        JobFilter::default().status(JobStatus::Running),
        JobFilter::default().queue("q3"),
        JobFilter::default().kind("kind_7"),
        JobFilter::default().queue("q3").kind("kind_3"),
        JobFilter::default().queue("q3").status(JobStatus::Failed),
        JobFilter::default().queue("q3").status(JobStatus::Done),
        JobFilter::default().queue("none").status(JobStatus::Done),
        JobFilter::default().kind("kind_7").status(JobStatus::Done),
        JobFilter::default().key_prefix("done:12345"),
        JobFilter::default()
            .key_prefix("done:12345")
            .status(JobStatus::Done),
        JobFilter::default()
            .status(JobStatus::Failed)
            .meta("tenant", "acme"),
        JobFilter::default()
            .status(JobStatus::Failed)
            .created(Some(now - chrono::Duration::minutes(30)), Some(now)),
        JobFilter::default().created(None, Some(now - chrono::Duration::hours(1))),
        // Served by the indexes of the kind: none of these match.
        JobFilter::default()
            .kind("kind_3")
            .status(JobStatus::Failed),
        JobFilter::default().queue("q3").kind("kind_4"),
        JobFilter::default()
            .queue("q3")
            .kind("kind_4")
            .status(JobStatus::Done),
        // A time in the status: a range of the status's index.
        JobFilter::default()
            .status(JobStatus::Done)
            .status_time(None, Some(now - chrono::Duration::hours(1))),
        JobFilter::default()
            .status(JobStatus::Failed)
            .queue("q2")
            .status_time(Some(now - chrono::Duration::hours(3)), Some(now)),
        JobFilter::default()
            .kind("kind_7")
            .status(JobStatus::Done)
            .status_time(Some(now - chrono::Duration::hours(2)), None),
        // Tested row by row, in a window of the served range.
        JobFilter::default().meta("tenant", "acme"),
        JobFilter::default()
            .status(JobStatus::Done)
            .created(None, Some(now - chrono::Duration::hours(1))),
    ];
    let mut problems = Vec::new();
    for (i, filter) in filters.iter().enumerate() {
        // From the start, and from the cursor of a page in the middle of the listing.
        let middle = queue
            .list(filter, None, 500)
            .await
            .ok()
            .and_then(|page| page.next);
        for cursor in [None, middle] {
            let statements = dashboard_statements(filter, cursor.as_ref());
            // Only the first filter's run checks the statements that do not depend on it.
            let checked = if i == 0 && cursor.is_none() {
                statements.len()
            } else {
                1
            };
            for (n, (sql, args)) in statements.iter().enumerate() {
                // Where a bounded page's window ends: its index's range, from the index.
                let window = sql.contains("LIMIT 1 OFFSET ?");
                if n >= checked && !window {
                    continue;
                }
                let plan = queue.store().explain(sql, args).await.expect("EXPLAIN");
                for (table, kind, key, rows, extra) in &plan {
                    println!("{filter:?} cursor={cursor:?} #{n}: {table} {kind} {key:?} rows={rows:?} {extra}");
                    let big = table == "job_queue" || table == "j";
                    if big && (kind == "ALL" || key.is_none()) {
                        problems.push(format!(
                            "full scan of {table}: {sql} {args:?} -> {kind} {key:?} {extra}"
                        ));
                    }
                    // The page (statement 0) reads rows in the listing's order: never a
                    // sort, but for a key prefix alone, which sorts only the keys it
                    // matches.
                    let prefix_only = filter.key_prefix.is_some()
                        && filter.status.is_none()
                        && filter.queue.is_none()
                        && filter.kind.is_none();
                    if (n == 0 || window) && extra.contains("filesort") && !prefix_only {
                        problems.push(format!("sorted page: {sql} {args:?} -> {key:?} {extra}"));
                    }
                    // A window reads its index's range (MariaDB reads it from the index
                    // alone, but its EXPLAIN of a statement prepared again on the same
                    // connection may leave "Using index" out: not checked here).
                    if window && !matches!(kind.as_str(), "range" | "ref" | "index") {
                        problems.push(format!(
                            "window not a range: {sql} {args:?} -> {kind} {key:?} {extra}"
                        ));
                    }
                    // The overview's queues: one index entry each (a range read that
                    // stops at its first entry), never the whole queue index.
                    if sql.contains("WHERE queue > ?")
                        && (kind != "range" || !extra.contains("Using index"))
                    {
                        problems.push(format!(
                            "next queue not one lookup: {sql} -> {kind} {key:?} {extra}"
                        ));
                    }
                    // The capped count reads its queue and status from an index alone.
                    if sql.contains("LIMIT ?) t")
                        && table == "job_queue"
                        && !extra.contains("Using index")
                    {
                        problems.push(format!(
                            "capped count reads rows: {sql} -> {kind} {key:?} {extra}"
                        ));
                    }
                    // A status listing reads the range of its status (and kind, or
                    // queue); a queue and a kind theirs.
                    let wanted = match (filter.status, &filter.queue, &filter.kind) {
                        (Some(_), _, Some(_)) => Some("job_queue_kind_status_at"),
                        (Some(_), Some(_), None) => Some("job_queue_queue_status_at"),
                        (Some(_), None, None) => Some("job_queue_status_at"),
                        (None, Some(_), Some(_)) => Some("job_queue_list_queue_kind"),
                        (None, _, _) => None,
                    };
                    if (n == 0 || window) && big && wanted.is_some() && key.as_deref() != wanted {
                        problems.push(format!("page not through {wanted:?}: {sql} -> {key:?}"));
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
        "/jobs?queue=q3&status=failed".into(),
        "/jobs?queue=none&status=done".into(),
        "/jobs?status=done&kind=kind_7".into(),
        "/jobs?queue=q3&kind=kind_3".into(),
        "/jobs?kind=kind_7".into(),
        "/jobs?key=done%3A12345".into(),
        "/jobs?status=failed&kind=kind_3".into(),
        "/jobs?queue=q3&kind=kind_4".into(),
        "/jobs?meta=tenant%3Dacme".into(),
        "/jobs?status=failed&meta=tenant%3Dacme".into(),
        "/jobs/names".into(),
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
    // The overview: waiting and failed jobs exactly, as the gauges counted them (counted by
    // the overview itself: no worker runs here); done ones up to the cap, which each queue
    // reaches.
    let stats = queue.queue_overview().await.unwrap();
    assert_eq!(
        stats.iter().map(|s| s.counts.failed).sum::<u64>(),
        1_000_000 / 47
    );
    assert_eq!(
        stats
            .iter()
            .map(|s| s.counts.ready + s.counts.scheduled)
            .sum::<u64>(),
        100_000
    );
    for s in &stats {
        assert_eq!(s.counts.done, jobqueue::admin::OVERVIEW_COUNT_CAP, "{s:?}");
        assert_eq!(s.capped, [JobStatus::Done], "{s:?}");
        assert!(s.counted_secs_ago.is_some_and(|age| age < 60.0), "{s:?}");
    }
}
