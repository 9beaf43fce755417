//! The invariants, checked from the tables once every worker has stopped.
//!
//! What each check reads:
//!
//! * `job_queue`: each job's final row, and its attempt history (`attempt_log`: for each
//!   claim, its attempt number, when it was claimed, when its end was recorded, the
//!   `lease_owner` and the outcome). The history keeps the last 20 attempts; the kinds allow
//!   at most 6 plus their snoozes, so it is complete for every job.
//! * `soak_effect`: one row per body that started (job id and attempt from its
//!   `JobContext`, pid, start, and the end of its work if it got there).
//! * `soak_transfer`, `soak_account`: the transfers applied inside the jobs' own
//!   transactions, and the balances.
//! * `soak_tick`: one row per periodic tick committed with its completion.
//! * `job_queue_blocked`, `job_queue_slot`: nothing waits and no slot is held at the end.
//!
//! # Why a body's interval ends where it does
//!
//! The concurrency check measures bodies that were really running at the same time. A body
//! records its start when it begins and its end only when its work has finished. A body
//! whose process was frozen (SIGSTOP) past its lease is not running while frozen; when it is
//! thawed, the runtime finds the lease gone (its lease clock is monotonic and ran on) and
//! stops it: the body records no end, and it is bounded by the end its attempt has in the
//! history, the reclaim that took the job back, which the runtime can only do after the
//! lease expired, later than it stops the body. So a frozen body does not look as if it
//! ran through the freeze. The same holds for a killed body (its process is gone, it wrote
//! no end) and for a cancelled one (it returns without an end).
//!
//! If, on the other hand, a thawed body reaches the end of its work and writes its end
//! before the runtime stops it, that write is a body that really ran after its claim ended:
//! its end lies after its attempt's recorded end, and it is reported as a body outside its
//! claim (the check "no body ran without a claim"). In the overlaps it counts as running
//! from its start to the freeze and again from the thaw to its end, not during the freeze:
//! the body notes the longest stretch its own work did not run (a step of its wait that
//! overran by more than half a second) and records it with its end. Those two parts are
//! what the body really ran; the second is outside its claim, and if another body of its
//! key runs then, the key is over its limit for real.
//!
//! A concurrency slot is held from the claim's transaction to the commit of the outcome;
//! the history's start is written by the claim after it took the slot, and its end by the
//! outcome that frees it (or the reclaim), so the history's intervals are inside the slot's
//! hold; a body's start comes after the claim's commit and its end (written before the
//! outcome, or in the completing transaction before `complete_in`) before the outcome: a
//! body's interval is inside its attempt's. Intervals are half-open, so one that ends at
//! the very microsecond another starts does not overlap it.

use std::collections::{BTreeMap, HashMap};

use anyhow::Context as _;
use sqlx::mysql::MySqlRow;
use sqlx::types::chrono::{DateTime, NaiveDateTime, Utc};
use sqlx::{MySqlPool, Row};

use crate::fleet::owner_pid;
use crate::jobs::{self, Echo, ACCOUNTS, INITIAL_BALANCE, PERIODIC};
use crate::run::{FaultKind, FaultRecord, Us};

/// How much earlier than a full window the `N+1`th start of a rate key may be stamped: a
/// claim takes the rate slot (by the server's clock) in one statement and writes
/// `claimed_at` in a later one of the same transaction, so the history's start of a claim
/// may lag its slot's time by the gap between the two statements.
const RATE_TOLERANCE_US: i64 = 100_000;

/// How many lines of evidence a check prints.
const EVIDENCE: usize = 12;

/// One invariant and how it came out.
#[derive(Debug)]
pub(crate) struct Check {
    pub(crate) name: &'static str,
    pub(crate) pass: bool,
    pub(crate) summary: String,
    /// What broke it (or what a reader should know), first lines.
    pub(crate) evidence: Vec<String>,
    /// How many violations in all.
    pub(crate) violations: usize,
}

impl Check {
    fn new(name: &'static str) -> Check {
        Check {
            name,
            pass: true,
            summary: String::new(),
            evidence: Vec::new(),
            violations: 0,
        }
    }

    fn violation(&mut self, line: String) {
        self.pass = false;
        self.violations += 1;
        if self.evidence.len() < EVIDENCE {
            self.evidence.push(line);
        }
    }
}

/// Figures of the run, read from the tables.
#[derive(Debug, Default)]
pub(crate) struct Stats {
    /// Final status counts per kind.
    pub(crate) statuses: BTreeMap<String, BTreeMap<String, u64>>,
    /// Outcomes in the attempt histories, all jobs.
    pub(crate) outcomes: BTreeMap<String, u64>,
    pub(crate) jobs: u64,
    pub(crate) claims: u64,
    /// Jobs claimed more than once.
    pub(crate) rerun_jobs: u64,
    /// Jobs whose lease expired at least once.
    pub(crate) expired_jobs: u64,
    pub(crate) bodies: u64,
    /// Bodies that recorded no end (stopped, killed, frozen, failed to write).
    pub(crate) unfinished_bodies: u64,
    /// Of those, bodies that ignore cancellation whose claim ended in a reclaim: the
    /// runtime stopped them when their lease was lost.
    pub(crate) stubborn_stopped: u64,
    /// Why failed jobs failed, by cause.
    pub(crate) failure_causes: BTreeMap<String, u64>,
}

