//! The claim on PostgreSQL: ready jobs taken for a worker in one short transaction, and why
//! a claim found nothing (the twins of the MySQL `claim.rs`, whose comments say why each step
//! is as it is).
//!
//! What differs: the first round of a claim locks and takes its rows in one statement (a
//! `SELECT ... FOR UPDATE SKIP LOCKED` over the claim index in a CTE, and an
//! `UPDATE ... FROM` of the locked rows). PostgreSQL takes no gap locks and its `SKIP LOCKED`
//! skips a locked row without locking the index entries it passes, so the MySQL two-step
//! read (candidates by a plain read, then point locks by primary key) buys nothing here.
//! Jobs with a concurrency or rate limit are locked by that statement but not taken: their
//! slots are taken (or the jobs blocked) as on MySQL, and an `UPDATE ... = ANY($1)` takes
//! them.

use std::time::{Duration, Instant};

use sqlx::postgres::{PgConnection, PgPool, PgRow};
use sqlx::Row;

use super::limits::{self, RowLimits, Verdict};
use super::{db_id, id_of, Store};
use crate::error::Result;
use crate::model::{Claimed, EmptyClaim};

/// The columns a claim locks and reads of each row, in this order (limits from 5 on).
const LOCKED_COLUMNS: &str = "id, attempts, max_attempts, lease_ms, priority, \
     concurrency_key, concurrency_limit, rate_key, rate_limit, rate_window_ms";

/// "This row has a concurrency or rate limit", over the columns of [`LOCKED_COLUMNS`] of `c`.
const LIMITED: &str = "((c.concurrency_key IS NOT NULL AND c.concurrency_limit > 0) \
     OR (c.rate_key IS NOT NULL AND c.rate_limit > 0 AND c.rate_window_ms > 0))";

/// The claim's locking read: up to `$2` ready jobs of queue `$1` (not paused) in claim order,
/// over the claim index, skipping rows other transactions hold.
fn lock_ready_sql() -> String {
    format!(
        "SELECT {LOCKED_COLUMNS} FROM job_queue \
         WHERE queue = $1 AND status = 'ready' \
           AND NOT EXISTS (SELECT 1 FROM job_queue_pause p WHERE p.queue = $1) \
         ORDER BY priority, id LIMIT $2 FOR UPDATE OF job_queue SKIP LOCKED"
    )
}

/// The SET of a claim's `UPDATE` of the rows it takes, for owner `$3` (or the mark given).
fn claim_set(owner: &str) -> String {
    format!(
        "status = 'running', lease_owner = {owner}, \
         lease_until = job_queue_now() + j.lease_ms * INTERVAL '1 millisecond', \
         attempts = j.attempts + 1, claimed_at = job_queue_now(), updated_at = job_queue_now()"
    )
}

/// The claim's first round in one statement (`$1` queue, `$2` how many, `$3` owner): it locks
/// up to `$2` ready jobs in claim order over the claim index, skipping rows others hold, takes
/// those without limits, and returns every row it locked (`LOCKED_COLUMNS` as they were
/// before, then `taken`) in claim order. Rows with limits stay locked, ready, for the slots.
pub fn pg_claim_sql() -> String {
    format!(
        "WITH c AS ({lock}), \
         t AS (UPDATE job_queue j SET {set} FROM c \
               WHERE j.id = c.id AND j.status = 'ready' AND NOT {LIMITED} RETURNING j.id) \
         SELECT c.*, t.id IS NOT NULL AS taken FROM c LEFT JOIN t ON t.id = c.id \
         ORDER BY c.priority, c.id",
        lock = lock_ready_sql(),
        set = claim_set("$3"),
    )
}

/// How many locking reads one claim makes at most when it finds jobs at their key's limit.
const CLAIM_ROUNDS: usize = 4;

/// How many rows a claim's later reads take, when earlier ones found jobs to block.
const BLOCK_BATCH: usize = 100;

