//! The baseline: the leanest correct queue written by hand in plain sqlx, to measure the
//! framework against.
//!
//! Claim: `SELECT id, payload ... ORDER BY priority, id LIMIT B FOR UPDATE SKIP LOCKED`,
//! `UPDATE ... SET status = 'running'` of exactly those ids, commit. Then the batch "runs"
//! and one fenced `UPDATE ... SET status = 'done'` per batch records it: the claim wrote a
//! token unique to it into `lease_owner`, and the update must match every row of the batch.
//! Deadlocks and lock wait timeouts retry the transaction. Enqueue: a plain single-row
//! `INSERT`, or one multi-row `INSERT` of up to 1,000 rows.
//!
//! The same loop also runs on [`MINIMAL_TABLE`], the smallest table the pattern needs (one
//! secondary index besides the unique key): the physical floor of a SKIP LOCKED queue on
//! this server, with none of the columns and indexes that the framework's features need.
//! It runs at READ COMMITTED, as the framework does, and at REPEATABLE READ
//! ([`Isolation::RepeatableRead`]), whose next-key locks make it faster but hold up
//! enqueues into a nearly empty queue.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::time::Duration;

use sqlx::mysql::{MySqlDatabaseError, MySqlPool, MySqlPoolOptions};
use sqlx::{Executor, MySql, QueryBuilder};
use tokio::sync::{watch, Notify};

use crate::jobs::{self, LEASE_MS, MAX_ATTEMPTS, NOOP_KIND, PROBE_KIND, QUEUE};

/// A pool whose sessions run at READ COMMITTED, as a queue's must.
pub(crate) async fn pool(url: &str, max_connections: u32) -> anyhow::Result<MySqlPool> {
    pool_at(url, max_connections, Isolation::ReadCommitted).await
}

/// The isolation level of a loop's sessions.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Isolation {
    ReadCommitted,
    /// The server's default. Its locking reads lock the gaps they scan (next-key locks),
    /// the gap after the last ready row included: an enqueue into a nearly empty queue
    /// waits for the claim that scanned it.
    RepeatableRead,
}

/// A pool whose sessions run at `isolation`.
pub(crate) async fn pool_at(
    url: &str,
    max_connections: u32,
    isolation: Isolation,
) -> anyhow::Result<MySqlPool> {
    let set = match isolation {
        Isolation::ReadCommitted => "SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED",
        Isolation::RepeatableRead => "SET SESSION TRANSACTION ISOLATION LEVEL REPEATABLE READ",
    };
    Ok(MySqlPoolOptions::new()
        .max_connections(max_connections)
        .after_connect(move |conn, _| {
            Box::pin(async move {
                conn.execute(set).await?;
                Ok(())
            })
        })
        .connect(url)
        .await?)
}

/// The server's error number, if `e` is one.
pub(crate) fn code(e: &sqlx::Error) -> Option<u16> {
    e.as_database_error()
        .and_then(|d| d.try_downcast_ref::<MySqlDatabaseError>())
        .map(|m| m.number())
}

/// Deadlock, lock wait timeout, MariaDB's "record has changed": retry the transaction.
fn transient(e: &sqlx::Error) -> bool {
    matches!(code(e), Some(1213 | 1205 | 1020))
}

fn marks(n: usize) -> String {
    vec!["?"; n].join(", ")
}

/// The minimal table: the columns and the one secondary index that a SKIP LOCKED queue
/// with leases, fencing and idempotent keys cannot do without. Ready rows have no lease, so
/// within `status = 'ready'` the index is in id order.
pub(crate) const MINIMAL_TABLE: &str = "CREATE TABLE job_queue (
    id BIGINT UNSIGNED NOT NULL AUTO_INCREMENT,
    task_key VARBINARY(1020) NOT NULL,
    payload JSON NOT NULL,
    status ENUM('ready', 'running', 'done', 'failed') NOT NULL,
    lease_owner VARCHAR(128) NULL,
    lease_until DATETIME(6) NULL,
    attempts INT UNSIGNED NOT NULL DEFAULT 0,
    created_at DATETIME(6) NOT NULL,
    updated_at DATETIME(6) NOT NULL,
    PRIMARY KEY (id),
    UNIQUE KEY job_queue_task_key (task_key),
    KEY job_queue_status (status, lease_until, id)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin";

/// Which table a loop works on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Table {
    /// The framework's `job_queue`, with every column and index its features need.
    Project,
    /// [`MINIMAL_TABLE`].
    Minimal,
    /// [`MINIMAL_TABLE`], claimed by key: a plain read of twice the batch's ids over the
    /// index, then a locking read of those ids by primary key (`FOR UPDATE SKIP LOCKED`,
    /// still `status = 'ready'`). Point locks on the primary key take no gap, at any
    /// isolation level: at REPEATABLE READ such a claim holds up no enqueue.
    MinimalByKey,
}