/// An attempt as the job's history records it.
#[derive(Debug)]
struct Entry {
    attempt: u32,
    started: Option<Us>,
    ended: Us,
    worker: Option<String>,
    outcome: String,
}

#[derive(Debug)]
struct Job {
    id: u64,
    kind: String,
    status: String,
    attempts: u32,
    max_attempts: u32,
    snoozes: u32,
    lease_expiries: u32,
    climit: u32,
    ckey: Option<String>,
    rlimit: u32,
    rkey: Option<String>,
    rwindow_us: i64,
    history: Vec<Entry>,
    last_error: Option<String>,
    output: Option<String>,
    /// The task key it was enqueued with (also once it released it).
    key: String,
    created: Us,
    finished: Option<Us>,
    unique_until: Option<Us>,
    payload: serde_json::Value,
}

#[derive(Debug)]
struct Effect {
    id: u64,
    job_id: u64,
    attempt: u32,
    kind: String,
    pid: u32,
    started: Us,
    ended: Option<Us>,
    /// The longest stretch its work did not run, recorded with its end.
    stalled: Option<(Us, Us)>,
}

/// A text column, whatever its collation (a binary one comes as bytes).
fn text(r: &MySqlRow, i: usize) -> sqlx::Result<Option<String>> {
    match r.try_get::<Option<String>, _>(i) {
        Ok(s) => Ok(s),
        Err(_) => Ok(r
            .try_get::<Option<Vec<u8>>, _>(i)?
            .map(|b| String::from_utf8_lossy(&b).into_owned())),
    }
}

/// Microseconds since 2000-01-01 of a time written as `2026-11-30 12:00:00.123456`.
pub(crate) fn parse_us(s: &str, format: &str) -> Option<Us> {
    let t = NaiveDateTime::parse_from_str(s, format).ok()?;
    let base = NaiveDateTime::parse_from_str("2000-01-01 00:00:00", "%Y-%m-%d %H:%M:%S").ok()?;
    (t - base).num_microseconds()
}

/// A time for a message: `12:00:00.123456`.
pub(crate) fn clock(us: Us) -> String {
    const Y2K: i64 = 946_684_800;
    let (secs, micros) = (us.div_euclid(1_000_000), us.rem_euclid(1_000_000));
    DateTime::<Utc>::from_timestamp(Y2K + secs, micros as u32 * 1000).map_or_else(
        || format!("{us}us"),
        |t| t.format("%H:%M:%S%.6f").to_string(),
    )
}

const TIME: &str = "TIMESTAMPDIFF(MICROSECOND, '2000-01-01 00:00:00', ";

async fn load_jobs(pool: &MySqlPool) -> anyhow::Result<Vec<Job>> {
    let sql = format!(
        "SELECT id, CAST(kind AS CHAR), CAST(status AS CHAR), attempts, max_attempts, snoozes, \
         lease_expiries, concurrency_limit, concurrency_key, rate_limit, rate_key, rate_window_ms, \
         attempt_log, last_error, output, COALESCE(released_key, task_key), \
         {TIME}created_at), {TIME}finished_at), {TIME}unique_until), CAST(payload AS CHAR) \
         FROM job_queue ORDER BY id"
    );
    let rows = sqlx::raw_sql(&sql).fetch_all(pool).await?;
    let mut jobs = Vec::with_capacity(rows.len());
    for r in &rows {
        let id: u64 = r.try_get(0)?;
        let log = text(r, 12)?;
        let history = match &log {
            Some(log) => parse_history(log).with_context(|| format!("job {id}'s history"))?,
            None => Vec::new(),
        };
        let payload = text(r, 19)?.unwrap_or_default();
        jobs.push(Job {
            id,
            kind: text(r, 1)?.unwrap_or_default(),
            status: text(r, 2)?.unwrap_or_default(),
            attempts: r.try_get(3)?,
            max_attempts: r.try_get(4)?,
            snoozes: r.try_get(5)?,
            lease_expiries: r.try_get(6)?,
            climit: r.try_get(7)?,
            ckey: text(r, 8)?,
            rlimit: r.try_get(9)?,
            rkey: text(r, 10)?,
            rwindow_us: i64::from(r.try_get::<u32, _>(11)?) * 1000,
            history,
            last_error: text(r, 13)?,
            output: text(r, 14)?,
            key: text(r, 15)?.unwrap_or_default(),
            created: r.try_get(16)?,
            finished: r.try_get(17)?,
            unique_until: r.try_get(18)?,
            payload: serde_json::from_str(&payload)
                .with_context(|| format!("job {id}'s payload"))?,
        });
    }
    Ok(jobs)
}

fn parse_history(log: &str) -> anyhow::Result<Vec<Entry>> {
    #[derive(serde::Deserialize)]
    struct Raw {
        attempt: u32,
        started_at: Option<String>,
        ended_at: String,
        worker: Option<String>,
        outcome: String,
    }
    const FORMAT: &str = "%Y-%m-%d %H:%M:%S%.f";
    let raw: Vec<Raw> = serde_json::from_str(log)?;
    raw.into_iter()
        .map(|e| {
            Ok(Entry {
                attempt: e.attempt,
                started: match &e.started_at {
                    Some(s) => Some(parse_us(s, FORMAT).context("a start time")?),
                    None => None,
                },
                ended: parse_us(&e.ended_at, FORMAT).context("an end time")?,
                worker: e.worker,
                outcome: e.outcome,
            })
        })
        .collect()
}

