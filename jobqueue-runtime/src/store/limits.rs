//! Concurrency and rate limits by key, shared by every worker: slots taken by the claim,
//! released in the transaction that ends the claim, blocked jobs woken when a slot frees.
//!
//! A key's slots are rows of `job_queue_slot`, `slot_no` 0..limit-1 under `c:<key>`
//! (concurrency) or `r:<key>` (rate), created by the first claim that needs them. A claim
//! takes a free slot with `FOR UPDATE SKIP LOCKED`: no claim waits for another, and a key
//! with N slots has N rows to spread its locks over. A concurrency slot names the claim
//! holding it, (job id, attempt), and is freed with `WHERE job_id = ? AND attempt = ?` in
//! the transaction that ends the claim, so that a worker that lost its lease (whose own
//! write is fenced off) frees nothing, and nothing is freed twice. A rate slot holds the
//! time it may start another job: a start takes a slot whose `free_at` has passed and sets
//! it to now + the window, so at most `limit` jobs of the key start in any window.
//!
//! A job whose key has no free slot is `blocked`: out of the claim index's `ready` range, so
//! that it does not hold up the jobs behind it, and listed in `job_queue_blocked` under the
//! slot key it waits for. A freed concurrency slot wakes the first blocked job of its key
//! (back to `ready`) in the same transaction; a completion in the job's own transaction
//! (`complete_in.rs`) frees its slot by primary key and leaves the wake to the worker once
//! it sees the commit, so as to lock nothing more there; maintenance wakes blocked jobs of every key
//! that has a free slot (rate slots free with time, and a wake can be missed when a release
//! and a block commit at the same moment), and frees slots whose claim has ended without
//! releasing them.

use sqlx::mysql::MySqlConnection;
use sqlx::Row;

use super::*;

/// A free concurrency slot of a key, in slot order, skipping slots other claims hold locked.
/// Over the primary key: a key's few rows, locked in one order by every claim (the holder
/// index would also serve, but its entries move with every take and release).
pub const FREE_CONCURRENCY_SLOT: &str = "SELECT slot_no FROM job_queue_slot FORCE INDEX (PRIMARY) \
     WHERE slot_key = ? AND slot_no < ? AND job_id IS NULL \
     ORDER BY slot_no LIMIT 1 FOR UPDATE SKIP LOCKED";

/// A rate slot of a key that may start a job now.
pub const FREE_RATE_SLOT: &str = "SELECT slot_no FROM job_queue_slot FORCE INDEX (PRIMARY) \
     WHERE slot_key = ? AND slot_no < ? AND free_at <= UTC_TIMESTAMP(6) \
     ORDER BY slot_no LIMIT 1 FOR UPDATE SKIP LOCKED";

/// The blocked jobs a freed slot wakes, first in claim order.
pub const BLOCKED_SELECT: &str = "SELECT job_id FROM job_queue_blocked \
     WHERE slot_key = ? ORDER BY priority, job_id LIMIT ? FOR UPDATE SKIP LOCKED";

/// Drops the waiting row of a job that ends while blocked (by the job index of
/// `job_queue_blocked`).
pub const BLOCKED_DELETE_JOB: &str = "DELETE FROM job_queue_blocked WHERE job_id = ?";

/// The most waiting rows of jobs no longer blocked (cancelled, pruned) one wake of
/// maintenance deletes on its way to the blocked jobs it wakes: a hundred rounds of
/// [`WAKE_BATCH`], in a transaction of its own. A key with more is woken again by the next
/// pass, which goes on from there.
pub(super) const WAKE_MAX_LEFTOVERS: u32 = 10_000;

/// The same for a wake inside an outcome's or reclaim's transaction, which must end within
/// a few seconds (an outcome write is given up and retried after 5 s): thirty rounds, about
/// 120 statements. Maintenance deletes the rest.
pub(super) const WAKE_MAX_LEFTOVERS_IN_OUTCOME: u32 = 3_000;

/// The waiting rows a wake reads at once once it has met rows of jobs no longer blocked.
pub(super) const WAKE_BATCH: u32 = 100;