/// Locks up to `want` ready jobs of `queue` for this transaction and returns their rows
/// ([`LOCKED_COLUMNS`]) in claim order (the MySQL `lock_ready`, in one statement).
pub(crate) async fn lock_ready(
    conn: &mut PgConnection,
    queue: &str,
    want: usize,
) -> sqlx::Result<Vec<PgRow>> {
    sqlx::query(&lock_ready_sql())
        .bind(queue)
        .bind(want as i64)
        .fetch_all(&mut *conn)
        .await
}

fn u32_of(v: i64) -> u32 {
    v.clamp(0, i64::from(u32::MAX)) as u32
}

/// `Store::claim` on PostgreSQL. The same rounds, checks and recovery as on MySQL: the
/// first round is one statement ([`pg_claim_sql`]) that also takes the unlimited jobs; each
/// `UPDATE` must match every row it was given, or the claim is rolled back; after a COMMIT
/// whose reply was lost, [`read_claimed`] finds out whether the claim was made.
pub(crate) async fn claim(
    store: &Store,
    pool: &PgPool,
    queue: &str,
    owner: &str,
    limit: usize,
) -> Result<Vec<Claimed>> {
    if limit == 0 {
        return Ok(Vec::new());
    }
    let mut taken: Vec<(u64, u32, u32, u32)> = Vec::new();
    let mut first_sent: Option<Instant> = None;
    let first_sql = pg_claim_sql();
    let update_sql = format!(
        "UPDATE job_queue j SET {set} WHERE j.id = ANY($2) AND j.status = 'ready'",
        set = claim_set("$1")
    );
    let committed: Result<()> = pg_transaction!(store, pool, |conn| {
        taken.clear();
        first_sent = None;
        let mut want = limit;
        let mut changed = false;
        for round in 0..CLAIM_ROUNDS {
            let read = if round == 0 {
                want
            } else {
                want.max(BLOCK_BATCH)
            };
            // (row, id, attempt, limits, taken by the first round's statement)
            let mut rows: Vec<(PgRow, u64, u32, Option<RowLimits>, bool)> = Vec::new();
            let fetched = if round == 0 {
                // The server's lease starts while this statement runs: a local clock read
                // just before it is never later than the server's.
                first_sent.get_or_insert_with(Instant::now);
                sqlx::query(&first_sql)
                    .bind(queue)
                    .bind(read as i64)
                    .bind(owner)
                    .fetch_all(&mut *conn)
                    .await?
            } else {
                lock_ready(conn, queue, read).await?
            };
            if fetched.is_empty() {
                break;
            }
            let fetched_len = fetched.len();
            for r in fetched {
                let id = id_of(r.try_get(0)?);
                let attempt = u32_of(r.try_get::<i64, _>(1)?) + 1;
                let limits = RowLimits::read(&r, 5)?;
                let took = round == 0 && r.try_get::<bool, _>("taken")?;
                rows.push((r, id, attempt, limits, took));
            }
            let mut round_taken = Vec::new();
            if round == 0 {
                // The statement took every unlimited row it locked; each must be among them.
                let unlimited = rows.iter().filter(|r| r.3.is_none()).count();
                let took = rows.iter().filter(|r| r.4).count();
                if took != unlimited {
                    tracing::warn!(
                        locked = unlimited,
                        matched = took,
                        "claim matched fewer rows than it locked; rolled back"
                    );
                    taken.clear();
                    return Ok(((), false));
                }
                for (r, id, attempt, _, _) in rows.iter().filter(|r| r.4) {
                    round_taken.push((*id, *attempt, u32_of(r.try_get(2)?), u32_of(r.try_get(3)?)));
                }
                if took > 0 {
                    want -= took;
                    changed = true;
                }
            }
            // The rows still to decide: all of a later round, the limited ones of the first
            // (the first round read no more than `want` rows, so none of its unlimited rows
            // would have been left).
            let pending: Vec<&(PgRow, u64, u32, Option<RowLimits>, bool)> =
                rows.iter().filter(|r| !r.4).collect();
            let mut ids: Vec<i64> = Vec::new();
            let mut blocked: Vec<(u64, i16, String)> = Vec::new();
            // A limited job left ready (its key's slot is being changed by another
            // transaction): like a blocked one, it must not hide the jobs behind it, so the
            // claim reads on.
            let mut left_limited = false;
            if !pending.is_empty() && want > 0 {
                let jobs: Vec<(u64, u32, Option<RowLimits>)> =
                    pending.iter().map(|r| (r.1, r.2, r.3.clone())).collect();
                let verdicts = if jobs.iter().any(|j| j.2.is_some()) {
                    limits::take_slots_batch(conn, &jobs, want).await?
                } else {
                    (0..jobs.len())
                        .map(|i| {
                            if i < want {
                                Verdict::Take
                            } else {
                                Verdict::Leave
                            }
                        })
                        .collect()
                };
                let mut later_taken = Vec::new();
                for ((r, id, attempt, row_limits, _), verdict) in
                    pending.iter().map(|r| &**r).zip(verdicts)
                {
                    match verdict {
                        Verdict::Take => {
                            ids.push(db_id(*id));
                            later_taken.push((
                                *id,
                                *attempt,
                                u32_of(r.try_get(2)?),
                                u32_of(r.try_get(3)?),
                            ));
                        }
                        Verdict::Block(key) => blocked.push((*id, r.try_get::<i16, _>(4)?, key)),
                        Verdict::Leave => left_limited |= row_limits.is_some(),
                    }
                }
                if !blocked.is_empty() {
                    limits::block(conn, &blocked).await?;
                    changed = true;
                }
                if !ids.is_empty() {
                    first_sent.get_or_insert_with(Instant::now);
                    // Each row moves from ready to running: rows changed are rows matched.
                    let matched = sqlx::query(&update_sql)
                        .bind(owner)
                        .bind(&ids)
                        .execute(&mut *conn)
                        .await?
                        .rows_affected();
                    if matched != ids.len() as u64 {
                        tracing::warn!(
                            locked = ids.len(),
                            matched,
                            "claim matched fewer rows than it locked; rolled back"
                        );
                        taken.clear();
                        return Ok(((), false));
                    }
                    want -= ids.len();
                    changed = true;
                }
                round_taken.extend(later_taken);
            }
            // Claim order across the round: the first round's unlimited rows and its limited
            // rows taken after them interleave by (priority, id).
            let order: std::collections::HashMap<u64, usize> =
                rows.iter().enumerate().map(|(i, r)| (r.1, i)).collect();
            round_taken.sort_by_key(|t| order.get(&t.0).copied().unwrap_or(usize::MAX));
            taken.extend(round_taken);
            if (blocked.is_empty() && !left_limited) || want == 0 || fetched_len < read {
                break;
            }
        }
        Ok(((), changed))
    });
    if taken.is_empty() {
        return committed.map(|()| Vec::new());
    }
    let sent = first_sent.unwrap_or_else(Instant::now);
    match committed {
        Ok(()) => {
            // The rows are ours now: a failed read would leave them to run out their lease
            // unrun (and spend an attempt), so it is tried a few times.
            let mut delay = Duration::from_millis(50);
            let mut tries = 1;
            loop {
                match read_claimed(store, pool, owner, &taken, sent).await {
                    Ok(claimed) => {
                        if tries > 1 {
                            tracing::info!(
                                jobs = claimed.len(),
                                tries,
                                "the jobs just claimed were read again"
                            );
                        }
                        break Ok(claimed);
                    }
                    Err(e) if tries >= 4 => break Err(e),
                    Err(e) => {
                        tracing::warn!(error = %e, jobs = taken.len(), "cannot read the jobs just claimed; retrying");
                        tokio::time::sleep(delay).await;
                        delay *= 2;
                        tries += 1;
                    }
                }
            }
        }
        Err(e) => match read_claimed(store, pool, owner, &taken, sent).await {
            // The COMMIT was sent; whether it took effect is unknown. The rows say.
            Ok(claimed) if !claimed.is_empty() => {
                tracing::warn!(
                    error = %e,
                    jobs = claimed.len(),
                    "the claim's commit reply was lost, but the claim was made; running its jobs"
                );
                Ok(claimed)
            }
            _ => Err(e),
        },
    }
}