async fn load_effects(pool: &MySqlPool) -> anyhow::Result<Vec<Effect>> {
    let sql = format!(
        "SELECT id, job_id, attempt, kind, pid, {TIME}started_at), {TIME}ended_at), \
         {TIME}stalled_from), {TIME}stalled_until) FROM soak_effect ORDER BY id"
    );
    let rows = sqlx::raw_sql(&sql).fetch_all(pool).await?;
    rows.iter()
        .map(|r| {
            Ok(Effect {
                id: r.try_get(0)?,
                job_id: r.try_get(1)?,
                attempt: r.try_get(2)?,
                kind: text(r, 3)?.unwrap_or_default(),
                pid: r.try_get(4)?,
                started: r.try_get(5)?,
                ended: r.try_get(6)?,
                stalled: match (r.try_get(7)?, r.try_get(8)?) {
                    (Some(from), Some(to)) => Some((from, to)),
                    _ => None,
                },
            })
        })
        .collect()
}

fn is_final(status: &str) -> bool {
    matches!(status, "done" | "failed" | "cancelled")
}

/// Why a failed job failed: on purpose, by a fault, or for no reason the soak knows of.
fn failure_cause(job: &Job) -> &'static str {
    let error = job.last_error.as_deref().unwrap_or("");
    if error.contains("on purpose") || error.contains("cannot pay") {
        "on purpose"
    } else if error.contains("lease") {
        "lease expired (kill, freeze, lock, restart)"
    } else if error.contains("shut") || error.contains("handed back") {
        "shutdown on the last attempt"
    } else if error.contains("database")
        || error.contains("connection")
        || error.contains("pool")
        || error.contains("server")
        || error.contains("Lost")
        || error.contains("timed out")
    {
        "database unreachable (restart)"
    } else {
        "unexplained"
    }
}

/// Everything the checks need from the run itself.
pub(crate) struct Run<'a> {
    /// Ids the producer was given by enqueues (new jobs and the holders of duplicates).
    pub(crate) acknowledged: &'a [(&'static str, u64)],
    pub(crate) faults: &'a [FaultRecord],
}

/// Reads the tables and checks every invariant.
pub(crate) async fn check_all(
    pool: &MySqlPool,
    run: &Run<'_>,
) -> anyhow::Result<(Vec<Check>, Stats)> {
    let jobs = load_jobs(pool).await.context("cannot read the jobs")?;
    let effects = load_effects(pool)
        .await
        .context("cannot read the effects")?;
    let by_id: HashMap<u64, &Job> = jobs.iter().map(|j| (j.id, j)).collect();
    let stats = stats(&jobs, &by_id, &effects);
    let checks = vec![
        no_job_lost(pool, &jobs, &by_id, run).await?,
        bodies_inside_claims(&jobs, &by_id, &effects),
        attempts_bounded(&jobs, &by_id, &effects),
        concurrency(&jobs, &by_id, &effects),
        rate(&jobs),
        ticks(pool, &jobs, run.faults).await?,
        transfers(pool, &jobs).await?,
        uniqueness(&jobs),
        outputs(&jobs),
        check_tables(pool).await?,
    ];
    Ok((checks, stats))
}

fn stats(jobs: &[Job], by_id: &HashMap<u64, &Job>, effects: &[Effect]) -> Stats {
    let stubborn_stopped = effects
        .iter()
        .filter(|e| e.ended.is_none())
        .filter_map(|e| by_id.get(&e.job_id).map(|j| (e, j)))
        .filter(|(e, j)| {
            j.payload["stubborn"].as_bool() == Some(true)
                && entry(j, e.attempt).is_some_and(|h| h.outcome == "lease_expired")
        })
        .count() as u64;
    let mut s = Stats {
        stubborn_stopped,
        jobs: jobs.len() as u64,
        bodies: effects.len() as u64,
        unfinished_bodies: effects.iter().filter(|e| e.ended.is_none()).count() as u64,
        ..Stats::default()
    };
    for j in jobs {
        *s.statuses
            .entry(j.kind.clone())
            .or_default()
            .entry(j.status.clone())
            .or_default() += 1;
        s.claims += u64::from(j.attempts);
        s.rerun_jobs += u64::from(j.attempts > 1);
        s.expired_jobs += u64::from(j.lease_expiries > 0);
        for e in &j.history {
            *s.outcomes.entry(e.outcome.clone()).or_default() += 1;
        }
        if j.status == "failed" {
            *s.failure_causes
                .entry(failure_cause(j).to_owned())
                .or_default() += 1;
        }
    }
    s
}