/// A page of the keys with blocked jobs, in key order after the key bound (maintenance reads
/// them all, a page at a time), with how many of their slots are free now. A concurrency
/// slot's `free_at` stays in the past and a rate slot's `job_id` stays NULL, so one
/// condition serves both. Every key is read, full or not: a fixed first page would let
/// keys at their limit hide the others for good, and only maintenance wakes a rate key.
/// The keys come from the blocked table's primary key, one entry per key.
///
/// Only slots under the limit of the key's first blocked job count (the job a wake takes
/// first): after a limit was lowered, the slots above it stay, and the claim, which takes
/// only slots under the limit its job carries, would block the jobs woken into them again
/// on every pass. A first row whose job is gone (pruned) counts every slot; that wake
/// deletes the row. The limit is looked up inside the count: MariaDB 10.11 fails a second
/// execution of the prepared statement ("Unknown column") when it comes from a derived
/// table of its own between the two.
pub const WAKE_SCAN: &str = "SELECT k.slot_key, \
       (SELECT COUNT(*) FROM job_queue_slot s FORCE INDEX (PRIMARY) WHERE s.slot_key = k.slot_key \
          AND s.job_id IS NULL AND s.free_at <= UTC_TIMESTAMP(6) \
          AND s.slot_no < COALESCE(\
            (SELECT IF(LEFT(k.slot_key, 2) = 'c:', j.concurrency_limit, j.rate_limit) \
             FROM job_queue j WHERE j.id = \
               (SELECT f.job_id FROM job_queue_blocked f WHERE f.slot_key = k.slot_key \
                ORDER BY f.priority, f.job_id LIMIT 1)), 1000)) \
     FROM (SELECT DISTINCT slot_key FROM job_queue_blocked WHERE slot_key > ? \
           ORDER BY slot_key LIMIT 1000) k";

/// The keys [`WAKE_SCAN`] reads at once.
pub(super) const WAKE_SCAN_PAGE: usize = 1000;

/// Held slots whose claim is over (maintenance): the job is no longer running at that
/// attempt, so no worker can release the slot any more.
pub const ORPHAN_SLOTS: &str = "SELECT s.slot_key, s.slot_no, s.job_id, s.attempt \
     FROM job_queue_slot s FORCE INDEX (job_queue_slot_holder) \
     LEFT JOIN job_queue j ON j.id = s.job_id \
     WHERE s.job_id IS NOT NULL \
       AND (j.id IS NULL OR j.status <> 'running' OR j.attempts <> s.attempt) \
     LIMIT 100";

/// The most slots one key may have (a concurrency of 1,000, or 1,000 starts per window).
pub(crate) const MAX_SLOTS: u32 = 1000;

/// The limits of a job the claim has locked, as its row holds them.
#[derive(Debug, Clone)]
pub(super) struct RowLimits {
    pub(super) concurrency: Option<(Vec<u8>, u32)>,
    pub(super) rate: Option<(Vec<u8>, u32, u32)>,
}

impl RowLimits {
    /// Reads the limit columns (`concurrency_key`, `concurrency_limit`, `rate_key`,
    /// `rate_limit`, `rate_window_ms`) from `first` on; `None` for an unlimited job.
    pub(super) fn read(r: &sqlx::mysql::MySqlRow, first: usize) -> sqlx::Result<Option<Self>> {
        let ckey: Option<Vec<u8>> = r.try_get(first)?;
        let climit: u32 = r.try_get(first + 1)?;
        let rkey: Option<Vec<u8>> = r.try_get(first + 2)?;
        let rlimit: u32 = r.try_get(first + 3)?;
        let window: u32 = r.try_get(first + 4)?;
        let concurrency = ckey
            .filter(|_| climit > 0)
            .map(|k| (slot_key(b"c:", &k), climit.min(MAX_SLOTS)));
        let rate = rkey
            .filter(|_| rlimit > 0 && window > 0)
            .map(|k| (slot_key(b"r:", &k), rlimit.min(MAX_SLOTS), window));
        Ok((concurrency.is_some() || rate.is_some()).then_some(RowLimits { concurrency, rate }))
    }
}

fn slot_key(prefix: &[u8], key: &[u8]) -> Vec<u8> {
    let mut k = prefix.to_vec();
    k.extend_from_slice(key);
    k
}

