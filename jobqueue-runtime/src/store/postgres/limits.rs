//! Concurrency and rate limits by key on PostgreSQL: the twins of the MySQL `limits.rs`,
//! whose comments say what each step guarantees and why.
//!
//! What differs:
//! - Slot keys are TEXT (`c:<key>`, `r:<key>`), read and bound as `String`.
//! - Lists go as arrays (`= ANY($1)`, `unnest($1, $2)`), one statement text per list.
//! - A failed statement aborts the whole transaction, so no step may rely on a duplicate-key
//!   error: missing slots are created with `ON CONFLICT DO NOTHING` (free, before they are
//!   locked like any other free slot) and blocked rows inserted the same way. The MySQL
//!   fallback that takes slots one job at a time after a duplicate (`take_slots`,
//!   `free_slot`) has no twin: nothing here needs it.
//! - A claim's slots are written by one `UPDATE ... FROM unnest(...)`, and the release of a
//!   claim's slots is one `UPDATE ... RETURNING slot_key` (MySQL locks them by a read first).
//! - There are no gap locks: a locking read by a secondary index locks only the rows it
//!   returns, so no statement names its index.

use std::collections::{BTreeMap, BTreeSet, VecDeque};

use sqlx::postgres::{PgConnection, PgPool, PgRow};
use sqlx::Row;

use super::{db_id, Store};
use crate::error::Result;
use crate::store::limits::{
    MAX_SLOTS, WAKE_BATCH, WAKE_MAX_LEFTOVERS, WAKE_MAX_LEFTOVERS_IN_OUTCOME, WAKE_SCAN_PAGE,
};

/// The blocked jobs a freed slot wakes, first in claim order (the MySQL `BLOCKED_SELECT`).
pub(crate) const PG_BLOCKED_SELECT: &str = "SELECT job_id FROM job_queue_blocked \
     WHERE slot_key = $1 ORDER BY priority, job_id LIMIT $2 FOR UPDATE SKIP LOCKED";

/// Held slots whose claim is over (the MySQL `ORPHAN_SLOTS`).
pub(crate) const PG_ORPHAN_SLOTS: &str = "SELECT s.slot_key, s.slot_no, s.job_id, s.attempt \
     FROM job_queue_slot s LEFT JOIN job_queue j ON j.id = s.job_id \
     WHERE s.job_id IS NOT NULL \
       AND (j.id IS NULL OR j.status <> 'running' OR j.attempts <> s.attempt) \
     LIMIT 100";

/// A page of the keys with blocked jobs with how many of their slots are free under the
/// limit of the key's first blocked job (the MySQL `WAKE_SCAN`; PostgreSQL needs no
/// workaround for the derived table, but the statement keeps the same shape).
pub(crate) const PG_WAKE_SCAN: &str = "SELECT k.slot_key, \
       (SELECT COUNT(*) FROM job_queue_slot s WHERE s.slot_key = k.slot_key \
          AND s.job_id IS NULL AND s.free_at <= job_queue_now() \
          AND s.slot_no < COALESCE(\
            (SELECT CASE WHEN left(k.slot_key, 2) = 'c:' THEN j.concurrency_limit ELSE j.rate_limit END \
             FROM job_queue j WHERE j.id = \
               (SELECT f.job_id FROM job_queue_blocked f WHERE f.slot_key = k.slot_key \
                ORDER BY f.priority, f.job_id LIMIT 1)), 1000)) \
     FROM (SELECT DISTINCT slot_key FROM job_queue_blocked WHERE slot_key > $1 \
           ORDER BY slot_key LIMIT 1000) k";

/// The claim's locking read of given slots (`$1` keys, `$2` numbers, pairwise) that are
/// free now, skipping those another transaction holds (the MySQL `lock_free_slots_sql`).
pub(crate) const PG_LOCK_FREE_SLOTS: &str = "SELECT s.slot_key, s.slot_no FROM job_queue_slot s \
     JOIN unnest($1::text[], $2::bigint[]) AS v(slot_key, slot_no) \
       ON s.slot_key = v.slot_key AND s.slot_no = v.slot_no \
     WHERE s.job_id IS NULL AND s.free_at <= job_queue_now() \
     FOR UPDATE OF s SKIP LOCKED";