async fn no_job_lost(
    pool: &MySqlPool,
    jobs: &[Job],
    by_id: &HashMap<u64, &Job>,
    run: &Run<'_>,
) -> anyhow::Result<Check> {
    let mut c = Check::new("no job lost");
    let mut not_final: BTreeMap<&str, u64> = BTreeMap::new();
    for j in jobs.iter().filter(|j| !is_final(&j.status)) {
        *not_final.entry(&j.status).or_default() += 1;
        c.violation(format!(
            "job {} ({}) is still {} after the drain (attempts {}, last error {:?})",
            j.id, j.kind, j.status, j.attempts, j.last_error
        ));
    }
    for (kind, id) in run.acknowledged {
        match by_id.get(id) {
            None => c.violation(format!(
                "job {id} ({kind}) was acknowledged by an enqueue but is not in the table"
            )),
            Some(j) if j.kind != *kind => c.violation(format!(
                "job {id} was acknowledged as {kind} but is a {}",
                j.kind
            )),
            Some(_) => {}
        }
    }
    for j in jobs {
        if j.status == "cancelled" {
            c.violation(format!(
                "job {} ({}) is cancelled, though nothing asked for it: {:?}",
                j.id, j.kind, j.last_error
            ));
        }
        if j.status == "failed" && failure_cause(j) == "unexplained" {
            c.violation(format!(
                "job {} ({}) failed for a reason no fault explains: {:?}",
                j.id, j.kind, j.last_error
            ));
        }
    }
    let blocked: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM job_queue_blocked")
        .fetch_one(pool)
        .await?;
    if blocked > 0 {
        c.violation(format!(
            "{blocked} rows are left in job_queue_blocked with no job waiting"
        ));
    }
    let held = sqlx::raw_sql(
        "SELECT CAST(slot_key AS CHAR), slot_no, job_id, attempt FROM job_queue_slot \
         WHERE job_id IS NOT NULL",
    )
    .fetch_all(pool)
    .await?;
    for r in &held {
        c.violation(format!(
            "slot {} #{} is still held by job {} attempt {:?} after every job ended",
            text(r, 0)?.unwrap_or_default(),
            r.try_get::<u32, _>(1)?,
            r.try_get::<u64, _>(2)?,
            r.try_get::<Option<u32>, _>(3)?
        ));
    }
    let done = jobs.iter().filter(|j| j.status == "done").count();
    let failed = jobs.iter().filter(|j| j.status == "failed").count();
    c.summary = format!(
        "{} jobs: {done} done, {failed} failed (on purpose or by faults), {} not final {:?}; \
         {} acknowledged ids checked; {blocked} blocked rows, {} held slots",
        jobs.len(),
        not_final.values().sum::<u64>(),
        not_final,
        run.acknowledged.len(),
        held.len()
    );
    Ok(c)
}

/// The job's claim after `attempt`, for a message: who held the job next, and from when.
fn next_claim(job: &Job, attempt: u32) -> String {
    match job.history.iter().find(|h| h.attempt > attempt) {
        Some(h) => format!(
            "; attempt {} was claimed by {} at {} ({} at {})",
            h.attempt,
            h.worker.as_deref().unwrap_or("?"),
            h.started.map_or("?".into(), clock),
            h.outcome,
            clock(h.ended)
        ),
        None => String::new(),
    }
}

/// The history entry of `job`'s attempt `attempt`.
fn entry(job: &Job, attempt: u32) -> Option<&Entry> {
    job.history.iter().rev().find(|e| e.attempt == attempt)
}

fn bodies_inside_claims(jobs: &[Job], by_id: &HashMap<u64, &Job>, effects: &[Effect]) -> Check {
    let mut c = Check::new("no body ran without a claim");
    let mut per_claim: HashMap<(u64, u32), Vec<&Effect>> = HashMap::new();
    let mut outside = 0;
    for e in effects {
        per_claim.entry((e.job_id, e.attempt)).or_default().push(e);
        let Some(job) = by_id.get(&e.job_id) else {
            c.violation(format!(
                "body {} ran as job {} attempt {}, which is not in the table",
                e.id, e.job_id, e.attempt
            ));
            continue;
        };
        let Some(claim) = entry(job, e.attempt) else {
            c.violation(format!(
                "body {} of job {} ({}) ran as attempt {} in pid {} at {}, an attempt the job's \
                 history does not have (attempts {}, history {:?})",
                e.id,
                e.job_id,
                e.kind,
                e.attempt,
                e.pid,
                clock(e.started),
                job.attempts,
                job.history.iter().map(|h| h.attempt).collect::<Vec<_>>()
            ));
            continue;
        };
        let owner = claim.worker.as_deref().and_then(owner_pid);
        if owner != Some(e.pid) {
            c.violation(format!(
                "body {} of job {} attempt {} ran in pid {}, but the claim was {:?}'s",
                e.id, e.job_id, e.attempt, e.pid, claim.worker
            ));
        }
        let before_claim = claim.started.is_some_and(|s| e.started < s);
        let after_end = e.started >= claim.ended
            || (jobs::ends_before_completion(&e.kind) && e.ended.is_some_and(|x| x > claim.ended));
        if before_claim || after_end {
            outside += 1;
            c.violation(format!(
                "body {} of job {} ({}) attempt {} in pid {} ran {} .. {} outside its claim \
                 {} .. {} ({}){}",
                e.id,
                e.job_id,
                e.kind,
                e.attempt,
                e.pid,
                clock(e.started),
                e.ended.map_or("(no end)".into(), |x| match e.stalled {
                    Some((f, t)) => format!("{} (stalled {} .. {})", clock(x), clock(f), clock(t)),
                    None => clock(x),
                }),
                claim.started.map_or("?".into(), clock),
                clock(claim.ended),
                claim.outcome,
                next_claim(job, e.attempt)
            ));
        }
    }
    let mut done_claims = 0;
    for j in jobs {
        for h in j.history.iter().filter(|h| h.outcome == "done") {
            done_claims += 1;
            let bodies = per_claim
                .get(&(j.id, h.attempt))
                .map_or(0, |v| v.iter().filter(|e| e.ended.is_some()).count());
            if bodies != 1 {
                c.violation(format!(
                    "job {} ({}) attempt {} is recorded done with {bodies} finished bodies",
                    j.id, j.kind, h.attempt
                ));
            }
        }
    }
    for ((job, attempt), bodies) in &per_claim {
        if bodies.len() > 1 {
            c.violation(format!(
                "job {job} attempt {attempt} ran {} bodies for one claim (pids {:?})",
                bodies.len(),
                bodies.iter().map(|e| e.pid).collect::<Vec<_>>()
            ));
        }
    }
    c.summary = format!(
        "{} bodies matched to their claims (attempt, owner's pid, within its start and end), \
         {outside} outside; {done_claims} done attempts each with exactly one finished body",
        effects.len()
    );
    c
}