/// Takes the slots job `id`'s claim number `attempt` needs, in the claim's transaction.
/// `None`: taken (or none needed). `Some(slot_key)`: a limit is full; nothing was taken, and
/// the job must wait for a slot of that key.
pub(super) async fn take_slots(
    conn: &mut MySqlConnection,
    id: u64,
    attempt: u32,
    limits: &RowLimits,
) -> sqlx::Result<Option<Vec<u8>>> {
    let concurrency = match &limits.concurrency {
        None => None,
        Some((key, n)) => match free_slot(conn, FREE_CONCURRENCY_SLOT, key, *n).await? {
            Some(no) => Some((key, no)),
            None => return Ok(Some(key.clone())),
        },
    };
    let rate = match &limits.rate {
        None => None,
        Some((key, n, window)) => match free_slot(conn, FREE_RATE_SLOT, key, *n).await? {
            Some(no) => Some((key, no, *window)),
            None => return Ok(Some(key.clone())),
        },
    };
    if let Some((key, no)) = concurrency {
        sqlx::query(
            "UPDATE job_queue_slot SET job_id = ?, attempt = ? WHERE slot_key = ? AND slot_no = ?",
        )
        .bind(id)
        .bind(attempt)
        .bind(key)
        .bind(no)
        .execute(&mut *conn)
        .await?;
    }
    if let Some((key, no, window)) = rate {
        sqlx::query(
            "UPDATE job_queue_slot SET free_at = UTC_TIMESTAMP(6) + INTERVAL ? MICROSECOND \
             WHERE slot_key = ? AND slot_no = ?",
        )
        .bind(u64::from(window) * 1000)
        .bind(key)
        .bind(no)
        .execute(&mut *conn)
        .await?;
    }
    Ok(None)
}

/// What a claim does with a slot it takes: the claim (job id, attempt) that holds a
/// concurrency slot, or the window in microseconds that a rate slot is busy for.
type SlotUse = (Option<(u64, u32)>, u64);

/// What a claim does with one row it read.
#[derive(Debug)]
pub(super) enum Verdict {
    /// Claim it (its slots, if it needs any, are taken).
    Take,
    /// Block it: its key (this slot key) is at its limit.
    Block(Vec<u8>),
    /// Leave it ready: the claim has as many jobs as it wants.
    Leave,
}