impl Table {
    fn claim_select(self) -> &'static str {
        match self {
            Table::Project => {
                "SELECT id, payload FROM job_queue WHERE queue = ? AND status = 'ready' \
                 ORDER BY priority, id LIMIT ? FOR UPDATE SKIP LOCKED"
            }
            // The queue is bound and ignored (the table has one), so both take one shape.
            Table::Minimal | Table::MinimalByKey => {
                "SELECT id, payload FROM job_queue FORCE INDEX (job_queue_status) \
                 WHERE ? IS NOT NULL AND status = 'ready' \
                 ORDER BY lease_until, id LIMIT ? FOR UPDATE SKIP LOCKED"
            }
        }
    }

    fn finished_at(self) -> &'static str {
        match self {
            Table::Project => "finished_at = UTC_TIMESTAMP(6), ",
            Table::Minimal | Table::MinimalByKey => "",
        }
    }
}

/// A claimed batch: ids and raw payloads.
type Batch = Vec<(u64, Vec<u8>)>;

/// Claims up to `limit` ready jobs for `token` in one transaction.
async fn claim(pool: &MySqlPool, table: Table, limit: usize, token: &str) -> sqlx::Result<Batch> {
    let mut tx = pool.begin().await?;
    let result: sqlx::Result<Option<Batch>> = async {
        let rows: Batch = if table == Table::MinimalByKey {
            let candidates: Vec<u64> = sqlx::query_scalar(
                "SELECT id FROM job_queue FORCE INDEX (job_queue_status) \
                 WHERE ? IS NOT NULL AND status = 'ready' ORDER BY lease_until, id LIMIT ?",
            )
            .bind(QUEUE)
            .bind(2 * limit as u64)
            .fetch_all(&mut *tx)
            .await?;
            if candidates.is_empty() {
                return Ok(Some(Vec::new()));
            }
            let sql = format!(
                "SELECT id, payload FROM job_queue FORCE INDEX (PRIMARY) \
                 WHERE id IN ({}) AND status = 'ready' ORDER BY id LIMIT ? FOR UPDATE SKIP LOCKED",
                marks(candidates.len())
            );
            let mut q = sqlx::query_as(&sql);
            for id in &candidates {
                q = q.bind(*id);
            }
            q.bind(limit as u64).fetch_all(&mut *tx).await?
        } else {
            sqlx::query_as(table.claim_select())
                .bind(QUEUE)
                .bind(limit as u64)
                .fetch_all(&mut *tx)
                .await?
        };
        if rows.is_empty() {
            return Ok(Some(rows));
        }
        let sql = format!(
            "UPDATE job_queue SET status = 'running', lease_owner = ?, \
             lease_until = UTC_TIMESTAMP(6) + INTERVAL 30 SECOND, attempts = attempts + 1, \
             updated_at = UTC_TIMESTAMP(6) WHERE id IN ({}) AND status = 'ready'",
            marks(rows.len())
        );
        let mut q = sqlx::query(&sql).bind(token);
        for (id, _) in &rows {
            q = q.bind(*id);
        }
        let matched = q.execute(&mut *tx).await?.rows_affected();
        Ok((matched == rows.len() as u64).then_some(rows))
    }
    .await;
    match result {
        Ok(Some(rows)) if !rows.is_empty() => {
            tx.commit().await?;
            Ok(rows)
        }
        Ok(_) => {
            tx.rollback().await?;
            Ok(Vec::new())
        }
        Err(e) => {
            let _ = tx.rollback().await;
            Err(e)
        }
    }
}

/// Marks the batch claimed with `token` done; false if any row was no longer ours.
async fn complete(pool: &MySqlPool, table: Table, ids: &[u64], token: &str) -> sqlx::Result<bool> {
    let sql = format!(
        "UPDATE job_queue SET status = 'done', lease_owner = NULL, lease_until = NULL, \
         {}updated_at = UTC_TIMESTAMP(6) \
         WHERE id IN ({}) AND status = 'running' AND lease_owner = ?",
        table.finished_at(),
        marks(ids.len())
    );
    let mut q = sqlx::query(&sql);
    for id in ids {
        q = q.bind(*id);
    }
    let matched = q.bind(token).execute(pool).await?.rows_affected();
    Ok(matched == ids.len() as u64)
}

/// What a claim loop needs.
pub(crate) struct Loop {
    pub(crate) pool: MySqlPool,
    /// The table it works on.
    pub(crate) table: Table,
    /// Jobs claimed per transaction: the loop's concurrency.
    pub(crate) batch: usize,
    /// Prefix of the per-claim fencing token.
    pub(crate) owner: String,
    /// Sleep after a claim that found nothing.
    pub(crate) poll: Duration,
    /// Woken by an enqueue in this process.
    pub(crate) wake: Option<Arc<Notify>>,
    /// Becomes true to stop.
    pub(crate) stop: watch::Receiver<bool>,
    /// Jobs recorded done.
    pub(crate) done: Arc<AtomicU64>,
    /// Record the latency of probe jobs.
    pub(crate) latency: bool,
}

/// What a claim loop counted.
#[derive(Debug, Default, Clone, Copy, serde::Serialize, serde::Deserialize)]
pub(crate) struct LoopStats {
    pub(crate) claims: u64,
    pub(crate) empty_claims: u64,
    pub(crate) conflicts: u64,
    pub(crate) lost: u64,
}