fn attempts_bounded(jobs: &[Job], by_id: &HashMap<u64, &Job>, effects: &[Effect]) -> Check {
    let mut c = Check::new("no attempt past max_attempts");
    let mut highest = 0;
    for j in jobs {
        let declared = jobqueue::registry::lookup(&j.kind).map(|d| d.options().max_attempts);
        if let Some(declared) = declared {
            if j.max_attempts != declared + j.snoozes {
                c.violation(format!(
                    "job {} ({}) has max_attempts {}, but its kind allows {declared} and it \
                     snoozed {} times",
                    j.id, j.kind, j.max_attempts, j.snoozes
                ));
            }
        }
        if j.attempts > j.max_attempts {
            c.violation(format!(
                "job {} ({}) was claimed {} times, max_attempts {}",
                j.id, j.kind, j.attempts, j.max_attempts
            ));
        }
        for h in &j.history {
            if h.attempt > j.max_attempts {
                c.violation(format!(
                    "job {} ({}) has attempt {} in its history, max_attempts {}",
                    j.id, j.kind, h.attempt, j.max_attempts
                ));
            }
        }
        highest = highest.max(j.attempts);
    }
    for e in effects {
        if let Some(j) = by_id.get(&e.job_id) {
            if e.attempt > j.max_attempts {
                c.violation(format!(
                    "body {} of job {} ran as attempt {}, max_attempts {}",
                    e.id, e.job_id, e.attempt, j.max_attempts
                ));
            }
        }
    }
    c.summary = format!(
        "claims, history and bodies within each job's max_attempts (its kind's plus its \
         snoozes); highest attempt {highest}"
    );
    c
}

/// The most intervals open at once, with the first instant it happens: intervals are
/// `(start, end, label)`, half-open.
fn peak<'a>(intervals: &[(Us, Us, &'a str)]) -> (usize, Us, Vec<&'a str>) {
    let mut events: Vec<(Us, i8, usize)> = Vec::with_capacity(intervals.len() * 2);
    // An empty interval is no running at all (and its end, sorted before its start,
    // would never close it).
    for (i, (s, e, _)) in intervals.iter().enumerate().filter(|(_, (s, e, _))| s < e) {
        events.push((*s, 1, i));
        events.push((*e, -1, i));
    }
    // Ends before starts at the same instant.
    events.sort_by_key(|&(t, d, i)| (t, d, i));
    let mut open: Vec<usize> = Vec::new();
    let (mut best, mut at, mut who) = (0, 0, Vec::new());
    for (t, d, i) in events {
        if d > 0 {
            open.push(i);
            if open.len() > best {
                best = open.len();
                at = t;
                who = open.iter().map(|&k| intervals[k].2).collect();
            }
        } else {
            open.retain(|&k| k != i);
        }
    }
    (best, at, who)
}

fn concurrency(jobs: &[Job], by_id: &HashMap<u64, &Job>, effects: &[Effect]) -> Check {
    let mut c = Check::new("no concurrency key over its limit");
    let mut limit: BTreeMap<&str, u32> = BTreeMap::new();
    let mut bodies: BTreeMap<&str, Vec<(Us, Us, String)>> = BTreeMap::new();
    let mut holds: BTreeMap<&str, Vec<(Us, Us, String)>> = BTreeMap::new();
    let (mut unbounded, mut split) = (0, 0);
    for j in jobs.iter().filter(|j| j.climit > 0) {
        let Some(key) = j.ckey.as_deref() else {
            continue;
        };
        limit.insert(key, j.climit);
        for h in &j.history {
            if let Some(s) = h.started {
                holds.entry(key).or_default().push((
                    s,
                    h.ended,
                    format!("job {} attempt {} ({})", j.id, h.attempt, h.outcome),
                ));
            }
        }
    }
    for e in effects {
        let Some(j) = by_id.get(&e.job_id).filter(|j| j.climit > 0) else {
            continue;
        };
        let Some(key) = j.ckey.as_deref() else {
            continue;
        };
        // The end of its work if it got there; else the end of its claim (see the module's
        // documentation).
        let end = e.ended.or_else(|| entry(j, e.attempt).map(|h| h.ended));
        let Some(end) = end else {
            unbounded += 1;
            continue;
        };
        let label = format!(
            "body {} (job {} attempt {}, pid {}, {}{}{})",
            e.id,
            e.job_id,
            e.attempt,
            e.pid,
            clock(e.started),
            e.ended
                .map_or(" .. stopped".into(), |x| format!(" .. {}", clock(x))),
            e.stalled.map_or(String::new(), |(f, t)| format!(
                ", stalled {} .. {}",
                clock(f),
                clock(t)
            ))
        );
        // Running from its start to its end, except while it stalled.
        let list = bodies.entry(key).or_default();
        match e
            .stalled
            .filter(|&(f, t)| e.started <= f && f < t && t <= end)
        {
            Some((from, to)) => {
                split += 1;
                list.push((e.started, from, label.clone()));
                list.push((to, end, label));
            }
            None => list.push((e.started, end.max(e.started), label)),
        }
    }
    let mut peaks = Vec::new();
    for (key, n) in &limit {
        for (what, set) in [("bodies", &bodies), ("claims", &holds)] {
            let Some(intervals) = set.get(key) else {
                continue;
            };
            let labelled: Vec<(Us, Us, &str)> = intervals
                .iter()
                .map(|(s, e, l)| (*s, *e, l.as_str()))
                .collect();
            let (best, at, who) = peak(&labelled);
            if what == "bodies" {
                peaks.push(format!("{key} {best}/{n}"));
            }
            if best > *n as usize {
                c.violation(format!(
                    "key {key} (limit {n}): {best} {what} at once at {}: {}",
                    clock(at),
                    who.join("; ")
                ));
            }
        }
    }
    c.summary = format!(
        "{} keys; most bodies running at once per key: {}; {split} bodies counted without \
         their stall; {unbounded} bodies with no end and no claim end",
        limit.len(),
        peaks.join(", ")
    );
    c
}