/// The slots of the jobs of one claim read (id, attempt, limits if any, in claim order),
/// taken for the first `want` jobs that can run, with a few statements for the whole read
/// instead of a few per job: one locking read of the free slots of every key, one plain
/// read and one insert for keys whose slots do not exist yet, and one update per slot taken
/// from an existing key.
pub(super) async fn take_slots_batch(
    conn: &mut MySqlConnection,
    jobs: &[(u64, u32, Option<RowLimits>)],
    want: usize,
) -> sqlx::Result<Vec<Verdict>> {
    use std::collections::{BTreeMap, BTreeSet, VecDeque};
    // Each key's limit (and window), as the first of its jobs in the batch states it.
    let mut limit_of: BTreeMap<Vec<u8>, (u32, Option<u32>)> = BTreeMap::new();
    for (_, _, l) in jobs {
        let Some(l) = l else { continue };
        if let Some((k, n)) = &l.concurrency {
            limit_of.entry(k.clone()).or_insert((*n, None));
        }
        if let Some((k, n, w)) = &l.rate {
            limit_of.entry(k.clone()).or_insert((*n, Some(*w)));
        }
    }
    let keys: Vec<Vec<u8>> = limit_of.keys().cloned().collect();
    // How many slots of each key this read could take at most: one per job of the key, and
    // no more than the claim wants.
    let mut need: BTreeMap<&[u8], usize> = BTreeMap::new();
    for (_, _, l) in jobs {
        let Some(l) = l else { continue };
        let c = l.concurrency.as_ref().map(|(k, _)| k);
        let r = l.rate.as_ref().map(|(k, _, _)| k);
        for k in c.into_iter().chain(r) {
            let n = need.entry(k.as_slice()).or_default();
            *n = (*n + 1).min(want);
        }
    }
    // The free slots, by a plain read (it locks nothing), then as many of each key as the
    // read could take, locked by primary key. Locking every free slot of a key instead would
    // make concurrent claims find the key full and block its jobs, with nothing to wake them
    // when this claim takes fewer: a claim refilling one freed worker slot wants one job.
    let mut candidates: BTreeMap<Vec<u8>, VecDeque<u32>> = BTreeMap::new();
    for chunk in keys.chunks(128) {
        let sql = format!(
            "SELECT slot_key, slot_no FROM job_queue_slot FORCE INDEX (PRIMARY) \
             WHERE slot_key IN ({}) AND job_id IS NULL AND free_at <= UTC_TIMESTAMP(6) \
             ORDER BY slot_key, slot_no",
            placeholders(padded_len(chunk.len()))
        );
        let mut q = sqlx::query(&sql);
        for k in padded(chunk) {
            q = q.bind(k);
        }
        for r in q.fetch_all(&mut *conn).await? {
            let (k, no): (Vec<u8>, u32) = (r.try_get(0)?, r.try_get(1)?);
            if limit_of.get(&k).is_some_and(|(n, _)| no < *n) {
                candidates.entry(k).or_default().push_back(no);
            }
        }
    }
    // Free slots, locked: held or locked ones are left to their holders. A slot another
    // claim has locked is tried no more, and the next free one of its key is tried instead.
    let mut free: BTreeMap<Vec<u8>, VecDeque<u32>> = BTreeMap::new();
    // Keys with a free slot that another claim has locked: their jobs are left ready, not
    // blocked, since that claim may not take the slot.
    let mut contended: BTreeSet<Vec<u8>> = BTreeSet::new();
    loop {
        let mut wanted: Vec<(Vec<u8>, u32)> = Vec::new();
        for (k, nos) in &mut candidates {
            let have = free.get(k).map_or(0, VecDeque::len);
            let more = need
                .get(k.as_slice())
                .copied()
                .unwrap_or(0)
                .saturating_sub(have);
            for _ in 0..more {
                match nos.pop_front() {
                    Some(no) => wanted.push((k.clone(), no)),
                    None => break,
                }
            }
        }
        if wanted.is_empty() {
            break;
        }
        for chunk in wanted.chunks(128) {
            let locked = lock_free_slots(conn, chunk).await?;
            for (k, no) in chunk {
                if locked.contains(&(k.clone(), *no)) {
                    free.entry(k.clone()).or_default().push_back(*no);
                } else {
                    contended.insert(k.clone());
                }
            }
        }
    }
    for nos in free.values_mut() {
        nos.make_contiguous().sort_unstable();
    }
    // Keys with nothing free: are their slots missing (a new key, a raised limit)?
    let mut created: Vec<(Vec<u8>, u32)> = Vec::new();
    let short: Vec<Vec<u8>> = keys
        .iter()
        .filter(|k| !free.contains_key(*k) && !contended.contains(*k))
        .cloned()
        .collect();
    for chunk in short.chunks(128) {
        let sql = format!(
            "SELECT slot_key, slot_no FROM job_queue_slot WHERE slot_key IN ({})",
            placeholders(padded_len(chunk.len()))
        );
        let mut q = sqlx::query(&sql);
        for k in padded(chunk) {
            q = q.bind(k);
        }
        let mut existing: BTreeMap<Vec<u8>, Vec<u32>> = BTreeMap::new();
        for r in q.fetch_all(&mut *conn).await? {
            let (k, no): (Vec<u8>, u32) = (r.try_get(0)?, r.try_get(1)?);
            existing.entry(k).or_default().push(no);
        }
        for k in chunk {
            let n = limit_of[k].0;
            let have = existing.get(k).map(Vec::as_slice).unwrap_or(&[]);
            for no in (0..n).filter(|no| !have.contains(no)) {
                created.push((k.clone(), no));
                free.entry(k.clone()).or_default().push_back(no);
            }
        }
    }
    // Hand out slots in claim order. A job whose key has no slot left for it waits for one,
    // unless a free slot of the key was only locked by another claim.
    let full = |k: &Vec<u8>| match contended.contains(k) {
        true => Verdict::Leave,
        false => Verdict::Block(k.clone()),
    };
    let mut out = Vec::with_capacity(jobs.len());
    // (key, slot_no) -> the claim holding it (concurrency) or the window in µs (rate).
    let mut taken: BTreeMap<(Vec<u8>, u32), SlotUse> = BTreeMap::new();
    let mut takers = 0;
    for (id, attempt, l) in jobs {
        if takers == want {
            out.push(Verdict::Leave);
            continue;
        }
        let Some(l) = l else {
            takers += 1;
            out.push(Verdict::Take);
            continue;
        };
        let c = match &l.concurrency {
            None => None,
            Some((k, _)) => match free.get_mut(k).and_then(VecDeque::pop_front) {
                Some(no) => Some((k, no)),
                None => {
                    out.push(full(k));
                    continue;
                }
            },
        };
        let r = match &l.rate {
            None => None,
            Some((k, _, window)) => match free.get_mut(k).and_then(VecDeque::pop_front) {
                Some(no) => Some((k, no, *window)),
                None => {
                    if let Some((ck, no)) = c {
                        free.get_mut(ck).expect("taken from it").push_front(no);
                    }
                    out.push(full(k));
                    continue;
                }
            },
        };
        if let Some((k, no)) = c {
            taken.insert((k.clone(), no), (Some((*id, *attempt)), 0));
        }
        if let Some((k, no, window)) = r {
            taken.insert((k.clone(), no), (None, u64::from(window) * 1000));
        }
        takers += 1;
        out.push(Verdict::Take);
    }
    // New slots in one insert, in key order (two claims creating the same keys wait for each
    // other in one direction). One that another claim created meanwhile fails the insert
    // (1062): its slots are then taken one job at a time, as that path expects.
    if !created.is_empty() {
        created.sort();
        for chunk in created.chunks(256) {
            let sql = format!(
                "INSERT INTO job_queue_slot (slot_key, slot_no, job_id, attempt, free_at) VALUES {}",
                vec!["(?, ?, ?, ?, UTC_TIMESTAMP(6) + INTERVAL ? MICROSECOND)"; chunk.len()].join(", ")
            );
            let mut q = sqlx::query(&sql).persistent(false);
            for (k, no) in chunk {
                let (holder, window_us) = taken.remove(&(k.clone(), *no)).unwrap_or((None, 0));
                q = q
                    .bind(k)
                    .bind(*no)
                    .bind(holder.map(|h| h.0))
                    .bind(holder.map(|h| h.1))
                    .bind(window_us);
            }
            if let Err(e) = q.execute(&mut *conn).await {
                if is_key_conflict(&e) {
                    let mut one_by_one = Vec::with_capacity(jobs.len());
                    let mut takers = 0;
                    for (id, attempt, l) in jobs {
                        let verdict = match l {
                            _ if takers == want => Verdict::Leave,
                            None => Verdict::Take,
                            Some(l) => match take_slots(conn, *id, *attempt, l).await? {
                                None => Verdict::Take,
                                Some(key) => Verdict::Block(key),
                            },
                        };
                        takers += matches!(verdict, Verdict::Take) as usize;
                        one_by_one.push(verdict);
                    }
                    return Ok(one_by_one);
                }
                return Err(e);
            }
        }
    }
    for ((k, no), (holder, window_us)) in taken {
        let q = match holder {
            Some((id, attempt)) => sqlx::query(
                "UPDATE job_queue_slot SET job_id = ?, attempt = ? WHERE slot_key = ? AND slot_no = ?",
            )
            .bind(id)
            .bind(attempt),
            None => sqlx::query(
                "UPDATE job_queue_slot SET free_at = UTC_TIMESTAMP(6) + INTERVAL ? MICROSECOND \
                 WHERE slot_key = ? AND slot_no = ?",
            )
            .bind(window_us),
        };
        q.bind(k).bind(no).execute(&mut *conn).await?;
    }
    Ok(out)
}