/// Reads the rows of a claim just made (`taken`: id, attempt, max_attempts, lease_ms) by id,
/// keeping those that `owner` holds at that attempt (the MySQL `read_claimed`). PostgreSQL's
/// text is always valid UTF-8, so only the payload can be unreadable (not JSON the library
/// reads), and it is then returned with the reason.
pub(crate) async fn read_claimed(
    store: &Store,
    pool: &PgPool,
    owner: &str,
    taken: &[(u64, u32, u32, u32)],
    claimed_at: Instant,
) -> Result<Vec<Claimed>> {
    let ids: Vec<i64> = taken.iter().map(|t| db_id(t.0)).collect();
    let rows = pg_autocommit!(store, pool, |conn| sqlx::query(
        "SELECT id, attempts, status = 'running' AND lease_owner IS NOT DISTINCT FROM $1, \
         queue, kind, COALESCE(released_key, task_key) AS task_key, payload::text AS payload, \
         traceparent, metadata::text AS metadata, \
         concurrency_key IS NOT NULL AND concurrency_limit > 0 AS holds_slot \
         FROM job_queue WHERE id = ANY($2)"
    )
    .bind(owner)
    .bind(&ids)
    .fetch_all(&mut *conn))?;
    let mut by_id = std::collections::HashMap::with_capacity(rows.len());
    for r in &rows {
        by_id.insert(id_of(r.try_get(0)?), r);
    }
    let mut claimed = Vec::with_capacity(taken.len());
    for &(id, attempt, max_attempts, lease_ms) in taken {
        let Some(&r) = by_id.get(&id) else {
            continue;
        };
        if r.try_get::<i64, _>(1)? != i64::from(attempt) || !r.try_get::<bool, _>(2)? {
            continue;
        }
        let payload = r
            .try_get::<String, _>("payload")
            .map_err(|e| e.to_string())
            .and_then(|t| serde_json::from_str(&t).map_err(|e| e.to_string()))
            .map_err(|e| format!("payload is not readable JSON: {e}"));
        claimed.push(Claimed {
            id,
            queue: r.try_get("queue")?,
            kind: r.try_get("kind")?,
            task_key: r.try_get("task_key")?,
            payload,
            attempt,
            max_attempts,
            lease: Duration::from_millis(lease_ms.into()),
            claimed_at,
            traceparent: r.try_get("traceparent").ok().flatten(),
            holds_slot: r.try_get("holds_slot")?,
            metadata: r
                .try_get::<Option<String>, _>("metadata")
                .ok()
                .flatten()
                .and_then(|t| serde_json::from_str(&t).ok()),
        });
    }
    Ok(claimed)
}

/// `Store::classify_empty` on PostgreSQL: why a claim over `queues` found nothing.
pub(crate) async fn classify_empty(
    store: &Store,
    pool: &PgPool,
    queues: &[String],
) -> Result<EmptyClaim> {
    let mut paused = 0;
    let mut reason = EmptyClaim::Idle;
    for queue in queues {
        let row = pg_autocommit!(store, pool, |conn| sqlx::query(
            "SELECT \
               EXISTS(SELECT 1 FROM job_queue_pause WHERE queue = $1), \
               EXISTS(SELECT 1 FROM job_queue WHERE queue = $1 AND status = 'ready'), \
               EXISTS(SELECT 1 FROM job_queue WHERE queue = $1 AND status = 'running')"
        )
        .bind(queue)
        .fetch_one(&mut *conn))?;
        let (is_paused, ready, running): (bool, bool, bool) =
            (row.try_get(0)?, row.try_get(1)?, row.try_get(2)?);
        if is_paused {
            paused += 1;
        } else if ready {
            return Ok(EmptyClaim::Contended);
        } else if running {
            reason = EmptyClaim::LeasedOnly;
        }
    }
    if paused == queues.len() {
        return Ok(EmptyClaim::Paused);
    }
    Ok(reason)
}