/// A rate key's limit, window (µs) and starts (time, which claim).
type RateStarts = (u32, i64, Vec<(Us, String)>);

fn rate(jobs: &[Job]) -> Check {
    let mut c = Check::new("no rate key over its count in any window");
    let mut starts: BTreeMap<&str, RateStarts> = BTreeMap::new();
    for j in jobs.iter().filter(|j| j.rlimit > 0) {
        let Some(key) = j.rkey.as_deref() else {
            continue;
        };
        let slot = starts
            .entry(key)
            .or_insert_with(|| (j.rlimit, j.rwindow_us, Vec::new()));
        for h in &j.history {
            if let Some(s) = h.started {
                slot.2
                    .push((s, format!("job {} attempt {}", j.id, h.attempt)));
            }
        }
    }
    let mut tightest = Vec::new();
    let mut strict = 0;
    for (key, (n, window, claims)) in &mut starts {
        claims.sort();
        let n = *n as usize;
        let mut min_gap = i64::MAX;
        for i in 0..claims.len().saturating_sub(n) {
            let gap = claims[i + n].0 - claims[i].0;
            min_gap = min_gap.min(gap);
            if gap < *window {
                strict += 1;
            }
            if gap < *window - RATE_TOLERANCE_US {
                c.violation(format!(
                    "key {key}: {} starts within {} ms (limit {n} per {} ms), from {} ({}) to {} ({})",
                    n + 1,
                    gap / 1000,
                    *window / 1000,
                    clock(claims[i].0),
                    claims[i].1,
                    clock(claims[i + n].0),
                    claims[i + n].1
                ));
            }
        }
        tightest.push(format!(
            "{key}: {} starts, the {}th start after any start at least {} ms later",
            claims.len(),
            n,
            if min_gap == i64::MAX {
                -1
            } else {
                min_gap / 1000
            }
        ));
    }
    c.summary = format!(
        "{}; {strict} windows short of the full window by less than the {} ms tolerance",
        tightest.join("; "),
        RATE_TOLERANCE_US / 1000
    );
    c
}

/// Whether a fault explains ticks missing at `from..=to`: the server was down (every
/// scheduler too), or a worker was frozen (it may hold the kind's schedule row in an open
/// transaction, which the others pass over), around that time. Ticks more than the
/// catch-up window (5 s) overdue when a scheduler gets to them are missed, as documented.
fn explained_gap(faults: &[FaultRecord], from: Us, to: Us) -> Option<String> {
    const SECOND: Us = 1_000_000;
    faults.iter().find_map(|f| {
        let (before, after) = match f.kind {
            FaultKind::ServerRestart => (2 * SECOND, 20 * SECOND),
            FaultKind::Freeze => (SECOND, 6 * SECOND),
            _ => return None,
        };
        (from <= f.end + after && to >= f.start - before)
            .then(|| format!("{} {} .. {}", f.kind.name(), clock(f.start), clock(f.end)))
    })
}