/// Locks those of `slots` (slot key, slot number) that are free now, skipping any another
/// transaction has locked; returns the ones locked. By primary key, so that only these
/// records are locked (the same on MySQL 8.0 and MariaDB 10.6+, which both read a
/// row-constructor `IN` list as ranges of the index).
async fn lock_free_slots(
    conn: &mut MySqlConnection,
    slots: &[(Vec<u8>, u32)],
) -> sqlx::Result<Vec<(Vec<u8>, u32)>> {
    let sql = lock_free_slots_sql(padded_len(slots.len()));
    let mut q = sqlx::query(&sql);
    for (k, no) in padded(slots) {
        q = q.bind(k).bind(no);
    }
    q.fetch_all(&mut *conn)
        .await?
        .iter()
        .map(|r| Ok((r.try_get(0)?, r.try_get(1)?)))
        .collect()
}

/// The claim's locking read of `n` given slots (slot key, slot number pairs), of those that
/// are free now.
pub fn lock_free_slots_sql(n: usize) -> String {
    format!(
        "SELECT slot_key, slot_no FROM job_queue_slot FORCE INDEX (PRIMARY) \
         WHERE (slot_key, slot_no) IN ({}) AND job_id IS NULL AND free_at <= UTC_TIMESTAMP(6) \
         FOR UPDATE SKIP LOCKED",
        vec!["(?, ?)"; n.max(1)].join(", ")
    )
}