/// The limits of a job the claim has locked, as its row holds them (the MySQL `RowLimits`).
#[derive(Debug, Clone)]
pub(crate) struct RowLimits {
    pub(crate) concurrency: Option<(String, u32)>,
    pub(crate) rate: Option<(String, u32, u32)>,
}

fn u32_of(v: i64) -> u32 {
    v.clamp(0, i64::from(u32::MAX)) as u32
}

impl RowLimits {
    /// Reads `concurrency_key`, `concurrency_limit`, `rate_key`, `rate_limit`,
    /// `rate_window_ms` from column `first` on; `None` for an unlimited job.
    pub(crate) fn read(r: &PgRow, first: usize) -> sqlx::Result<Option<Self>> {
        let ckey: Option<String> = r.try_get(first)?;
        let climit = u32_of(r.try_get(first + 1)?);
        let rkey: Option<String> = r.try_get(first + 2)?;
        let rlimit = u32_of(r.try_get(first + 3)?);
        let window = u32_of(r.try_get(first + 4)?);
        let concurrency = ckey
            .filter(|_| climit > 0)
            .map(|k| (format!("c:{k}"), climit.min(MAX_SLOTS)));
        let rate = rkey
            .filter(|_| rlimit > 0 && window > 0)
            .map(|k| (format!("r:{k}"), rlimit.min(MAX_SLOTS), window));
        Ok((concurrency.is_some() || rate.is_some()).then_some(RowLimits { concurrency, rate }))
    }
}

/// What a claim does with one row it read (the MySQL `Verdict`).
#[derive(Debug)]
pub(crate) enum Verdict {
    /// Claim it (its slots, if it needs any, are taken).
    Take,
    /// Block it: its key (this slot key) is at its limit.
    Block(String),
    /// Leave it ready: the claim has as many jobs as it wants.
    Leave,
}