async fn ticks(pool: &MySqlPool, jobs: &[Job], faults: &[FaultRecord]) -> anyhow::Result<Check> {
    let mut c = Check::new("every periodic tick exactly once");
    let rows = sqlx::raw_sql("SELECT tick_key, job_id, attempt FROM soak_tick")
        .fetch_all(pool)
        .await?;
    let mut recorded: HashMap<String, Vec<(u64, u32)>> = HashMap::new();
    for r in &rows {
        recorded
            .entry(text(r, 0)?.unwrap_or_default())
            .or_default()
            .push((r.try_get(1)?, r.try_get(2)?));
    }
    let mut parts = Vec::new();
    for (kind, step) in PERIODIC {
        let step = step * 1_000_000;
        let mut ticks: Vec<(Us, &Job)> = Vec::new();
        let mut not_done = 0;
        for j in jobs.iter().filter(|j| j.kind == kind) {
            let Some(at) = j
                .key
                .strip_prefix(&format!("{kind}@"))
                .and_then(|t| parse_us(t, "%Y-%m-%dT%H:%M:%S%.fZ"))
            else {
                c.violation(format!("job {} has no tick in its key {:?}", j.id, j.key));
                continue;
            };
            ticks.push((at, j));
            let rec = recorded.remove(&j.key).unwrap_or_default();
            if j.status == "done" {
                if rec != [(j.id, j.attempts)] {
                    c.violation(format!(
                        "tick {} (job {}, done at attempt {}) was recorded {:?} (job, attempt)",
                        j.key, j.id, j.attempts, rec
                    ));
                }
            } else {
                not_done += 1;
                if !rec.is_empty() {
                    c.violation(format!(
                        "tick {} (job {}, {}) was recorded {:?} though not done",
                        j.key, j.id, j.status, rec
                    ));
                }
            }
        }
        ticks.sort_by_key(|t| t.0);
        let mut explained = Vec::new();
        for pair in ticks.windows(2) {
            let (a, b) = (pair[0].0, pair[1].0);
            if b == a {
                c.violation(format!("tick {} enqueued twice", pair[0].1.key));
            } else if b - a != step {
                let (from, to) = (a + step, b - step);
                let missing = (b - a) / step - 1;
                match explained_gap(faults, from, to) {
                    Some(fault) => explained.push(format!(
                        "{missing} missed {} .. {} during {fault}",
                        clock(from),
                        clock(to)
                    )),
                    None => c.violation(format!(
                        "{kind}: {missing} ticks missing from {} to {}, no fault then",
                        clock(from),
                        clock(to)
                    )),
                }
            }
        }
        parts.push(format!(
            "{kind}: {} ticks {} .. {}, {not_done} not done{}",
            ticks.len(),
            ticks.first().map_or("-".into(), |t| clock(t.0)),
            ticks.last().map_or("-".into(), |t| clock(t.0)),
            if explained.is_empty() {
                String::new()
            } else {
                format!(" (gaps explained by faults: {})", explained.join("; "))
            }
        ));
    }
    for (key, rec) in recorded {
        c.violation(format!(
            "tick {key} recorded {rec:?} but no such periodic job"
        ));
    }
    c.summary = parts.join("; ");
    Ok(c)
}

/// A transfer as applied: (transfer id, attempt, from, to, amount).
type Applied = (u64, u32, u64, u64, i64);

async fn transfers(pool: &MySqlPool, jobs: &[Job]) -> anyhow::Result<Check> {
    let mut c = Check::new("every complete_in transfer exactly once");
    let rows = sqlx::raw_sql(
        "SELECT transfer_id, job_id, attempt, from_account, to_account, amount FROM soak_transfer",
    )
    .fetch_all(pool)
    .await?;
    let mut applied: HashMap<u64, Vec<Applied>> = HashMap::new();
    for r in &rows {
        applied.entry(r.try_get::<u64, _>(1)?).or_default().push((
            r.try_get(0)?,
            r.try_get(2)?,
            r.try_get(3)?,
            r.try_get(4)?,
            r.try_get(5)?,
        ));
    }
    let mut expected: BTreeMap<u64, i64> = (1..=ACCOUNTS).map(|a| (a, INITIAL_BALANCE)).collect();
    let (mut done, mut others) = (0, 0);
    for j in jobs.iter().filter(|j| j.kind == "soak_transfer") {
        let p = &j.payload;
        let want = (
            p["transfer_id"].as_u64().unwrap_or(0),
            p["from"].as_u64().unwrap_or(0),
            p["to"].as_u64().unwrap_or(0),
            p["amount"].as_i64().unwrap_or(0),
        );
        let got = applied.remove(&j.id).unwrap_or_default();
        if j.status == "done" {
            done += 1;
            match got.as_slice() {
                [(t, attempt, from, to, amount)]
                    if (*t, *from, *to, *amount) == want && *attempt == j.attempts => {}
                _ => c.violation(format!(
                    "transfer job {} (done at attempt {}, {want:?}) was applied {got:?}",
                    j.id, j.attempts
                )),
            }
        } else {
            others += 1;
            if !got.is_empty() {
                c.violation(format!(
                    "transfer job {} is {} but was applied {got:?}",
                    j.id, j.status
                ));
            }
        }
        for (_, _, from, to, amount) in &got {
            *expected.entry(*from).or_default() -= amount;
            *expected.entry(*to).or_default() += amount;
        }
    }
    for (job, got) in &applied {
        c.violation(format!(
            "transfers {got:?} were applied by job {job}, which is no transfer job"
        ));
    }
    let balances = sqlx::raw_sql("SELECT id, balance FROM soak_account ORDER BY id")
        .fetch_all(pool)
        .await?;
    let mut total = 0;
    for r in &balances {
        let (id, balance): (u64, i64) = (r.try_get(0)?, r.try_get(1)?);
        total += balance;
        if expected.get(&id) != Some(&balance) {
            c.violation(format!(
                "account {id} holds {balance}, but its done transfers make {:?}",
                expected.get(&id)
            ));
        }
    }
    if total != ACCOUNTS as i64 * INITIAL_BALANCE {
        c.violation(format!(
            "the accounts hold {total} in all, not {}",
            ACCOUNTS as i64 * INITIAL_BALANCE
        ));
    }
    c.summary = format!(
        "{done} done transfers applied once each, {others} others not at all; {} balances \
         equal to their transfers, total {total}",
        balances.len()
    );
    Ok(c)
}