/// A free slot of `key` by `select`, locked; the key's missing slots are created first when
/// it has fewer than `n`.
async fn free_slot(
    conn: &mut MySqlConnection,
    select: &str,
    key: &[u8],
    n: u32,
) -> sqlx::Result<Option<u32>> {
    async fn take(
        conn: &mut MySqlConnection,
        select: &str,
        key: &[u8],
        n: u32,
    ) -> sqlx::Result<Option<u32>> {
        sqlx::query_scalar(select)
            .bind(key)
            .bind(n)
            .fetch_optional(conn)
            .await
    }
    if let Some(no) = take(conn, select, key, n).await? {
        return Ok(Some(no));
    }
    // None free: held, locked by other claims, or not created yet. A plain read tells the
    // last apart; only the missing slot numbers are inserted, so that the insert takes no
    // lock on a slot another claim holds.
    let existing: Vec<u32> = sqlx::query_scalar(
        "SELECT slot_no FROM job_queue_slot WHERE slot_key = ? AND slot_no < ? ORDER BY slot_no",
    )
    .bind(key)
    .bind(n)
    .fetch_all(&mut *conn)
    .await?;
    if existing.len() >= n as usize {
        return Ok(None);
    }
    let missing: Vec<u32> = (0..n).filter(|no| !existing.contains(no)).collect();
    // Created in slot order by every claim, so two claims creating one key's slots wait
    // for each other in one direction only. Rare (once per key): not kept prepared.
    for chunk in missing.chunks(100) {
        let sql = format!(
            "INSERT IGNORE INTO job_queue_slot (slot_key, slot_no) VALUES {}",
            vec!["(?, ?)"; chunk.len()].join(", ")
        );
        let mut q = sqlx::query(&sql).persistent(false);
        for no in chunk {
            q = q.bind(key).bind(*no);
        }
        q.execute(&mut *conn).await?;
    }
    take(conn, select, key, n).await
}

/// Marks jobs blocked (each with the slot key it waits for and its priority), in the
/// claim's transaction, where their rows are locked.
pub(super) async fn block(
    conn: &mut MySqlConnection,
    blocked: &[(u64, i16, Vec<u8>)],
) -> sqlx::Result<()> {
    if blocked.is_empty() {
        return Ok(());
    }
    let ids: Vec<u64> = blocked.iter().map(|b| b.0).collect();
    let sql = format!(
        "UPDATE job_queue SET status = 'blocked', updated_at = UTC_TIMESTAMP(6) \
         WHERE id IN ({}) AND status = 'ready'",
        placeholders(padded_len(ids.len()))
    );
    let mut q = sqlx::query(&sql);
    for id in padded(&ids) {
        q = q.bind(id);
    }
    q.execute(&mut *conn).await?;
    // A job waits under one key at a time. A row it was left under another key (by a bulk
    // cancel and a retry, or an operator's SQL) would have a wake of that key spend its
    // slot on this job, which then blocks again, while that key's own jobs wait on. Found
    // by a plain read (rare: a job being blocked normally has no row), deleted by primary
    // key, the order a wake locks rows in.
    let sql = format!(
        "SELECT slot_key, priority, job_id FROM job_queue_blocked WHERE job_id IN ({})",
        placeholders(padded_len(ids.len()))
    );
    let mut q = sqlx::query_as::<_, (Vec<u8>, i16, u64)>(&sql);
    for id in padded(&ids) {
        q = q.bind(id);
    }
    for (key, priority, id) in q.fetch_all(&mut *conn).await? {
        let now = blocked.iter().find(|b| b.0 == id).map(|b| &b.2);
        if now != Some(&key) {
            sqlx::query(
                "DELETE FROM job_queue_blocked WHERE slot_key = ? AND priority = ? AND job_id = ?",
            )
            .bind(&key)
            .bind(priority)
            .bind(id)
            .execute(&mut *conn)
            .await?;
        }
    }
    // Padded by repeating the last row, which IGNORE drops, to keep the arities few.
    let rows = padded(blocked);
    let sql = format!(
        "INSERT IGNORE INTO job_queue_blocked (slot_key, priority, job_id) VALUES {}",
        vec!["(?, ?, ?)"; rows.len()].join(", ")
    );
    let mut q = sqlx::query(&sql);
    for (id, priority, key) in &rows {
        q = q.bind(key).bind(*priority).bind(*id);
    }
    q.execute(&mut *conn).await?;
    Ok(())
}