/// The slots of the jobs of one claim read (id, attempt, limits if any, in claim order),
/// taken for the first `want` jobs that can run: the MySQL `take_slots_batch`. Missing slots
/// are created free with `ON CONFLICT DO NOTHING` and then locked like the others (MySQL
/// creates them taken and falls back to one job at a time on a duplicate, which would abort
/// a PostgreSQL transaction).
pub(crate) async fn take_slots_batch(
    conn: &mut PgConnection,
    jobs: &[(u64, u32, Option<RowLimits>)],
    want: usize,
) -> sqlx::Result<Vec<Verdict>> {
    let mut limit_of: BTreeMap<String, u32> = BTreeMap::new();
    let mut need: BTreeMap<String, usize> = BTreeMap::new();
    for (_, _, l) in jobs {
        let Some(l) = l else { continue };
        let c = l.concurrency.as_ref().map(|(k, n)| (k, *n));
        let r = l.rate.as_ref().map(|(k, n, _)| (k, *n));
        for (k, n) in c.into_iter().chain(r) {
            limit_of.entry(k.clone()).or_insert(n);
            let e = need.entry(k.clone()).or_default();
            *e = (*e + 1).min(want);
        }
    }
    let keys: Vec<String> = limit_of.keys().cloned().collect();
    // A plain read of every slot of the keys (it locks nothing): which are free, which are
    // missing (a new key, a raised limit).
    let rows = sqlx::query(
        "SELECT slot_key, slot_no, job_id IS NULL AND free_at <= job_queue_now() \
         FROM job_queue_slot WHERE slot_key = ANY($1) ORDER BY slot_key, slot_no",
    )
    .bind(&keys)
    .fetch_all(&mut *conn)
    .await?;
    let mut candidates: BTreeMap<String, VecDeque<u32>> = BTreeMap::new();
    let mut existing: BTreeMap<String, BTreeSet<u32>> = BTreeMap::new();
    for r in &rows {
        let (k, no, free): (String, i64, bool) = (r.try_get(0)?, r.try_get(1)?, r.try_get(2)?);
        let no = u32_of(no);
        existing.entry(k.clone()).or_default().insert(no);
        if free && limit_of.get(&k).is_some_and(|n| no < *n) {
            candidates.entry(k).or_default().push_back(no);
        }
    }
    // Missing slots under a key's limit, created free in key and slot order (two claims
    // creating the same slots wait for each other in one direction), then candidates like
    // the others. One that another claim created meanwhile is not inserted again (that
    // claim has committed it by then, or the insert waited for its end); the locking read
    // below takes it if it is still free.
    let mut missing: (Vec<String>, Vec<i64>) = (Vec::new(), Vec::new());
    for (k, n) in &limit_of {
        let have = existing.get(k);
        for no in (0..*n).filter(|no| !have.is_some_and(|h| h.contains(no))) {
            missing.0.push(k.clone());
            missing.1.push(i64::from(no));
            candidates.entry(k.clone()).or_default().push_back(no);
        }
    }
    if !missing.0.is_empty() {
        sqlx::query(
            "INSERT INTO job_queue_slot (slot_key, slot_no) \
             SELECT * FROM unnest($1::text[], $2::bigint[]) ORDER BY 1, 2 \
             ON CONFLICT DO NOTHING",
        )
        .bind(&missing.0)
        .bind(&missing.1)
        .execute(&mut *conn)
        .await?;
        for nos in candidates.values_mut() {
            nos.make_contiguous().sort_unstable();
        }
    }
    // Free slots, locked, as many per key as the read could take; a slot another claim has
    // locked is tried no more, and its key's jobs are left ready rather than blocked.
    let mut free: BTreeMap<String, VecDeque<u32>> = BTreeMap::new();
    let mut contended: BTreeSet<String> = BTreeSet::new();
    loop {
        let mut wanted: Vec<(String, u32)> = Vec::new();
        for (k, nos) in &mut candidates {
            let have = free.get(k).map_or(0, VecDeque::len);
            let more = need.get(k).copied().unwrap_or(0).saturating_sub(have);
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
        let locked = lock_free_slots(conn, &wanted).await?;
        for (k, no) in wanted {
            if locked.contains(&(k.clone(), no)) {
                free.entry(k).or_default().push_back(no);
            } else {
                contended.insert(k);
            }
        }
    }
    for nos in free.values_mut() {
        nos.make_contiguous().sort_unstable();
    }
    let full = |k: &String| match contended.contains(k) {
        true => Verdict::Leave,
        false => Verdict::Block(k.clone()),
    };
    // Hand out slots in claim order.
    let mut out = Vec::with_capacity(jobs.len());
    let mut taken = TakenSlots::default();
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
            taken.0.push(k.clone());
            taken.1.push(i64::from(no));
            taken.2.push(Some(db_id(*id)));
            taken.3.push(Some(i64::from(*attempt)));
            taken.4.push(0);
        }
        if let Some((k, no, window)) = r {
            taken.0.push(k.clone());
            taken.1.push(i64::from(no));
            taken.2.push(None);
            taken.3.push(None);
            taken.4.push(i64::from(window) * 1000);
        }
        takers += 1;
        out.push(Verdict::Take);
    }
    if !taken.0.is_empty() {
        // Every slot taken, in one statement: a concurrency slot gets its holder, a rate slot
        // its next free time (the key prefixes keep the two kinds apart).
        sqlx::query(
            "UPDATE job_queue_slot s SET job_id = v.job_id, attempt = v.attempt, \
             free_at = CASE WHEN v.window_us > 0 \
               THEN job_queue_now() + v.window_us * INTERVAL '1 microsecond' ELSE s.free_at END \
             FROM unnest($1::text[], $2::bigint[], $3::bigint[], $4::bigint[], $5::bigint[]) \
               AS v(slot_key, slot_no, job_id, attempt, window_us) \
             WHERE s.slot_key = v.slot_key AND s.slot_no = v.slot_no",
        )
        .bind(&taken.0)
        .bind(&taken.1)
        .bind(&taken.2)
        .bind(&taken.3)
        .bind(&taken.4)
        .execute(&mut *conn)
        .await?;
    }
    recheck_full_keys(conn, &mut out, &limit_of).await?;
    Ok(out)
}