fn uniqueness(jobs: &[Job]) -> Check {
    let mut c = Check::new("uniqueness policies held");
    let mut by_key: BTreeMap<(&str, &str), Vec<&Job>> = BTreeMap::new();
    for j in jobs {
        by_key.entry((&j.kind, &j.key)).or_default().push(j);
    }
    let mut counts: BTreeMap<&str, (usize, usize)> = BTreeMap::new();
    for ((kind, key), list) in &by_key {
        let entry = counts.entry(kind).or_default();
        entry.0 += 1;
        entry.1 += list.len();
        match *kind {
            "soak_report" | "soak_plain" | "soak_transfer" if list.len() > 1 => {
                c.violation(format!(
                    "key {key} ({kind}, until pruned) has {} jobs: {:?}",
                    list.len(),
                    list.iter().map(|j| j.id).collect::<Vec<_>>()
                ));
            }
            "soak_sync" => {
                for pair in list.windows(2) {
                    let (a, b) = (pair[0], pair[1]);
                    if a.finished.is_none_or(|f| b.created < f) {
                        c.violation(format!(
                            "key {key} (while active): job {} was enqueued at {} while job {} \
                             was active (finished {:?})",
                            b.id,
                            clock(b.created),
                            a.id,
                            a.finished.map(clock)
                        ));
                    }
                }
            }
            "soak_refresh" => {
                for pair in list.windows(2) {
                    let (a, b) = (pair[0], pair[1]);
                    if a.unique_until.is_none_or(|u| b.created < u) {
                        c.violation(format!(
                            "key {key} (for 3 s): job {} was enqueued at {}, before job {}'s \
                             period ended ({:?})",
                            b.id,
                            clock(b.created),
                            a.id,
                            a.unique_until.map(clock)
                        ));
                    }
                }
            }
            _ => {}
        }
    }
    c.summary = ["soak_report", "soak_sync", "soak_refresh"]
        .iter()
        .map(|k| {
            let (keys, jobs) = counts.get(k).copied().unwrap_or_default();
            format!("{k}: {jobs} jobs over {keys} keys")
        })
        .collect::<Vec<_>>()
        .join("; ");
    c
}

fn outputs(jobs: &[Job]) -> Check {
    let mut c = Check::new("outputs of done jobs");
    let mut checked = 0;
    for j in jobs {
        match (j.kind.as_str(), j.status.as_str(), &j.output) {
            ("soak_plain", "done", Some(out)) => {
                checked += 1;
                let want = Echo {
                    n: j.payload["n"].as_u64().unwrap_or(0),
                    attempt: j.attempts,
                };
                match serde_json::from_str::<Echo>(out) {
                    Ok(got) if got == want => {}
                    _ => c.violation(format!("job {} output {out}, expected {want:?}", j.id)),
                }
            }
            ("soak_plain", "done", None) => {
                c.violation(format!("done job {} has no output", j.id));
            }
            (_, _, Some(out)) => c.violation(format!(
                "job {} ({}, {}) has an output it never returned: {out}",
                j.id, j.kind, j.status
            )),
            _ => {}
        }
    }
    c.summary =
        format!("{checked} outputs equal to what the done attempt returned; no other job has one");
    c
}

async fn check_tables(pool: &MySqlPool) -> anyhow::Result<Check> {
    let mut c = Check::new("CHECK TABLE ... EXTENDED");
    let tables = sqlx::raw_sql(
        "SELECT table_name FROM information_schema.tables \
         WHERE table_schema = DATABASE() AND table_type = 'BASE TABLE' ORDER BY table_name",
    )
    .fetch_all(pool)
    .await?;
    let mut names = Vec::new();
    for r in &tables {
        let name = text(r, 0)?.unwrap_or_default();
        let rows = sqlx::raw_sql(&format!("CHECK TABLE `{name}` EXTENDED"))
            .fetch_all(pool)
            .await?;
        for row in &rows {
            let kind = text(row, 2)?.unwrap_or_default();
            let msg = text(row, 3)?.unwrap_or_default();
            if kind.eq_ignore_ascii_case("error")
                || (kind.eq_ignore_ascii_case("status") && msg != "OK")
            {
                c.violation(format!("{name}: {kind}: {msg}"));
            }
        }
        names.push(name);
    }
    c.summary = format!("{} tables: {}", names.len(), names.join(", "));
    Ok(c)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn peak_counts_half_open_intervals() {
        let v = [(0, 10, "a"), (10, 20, "b"), (5, 15, "c")];
        let (n, at, who) = peak(&v);
        assert_eq!((n, at), (2, 5));
        assert_eq!(who, ["a", "c"]);
        // A body that stalled from its very start: its first part is empty.
        let v = [(3, 3, "frozen"), (7, 9, "frozen"), (4, 6, "other")];
        assert_eq!(peak(&v).0, 1);
    }

    #[test]
    fn times_round_trip() {
        let us = parse_us("2000-01-01 00:00:01.5", "%Y-%m-%d %H:%M:%S%.f").unwrap();
        assert_eq!(us, 1_500_000);
        assert_eq!(clock(us), "00:00:01.500000");
        let tick = parse_us("2026-11-30T12:00:02.000000Z", "%Y-%m-%dT%H:%M:%S%.fZ").unwrap();
        assert_eq!(tick % 1_000_000, 0);
    }
}