/// Frees the concurrency slots that `claims` (job id, attempt) hold and wakes a blocked job
/// of each freed key, inside the caller's transaction. Every path that ends a claim calls
/// this where it writes the row's new state: success, retry, failure, cancel, hand-back,
/// deferral, reclaim; all but a completion in the job's own transaction, which frees its
/// slot by primary key instead (this function's locking reads by holder take gap locks
/// under REPEATABLE READ, held there until the job commits). A claim that holds no slot (an unlimited job), or whose slot was freed
/// already, matches nothing. Returns how many slots were freed.
pub(crate) async fn release_claims(
    conn: &mut MySqlConnection,
    claims: &[(u64, u32)],
) -> sqlx::Result<u64> {
    let mut freed = 0;
    for chunk in claims.chunks(128) {
        let ids: Vec<u64> = chunk.iter().map(|c| c.0).collect();
        let tokens: Vec<String> = chunk.iter().map(|(id, a)| format!("{id}:{a}")).collect();
        let where_held = format!(
            "WHERE job_id IN ({p}) AND CONCAT(job_id, ':', attempt) IN ({p})",
            p = placeholders(padded_len(chunk.len()))
        );
        let keys: Vec<Vec<u8>> = {
            let sql = format!("SELECT slot_key FROM job_queue_slot {where_held} FOR UPDATE");
            let mut q = sqlx::query_scalar(&sql);
            for id in padded(&ids) {
                q = q.bind(id);
            }
            for t in padded(&tokens) {
                q = q.bind(t);
            }
            q.fetch_all(&mut *conn).await?
        };
        if keys.is_empty() {
            continue;
        }
        let sql = format!("UPDATE job_queue_slot SET job_id = NULL, attempt = NULL {where_held}");
        let mut q = sqlx::query(&sql);
        for id in padded(&ids) {
            q = q.bind(id);
        }
        for t in padded(&tokens) {
            q = q.bind(t);
        }
        freed += q.execute(&mut *conn).await?.rows_affected();
        // Only keys with blocked jobs are woken: one read finds them.
        let mut distinct = keys.clone();
        distinct.sort();
        distinct.dedup();
        let sql = format!(
            "SELECT DISTINCT slot_key FROM job_queue_blocked WHERE slot_key IN ({})",
            placeholders(padded_len(distinct.len()))
        );
        let mut q = sqlx::query_scalar(&sql);
        for k in padded(&distinct) {
            q = q.bind(k);
        }
        let waiting: Vec<Vec<u8>> = q.fetch_all(&mut *conn).await?;
        for key in keys.iter().filter(|k| waiting.contains(k)) {
            wake(conn, key, 1, WAKE_MAX_LEFTOVERS_IN_OUTCOME).await?;
        }
    }
    Ok(freed)
}