/// Turns the blocks of concurrency keys that have a free slot after all, or a slot another
/// transaction is changing, into leaves.
///
/// A key found full by the plain read may have its slot freed by an outcome committing
/// meanwhile, whose wake looked for blocked jobs before this claim's were written: those
/// would wait for maintenance with a slot free. (MySQL has the same window, and leaves it
/// to maintenance; on PostgreSQL it is easily hit.) Reading the key's slots `FOR SHARE`
/// closes it: a release after this read waits for this claim's commit, and its wake then
/// sees the blocked jobs. A slot another transaction holds locked (a release not yet
/// committed, or a job completing inside its own transaction, which may stay open as long
/// as the job likes) is skipped, not waited for: the claim must not wait on a job's
/// transaction. Its key's jobs are left ready instead of blocked, since that slot may be
/// free at its commit; the next claim decides again. A rate key's slots free with time, not
/// by a release: maintenance wakes them.
async fn recheck_full_keys(
    conn: &mut PgConnection,
    verdicts: &mut [Verdict],
    limit_of: &BTreeMap<String, u32>,
) -> sqlx::Result<()> {
    let mut keys: Vec<String> = verdicts
        .iter()
        .filter_map(|v| match v {
            Verdict::Block(k) if k.starts_with("c:") => Some(k.clone()),
            _ => None,
        })
        .collect();
    if keys.is_empty() {
        return Ok(());
    }
    keys.sort();
    keys.dedup();
    let limits: Vec<i64> = keys.iter().map(|k| i64::from(limit_of[k])).collect();
    // The key's slots this transaction could lock, and (after) all of them: a key with
    // fewer locked than it has is being changed by another transaction.
    let locked: Vec<String> = sqlx::query_scalar(
        "SELECT s.slot_key FROM job_queue_slot s \
         JOIN unnest($1::text[], $2::bigint[]) AS v(slot_key, n) ON s.slot_key = v.slot_key \
         WHERE s.slot_no < v.n ORDER BY s.slot_key, s.slot_no FOR SHARE OF s SKIP LOCKED",
    )
    .bind(&keys)
    .bind(&limits)
    .fetch_all(&mut *conn)
    .await?;
    // The rows read again, those locked above now as they are: which keys have a free slot,
    // and how many slots each has.
    let rows: Vec<(String, i64, i64)> = sqlx::query_as(
        "SELECT s.slot_key, COUNT(*), COUNT(*) FILTER (WHERE s.job_id IS NULL) \
         FROM job_queue_slot s \
         JOIN unnest($1::text[], $2::bigint[]) AS v(slot_key, n) ON s.slot_key = v.slot_key \
         WHERE s.slot_no < v.n GROUP BY s.slot_key",
    )
    .bind(&keys)
    .bind(&limits)
    .fetch_all(&mut *conn)
    .await?;
    let leave: Vec<&str> = rows
        .iter()
        .filter(|(key, slots, free)| {
            let mine = locked.iter().filter(|k| *k == key).count() as i64;
            *free > 0 || mine < *slots
        })
        .map(|(key, ..)| key.as_str())
        .collect();
    for v in verdicts.iter_mut() {
        if matches!(v, Verdict::Block(k) if leave.contains(&k.as_str())) {
            *v = Verdict::Leave;
        }
    }
    Ok(())
}

/// The slots a claim takes, as the columns of its one `UPDATE ... FROM unnest(...)`: slot
/// key, slot number, holder id and attempt (a concurrency slot), window in µs (a rate slot).
#[derive(Default)]
struct TakenSlots(
    Vec<String>,
    Vec<i64>,
    Vec<Option<i64>>,
    Vec<Option<i64>>,
    Vec<i64>,
);