/// Claims, "runs" and completes batches until stopped.
pub(crate) async fn run(mut l: Loop) -> anyhow::Result<LoopStats> {
    let mut stats = LoopStats::default();
    let mut seq = 0u64;
    while !*l.stop.borrow() {
        seq += 1;
        let token = format!("{}:{seq}", l.owner);
        let batch = match claim(&l.pool, l.table, l.batch, &token).await {
            Ok(b) => b,
            Err(e) if transient(&e) => {
                stats.conflicts += 1;
                continue;
            }
            Err(e) => return Err(e.into()),
        };
        stats.claims += 1;
        if batch.is_empty() {
            stats.empty_claims += 1;
            let wake = l.wake.clone();
            tokio::select! {
                _ = tokio::time::sleep(l.poll) => {}
                _ = async { match &wake { Some(w) => w.notified().await, None => std::future::pending().await } } => {}
                _ = l.stop.changed() => {}
            }
            continue;
        }
        if l.latency {
            for (_, payload) in &batch {
                if let Ok(p) = serde_json::from_slice::<jobs::ProbePayload>(payload) {
                    jobs::record_latency(p.sent_us);
                }
            }
        }
        let ids: Vec<u64> = batch.iter().map(|(id, _)| *id).collect();
        loop {
            match complete(&l.pool, l.table, &ids, &token).await {
                Ok(true) => break,
                Ok(false) => {
                    stats.lost += 1;
                    break;
                }
                Err(e) if transient(&e) => stats.conflicts += 1,
                Err(e) => return Err(e.into()),
            }
        }
        l.done.fetch_add(ids.len() as u64, Relaxed);
    }
    Ok(stats)
}

/// The single-row enqueue: a plain autocommit `INSERT`.
pub(crate) const INSERT_ONE: &str = "INSERT INTO job_queue \
    (queue, kind, task_key, payload, status, priority, run_at, attempts, max_attempts, lease_ms, created_at, updated_at) \
    VALUES (?, ?, ?, ?, 'ready', ?, UTC_TIMESTAMP(6), 0, ?, ?, UTC_TIMESTAMP(6), UTC_TIMESTAMP(6))";

/// Inserts one no-op job; on a duplicate key, reads the existing id instead. Returns the id
/// and whether it is new.
pub(crate) async fn enqueue_one(pool: &MySqlPool, n: u64) -> anyhow::Result<(u64, bool)> {
    let key = jobs::noop_key(n);
    let inserted = sqlx::query(INSERT_ONE)
        .bind(QUEUE)
        .bind(NOOP_KIND)
        .bind(&key)
        .bind(jobs::noop_payload(n))
        .bind(0i16)
        .bind(MAX_ATTEMPTS)
        .bind(LEASE_MS)
        .execute(pool)
        .await;
    match inserted {
        Ok(done) => Ok((done.last_insert_id(), true)),
        Err(e) if code(&e) == Some(1062) => {
            let id: u64 = sqlx::query_scalar("SELECT id FROM job_queue WHERE task_key = ?")
                .bind(&key)
                .fetch_one(pool)
                .await?;
            Ok((id, false))
        }
        Err(e) => Err(e.into()),
    }
}

/// Inserts one probe job with `priority`.
pub(crate) async fn enqueue_probe(
    pool: &MySqlPool,
    n: u64,
    sent_us: u64,
    priority: i16,
) -> anyhow::Result<()> {
    let payload = serde_json::to_string(&jobs::ProbePayload { n, sent_us })?;
    sqlx::query(INSERT_ONE)
        .bind(QUEUE)
        .bind(PROBE_KIND)
        .bind(format!("probe:{n}"))
        .bind(payload)
        .bind(priority)
        .bind(MAX_ATTEMPTS)
        .bind(LEASE_MS)
        .execute(pool)
        .await?;
    Ok(())
}

/// One multi-row `INSERT` of no-op jobs `ns` (`IGNORE`: skip keys that exist).
pub(crate) async fn enqueue_rows(
    pool: &MySqlPool,
    ns: &[u64],
    ignore: bool,
) -> anyhow::Result<u64> {
    let mut qb = QueryBuilder::<MySql>::new(if ignore {
        "INSERT IGNORE INTO job_queue "
    } else {
        "INSERT INTO job_queue "
    });
    qb.push(
        "(queue, kind, task_key, payload, status, priority, run_at, attempts, max_attempts, \
         lease_ms, created_at, updated_at) ",
    );
    qb.push_values(ns, |mut row, &n| {
        row.push_bind(QUEUE)
            .push_bind(NOOP_KIND)
            .push_bind(jobs::noop_key(n))
            .push_bind(jobs::noop_payload(n))
            .push("'ready', 0, UTC_TIMESTAMP(6), 0")
            .push_bind(MAX_ATTEMPTS)
            .push_bind(LEASE_MS)
            .push("UTC_TIMESTAMP(6), UTC_TIMESTAMP(6)");
    });
    Ok(qb.build().execute(pool).await?.rows_affected())
}