/// Puts up to `n` blocked jobs of `key` back to `ready`, first in claim order, skipping
/// jobs another transaction is waking. Returns how many. Rows of jobs no longer blocked
/// (cancelled or pruned meanwhile, by a path that left the row) are deleted on the way:
/// up to `max_leftovers` of them ([`WAKE_MAX_LEFTOVERS`] for maintenance,
/// [`WAKE_MAX_LEFTOVERS_IN_OUTCOME`] inside an outcome's transaction), so that they never keep a free slot from the
/// blocked jobs behind them. Once a round has met such rows, the next ones read
/// [`WAKE_BATCH`] rows at a time: a wake runs inside an outcome's or reclaim's transaction,
/// which has a few seconds, and a few statements per leftover row would outlast it.
pub(super) async fn wake(
    conn: &mut MySqlConnection,
    key: &[u8],
    n: u32,
    max_leftovers: u32,
) -> sqlx::Result<u32> {
    let mut woken = 0;
    let mut leftovers = 0u32;
    // Every round wakes a job or deletes a leftover row, both bounded: it ends.
    while woken < n && leftovers < max_leftovers {
        let want = n - woken;
        let read = if leftovers == 0 {
            want
        } else {
            want.max(WAKE_BATCH)
        };
        let ids: Vec<u64> = sqlx::query_scalar(BLOCKED_SELECT)
            .bind(key)
            .bind(read)
            .fetch_all(&mut *conn)
            .await?;
        if ids.is_empty() {
            break;
        }
        // The rows to wake, and those of jobs no longer blocked. With no more rows than jobs
        // to wake, the guarded UPDATE tells them apart; with more, a plain read of the jobs
        // says which are still blocked (the rest of those stay, locked until the commit).
        let (chosen, mut gone): (Vec<u64>, Vec<u64>) = if ids.len() as u32 <= want {
            (ids.clone(), Vec::new())
        } else {
            let sql = format!(
                "SELECT id FROM job_queue WHERE id IN ({}) AND status = 'blocked'",
                placeholders(padded_len(ids.len()))
            );
            let mut q = sqlx::query_scalar(&sql);
            for id in padded(&ids) {
                q = q.bind(id);
            }
            let blocked: Vec<u64> = q.fetch_all(&mut *conn).await?;
            let (still, gone): (Vec<u64>, Vec<u64>) =
                ids.iter().partition(|id| blocked.contains(id));
            (still.into_iter().take(want as usize).collect(), gone)
        };
        let mut now_woken = 0;
        if !chosen.is_empty() {
            let sql = format!(
                "UPDATE job_queue SET status = 'ready', updated_at = UTC_TIMESTAMP(6) \
                 WHERE id IN ({}) AND status = 'blocked'",
                placeholders(padded_len(chosen.len()))
            );
            let mut q = sqlx::query(&sql);
            for id in padded(&chosen) {
                q = q.bind(id);
            }
            now_woken = q.execute(&mut *conn).await?.rows_affected() as u32;
        }
        woken += now_woken;
        leftovers += gone.len() as u32 + (chosen.len() as u32 - now_woken);
        gone.extend(chosen);
        let sql = format!(
            "DELETE FROM job_queue_blocked WHERE slot_key = ? AND job_id IN ({})",
            placeholders(padded_len(gone.len()))
        );
        let mut q = sqlx::query(&sql).bind(key);
        for id in padded(&gone) {
            q = q.bind(id);
        }
        q.execute(&mut *conn).await?;
    }
    Ok(woken)
}

impl Store {
    /// Maintenance's part of the limits: frees slots whose claim ended without releasing
    /// them, then wakes the blocked jobs of every key with free slots. Returns (slots freed,
    /// jobs woken).
    pub async fn limits_pass(&self) -> Result<(u64, u64)> {
        on_postgres!(self, limits::limits_pass());
        let orphans =
            on_connection!(self, |conn| sqlx::query(ORPHAN_SLOTS).fetch_all(&mut *conn)).await?;
        let mut freed = 0;
        for r in &orphans {
            let (key, no, id, attempt): (Vec<u8>, u32, u64, u32) =
                (r.try_get(0)?, r.try_get(1)?, r.try_get(2)?, r.try_get(3)?);
            // Fenced by the holder: a slot taken again since the read is left alone.
            freed += autocommit!(self, |conn| sqlx::query(
                "UPDATE job_queue_slot SET job_id = NULL, attempt = NULL \
                 WHERE slot_key = ? AND slot_no = ? AND job_id = ? AND attempt = ?"
            )
            .bind(&key)
            .bind(no)
            .bind(id)
            .bind(attempt)
            .execute(&mut *conn))?
            .rows_affected();
        }
        let mut woken = 0u64;
        let mut after: Vec<u8> = Vec::new();
        loop {
            let keys = on_connection!(self, |conn| sqlx::query(WAKE_SCAN)
                .bind(&after)
                .fetch_all(&mut *conn))
            .await?;
            for r in &keys {
                let (key, free): (Vec<u8>, i64) = (r.try_get(0)?, r.try_get(1)?);
                if free <= 0 {
                    continue;
                }
                let free = free.min(i64::from(MAX_SLOTS)) as u32;
                woken += u64::from(transaction!(self, |conn| {
                    let n = wake(conn, &key, free, WAKE_MAX_LEFTOVERS).await?;
                    Ok((n, n > 0))
                })?);
            }
            match keys.last() {
                Some(last) if keys.len() == WAKE_SCAN_PAGE => after = last.try_get(0)?,
                _ => break,
            }
        }
        Ok((freed, woken))
    }
}