/// Locks those of `slots` (slot key, slot number) that are free now, skipping any another
/// transaction has locked; returns the ones locked (the MySQL `lock_free_slots`).
pub(crate) async fn lock_free_slots(
    conn: &mut PgConnection,
    slots: &[(String, u32)],
) -> sqlx::Result<Vec<(String, u32)>> {
    let keys: Vec<&str> = slots.iter().map(|s| s.0.as_str()).collect();
    let nos: Vec<i64> = slots.iter().map(|s| i64::from(s.1)).collect();
    sqlx::query(PG_LOCK_FREE_SLOTS)
        .bind(&keys)
        .bind(&nos)
        .fetch_all(&mut *conn)
        .await?
        .iter()
        .map(|r| Ok((r.try_get(0)?, u32_of(r.try_get(1)?))))
        .collect()
}

/// Marks jobs blocked (each with the slot key it waits for and its priority), in the
/// claim's transaction, where their rows are locked (the MySQL `block`). A waiting row the
/// job was left under another key is deleted; the new rows are inserted with
/// `ON CONFLICT DO NOTHING`, as MySQL's `INSERT IGNORE`.
pub(crate) async fn block(
    conn: &mut PgConnection,
    blocked: &[(u64, i16, String)],
) -> sqlx::Result<()> {
    if blocked.is_empty() {
        return Ok(());
    }
    let ids: Vec<i64> = blocked.iter().map(|b| db_id(b.0)).collect();
    let priorities: Vec<i16> = blocked.iter().map(|b| b.1).collect();
    let keys: Vec<&str> = blocked.iter().map(|b| b.2.as_str()).collect();
    sqlx::query(
        "UPDATE job_queue SET status = 'blocked', updated_at = job_queue_now() \
         WHERE id = ANY($1) AND status = 'ready'",
    )
    .bind(&ids)
    .execute(&mut *conn)
    .await?;
    sqlx::query(
        "DELETE FROM job_queue_blocked b USING unnest($1::bigint[], $2::text[]) AS v(job_id, slot_key) \
         WHERE b.job_id = v.job_id AND b.slot_key <> v.slot_key",
    )
    .bind(&ids)
    .bind(&keys)
    .execute(&mut *conn)
    .await?;
    sqlx::query(
        "INSERT INTO job_queue_blocked (slot_key, priority, job_id) \
         SELECT * FROM unnest($1::text[], $2::smallint[], $3::bigint[]) \
         ON CONFLICT DO NOTHING",
    )
    .bind(&keys)
    .bind(&priorities)
    .bind(&ids)
    .execute(&mut *conn)
    .await?;
    Ok(())
}

/// Frees the concurrency slots that `claims` (job id, attempt) hold and wakes a blocked job
/// of each freed slot's key, inside the caller's transaction (the MySQL `release_claims`):
/// one `UPDATE` fenced by the holder, which returns the keys it freed. Returns how many
/// slots were freed.
pub(crate) async fn release_claims(
    conn: &mut PgConnection,
    claims: &[(u64, u32)],
) -> sqlx::Result<u64> {
    let mut freed = 0;
    for chunk in claims.chunks(128) {
        let ids: Vec<i64> = chunk.iter().map(|c| db_id(c.0)).collect();
        let attempts: Vec<i64> = chunk.iter().map(|c| i64::from(c.1)).collect();
        let keys: Vec<String> = sqlx::query_scalar(
            "UPDATE job_queue_slot s SET job_id = NULL, attempt = NULL \
             FROM unnest($1::bigint[], $2::bigint[]) AS v(job_id, attempt) \
             WHERE s.job_id = v.job_id AND s.attempt = v.attempt RETURNING s.slot_key",
        )
        .bind(&ids)
        .bind(&attempts)
        .fetch_all(&mut *conn)
        .await?;
        if keys.is_empty() {
            continue;
        }
        freed += keys.len() as u64;
        let waiting: Vec<String> = sqlx::query_scalar(
            "SELECT DISTINCT slot_key FROM job_queue_blocked WHERE slot_key = ANY($1)",
        )
        .bind(&keys)
        .fetch_all(&mut *conn)
        .await?;
        for key in keys.iter().filter(|k| waiting.contains(k)) {
            wake(conn, key, 1, WAKE_MAX_LEFTOVERS_IN_OUTCOME).await?;
        }
    }
    Ok(freed)
}

/// Puts up to `n` blocked jobs of `key` back to `ready`, first in claim order, skipping
/// jobs another transaction is waking, and deletes on the way up to `max_leftovers` waiting
/// rows of jobs no longer blocked (the MySQL `wake`). Returns how many were woken.
pub(crate) async fn wake(
    conn: &mut PgConnection,
    key: &str,
    n: u32,
    max_leftovers: u32,
) -> sqlx::Result<u32> {
    let mut woken = 0;
    let mut leftovers = 0u32;
    while woken < n && leftovers < max_leftovers {
        let want = n - woken;
        let read = if leftovers == 0 {
            want
        } else {
            want.max(WAKE_BATCH)
        };
        let ids: Vec<i64> = sqlx::query_scalar(PG_BLOCKED_SELECT)
            .bind(key)
            .bind(i64::from(read))
            .fetch_all(&mut *conn)
            .await?;
        if ids.is_empty() {
            break;
        }
        let (chosen, mut gone): (Vec<i64>, Vec<i64>) = if ids.len() as u32 <= want {
            (ids.clone(), Vec::new())
        } else {
            let blocked: Vec<i64> = sqlx::query_scalar(
                "SELECT id FROM job_queue WHERE id = ANY($1) AND status = 'blocked'",
            )
            .bind(&ids)
            .fetch_all(&mut *conn)
            .await?;
            let (still, gone): (Vec<i64>, Vec<i64>) =
                ids.iter().partition(|id| blocked.contains(id));
            (still.into_iter().take(want as usize).collect(), gone)
        };
        let mut now_woken = 0;
        if !chosen.is_empty() {
            // Each row changes from blocked to ready: rows changed are rows matched.
            now_woken = sqlx::query(
                "UPDATE job_queue SET status = 'ready', updated_at = job_queue_now() \
                 WHERE id = ANY($1) AND status = 'blocked'",
            )
            .bind(&chosen)
            .execute(&mut *conn)
            .await?
            .rows_affected() as u32;
        }
        woken += now_woken;
        leftovers += gone.len() as u32 + (chosen.len() as u32 - now_woken);
        gone.extend(chosen);
        sqlx::query("DELETE FROM job_queue_blocked WHERE slot_key = $1 AND job_id = ANY($2)")
            .bind(key)
            .bind(&gone)
            .execute(&mut *conn)
            .await?;
    }
    Ok(woken)
}

/// `Store::limits_pass` on PostgreSQL: frees slots whose claim ended without releasing
/// them, then wakes the blocked jobs of every key with free slots. Returns (slots freed,
/// jobs woken).
pub(crate) async fn limits_pass(store: &Store, pool: &PgPool) -> Result<(u64, u64)> {
    let orphans = pg_autocommit!(store, pool, |conn| sqlx::query(PG_ORPHAN_SLOTS)
        .fetch_all(&mut *conn))?;
    let mut freed = 0;
    for r in &orphans {
        let (key, no, id, attempt): (String, i64, i64, i64) =
            (r.try_get(0)?, r.try_get(1)?, r.try_get(2)?, r.try_get(3)?);
        // Fenced by the holder: a slot taken again since the read is left alone. Its row
        // changes (the holder goes), so rows changed are rows matched.
        freed += pg_autocommit!(store, pool, |conn| sqlx::query(
            "UPDATE job_queue_slot SET job_id = NULL, attempt = NULL \
             WHERE slot_key = $1 AND slot_no = $2 AND job_id = $3 AND attempt = $4"
        )
        .bind(&key)
        .bind(no)
        .bind(id)
        .bind(attempt)
        .execute(&mut *conn))?
        .rows_affected();
    }
    let mut woken = 0u64;
    let mut after = String::new();
    loop {
        let keys = pg_autocommit!(store, pool, |conn| sqlx::query(PG_WAKE_SCAN)
            .bind(&after)
            .fetch_all(&mut *conn))?;
        for r in &keys {
            let (key, free): (String, i64) = (r.try_get(0)?, r.try_get(1)?);
            if free <= 0 {
                continue;
            }
            let free = free.min(i64::from(MAX_SLOTS)) as u32;
            woken += u64::from(pg_transaction!(store, pool, |conn| {
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
