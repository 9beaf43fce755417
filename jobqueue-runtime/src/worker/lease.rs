//! Lease renewal: while a worker holds jobs it extends their leases, one round for all of them
//! (a locking read that skips rows other sessions hold, then one update), whenever one of them
//! is a quarter of the way through its lease; and it stops any job whose lease it can no longer
//! vouch for before another worker may take it.
//!
//! The renewer runs on the worker's lease thread (see [`crate::Worker::run_until`]), away from
//! job code, and every call it makes is bounded by a quarter of the shortest lease it renews.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio_util::sync::CancellationToken;

use crate::job::{CancelReason, JobContext};
use crate::metrics::Metrics;
use crate::store::Store;

/// One claim this worker holds, from claim until its outcome is written.
#[derive(Debug)]
pub(crate) struct Held {
    pub(crate) attempt: u32,
    pub(crate) lease: Duration,
    /// When the last successful renewal (or the claim) was *sent*: the server's lease runs
    /// from a moment after this one, so deadlines computed from it are conservative.
    pub(crate) renewed_at: Instant,
    pub(crate) ctx: JobContext,
    /// The operator asked to cancel it; renewals must not skip it any more.
    pub(crate) cancel_seen: bool,
    /// The attempt has ended and the outcome writer is recording it. The writer's fenced
    /// write, not a renewal that finds the row already finished, decides whether the lease
    /// was lost.
    pub(crate) finishing: bool,
}

impl Held {
    /// When the job must be stopped if no renewal comes: three quarters of its lease after
    /// the last renewal (or the claim) was sent.
    fn stop_at(&self) -> Instant {
        self.renewed_at + self.lease.mul_f64(0.75)
    }
}

/// The claims this worker holds, shared by the claim loop, the job tasks, the outcome
/// writer and the renewer.
#[derive(Debug, Clone, Default)]
pub(crate) struct Leases {
    inner: Arc<Mutex<HashMap<u64, Held>>>,
}

impl Leases {
    /// Records a claim. If this worker still held an earlier claim of the same job (it
    /// stalled past its lease, and its own maintenance and claim loop took the job back and
    /// claimed it again before the renewer noticed), that attempt is told its lease is lost:
    /// nothing tracks it any more, so it must not go on next to the new one. Returns whether
    /// an earlier claim was displaced.
    pub(crate) fn insert(&self, id: u64, held: Held) -> bool {
        held.ctx.stop_by(held.stop_at());
        match self.lock().insert(id, held) {
            Some(old) => {
                old.ctx.cancel(CancelReason::LeaseLost);
                true
            }
            None => false,
        }
    }

    /// How many claims this worker holds now (its running jobs, for the heartbeat).
    pub(crate) fn len(&self) -> usize {
        self.lock().len()
    }

    /// Removes the claim if it is still this attempt's. Returns whether it was.
    pub(crate) fn release(&self, id: u64, attempt: u32) -> bool {
        let mut map = self.lock();
        match map.get(&id) {
            Some(h) if h.attempt == attempt => {
                map.remove(&id);
                true
            }
            _ => false,
        }
    }

    /// Whether this worker still holds the claim (id, attempt).
    pub(crate) fn holds(&self, id: u64, attempt: u32) -> bool {
        self.lock().get(&id).is_some_and(|h| h.attempt == attempt)
    }

    /// Marks claims whose outcome the writer is about to record.
    pub(crate) fn mark_finishing(&self, claims: impl IntoIterator<Item = (u64, u32)>) {
        let mut map = self.lock();
        for (id, attempt) in claims {
            if let Some(h) = map.get_mut(&id) {
                if h.attempt == attempt {
                    h.finishing = true;
                }
            }
        }
    }

    /// Asks every running job to stop.
    pub(crate) fn cancel_all(&self, reason: CancelReason) {
        for h in self.lock().values() {
            h.ctx.cancel(reason);
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<u64, Held>> {
        // A panic while holding this lock cannot leave the map half-updated (every update is
        // a single insert or remove), so a poisoned lock is still sound to use.
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// How often the renewer looks at its leases. It is only a look at memory: renewals are sent
/// when a lease is a quarter used. At the shortest lease (1 s) a job whose renewals fail is
/// stopped between 750 and 800 ms after its last renewal was sent, well before the server
/// can let the lease go.
const CHECK_EVERY: Duration = Duration::from_millis(50);

/// Renews leases until `stop` fires.
pub(crate) async fn renew_loop(
    store: Store,
    owner: String,
    leases: Leases,
    metrics: Arc<Metrics>,
    stop: CancellationToken,
) {
    // Renewals are sent from their own task: a statement stuck on a row lock or on a server
    // that stopped answering must not keep this loop from stopping the jobs whose leases it
    // can no longer vouch for.
    let mut renewal: Option<tokio::task::JoinHandle<Instant>> = None;
    let mut not_before = Instant::now();
    loop {
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = tokio::time::sleep(CHECK_EVERY) => {}
        }
        stop_expired(&leases, &metrics);
        if let Some(done) = renewal.take_if(|r| r.is_finished()) {
            not_before = done.await.unwrap_or_else(|_| Instant::now());
        }
        if renewal.is_none() && Instant::now() >= not_before {
            let (store, owner, leases, metrics) = (
                store.clone(),
                owner.clone(),
                leases.clone(),
                metrics.clone(),
            );
            renewal = Some(tokio::spawn(async move {
                renew_due(&store, &owner, &leases, &metrics).await
            }));
        }
    }
}

/// Stops every job whose lease has gone unrenewed for too long.
fn stop_expired(leases: &Leases, metrics: &Metrics) {
    let now = Instant::now();
    let mut map = leases.lock();
    // Two renewals in a row have failed (or one has not answered): the server may let the
    // lease go at any moment now. Stop the job before another worker can start it.
    let expired: Vec<u64> = map
        .iter()
        .filter(|(_, h)| now >= h.stop_at())
        .map(|(&id, _)| id)
        .collect();
    for id in expired {
        if let Some(h) = map.remove(&id) {
            h.ctx.cancel(CancelReason::LeaseLost);
            metrics.lease_lost(&h.ctx.queue, &h.ctx.kind);
            tracing::error!(
                job.id = id,
                attempt = h.attempt,
                lease = ?h.lease,
                "lease could not be renewed in time; job stopped, nothing of this attempt will be recorded, and it will run again after its lease expires"
            );
        }
    }
}

/// How long one renewal call may wait for the server: a quarter of the lease. A renewal sent a
/// quarter of the way through a lease that gets no answer is given up (with its connection)
/// at half of it, which leaves a second try as long as the first, on a new connection if need
/// be, before the job must be stopped at three quarters: one slow statement on a busy host
/// does not cost a job its lease. (A shorter bound would give more tries, but abandon calls
/// that a busy host answers slowly, and pay a new connection for each.)
pub(crate) fn call_timeout(lease: Duration) -> Duration {
    (lease / 4).clamp(Duration::from_millis(100), Duration::from_secs(10))
}

/// One renewal round, if any lease is due: a quarter of the way through its lease since it was
/// last renewed. The round then renews every lease this worker holds, due or not, so that the
/// leases of jobs claimed at different moments travel together and a busy worker sends about
/// one round per quarter of a lease instead of one per job. Returns when the next round may
/// start: at once (after an error too: a call that failed has already waited for its
/// timeout), or after a twelfth of the shortest lease when a row was locked by another
/// session, so that a lasting lock is not polled every tick.
async fn renew_due(store: &Store, owner: &str, leases: &Leases, metrics: &Metrics) -> Instant {
    let now = Instant::now();
    let mut any_due = false;
    let mut shortest = Duration::MAX;
    let mut plain = Vec::new();
    let mut with_cancel = Vec::new();
    for (&id, h) in leases.lock().iter() {
        any_due |= now.duration_since(h.renewed_at) >= h.lease / 4;
        shortest = shortest.min(h.lease);
        if h.cancel_seen {
            with_cancel.push((id, h.attempt));
        } else {
            plain.push((id, h.attempt));
        }
    }
    if !any_due {
        return now;
    }
    let store = store.bounded(call_timeout(shortest));
    let mut locked = false;
    for (claims, with_cancel) in [(plain, false), (with_cancel, true)] {
        if claims.is_empty() {
            continue;
        }
        let sent = Instant::now();
        let ids: Vec<u64> = claims.iter().map(|c| c.0).collect();
        metrics.renewals(1);
        match store.renew_ids(owner, &ids, with_cancel).await {
            Ok(renewed) => {
                check_clock(leases, &renewed, Instant::now());
                let renewed: Vec<u64> = renewed.into_iter().map(|r| r.0).collect();
                mark_renewed(leases, &claims, &renewed, sent);
                if renewed.len() < claims.len() {
                    let renewed: HashSet<u64> = renewed.into_iter().collect();
                    let rest: Vec<(u64, u32)> = claims
                        .into_iter()
                        .filter(|c| !renewed.contains(&c.0))
                        .collect();
                    locked |= sort_out(&store, owner, leases, metrics, &rest).await;
                }
            }
            Err(e) => {
                metrics.database_errors(1);
                tracing::error!(error = %e, jobs = ids.len(), "lease renewal failed; retrying shortly");
            }
        }
    }
    if locked {
        Instant::now() + shortest / 12
    } else {
        Instant::now()
    }
}

/// Warns when the server saw less of a lease left than this worker can account for.
///
/// When the renewal's reply came, at `received`, a lease renewed (or claimed) at `renewed_at`
/// had at least `lease - (received - renewed_at)` left by the server's clock when the server
/// read it, since the server started it after `renewed_at`. Markedly less means the server's
/// clock jumped forward (a step, or a failover to a host whose clock is ahead): every
/// worker's maintenance then sees leases expire early and takes back jobs that still run.
/// This cannot undo that; it says so.
fn check_clock(leases: &Leases, renewed: &[(u64, i64)], received: Instant) {
    let mut worst: Option<(u64, Duration)> = None;
    {
        let map = leases.lock();
        for &(id, left_us) in renewed {
            let Some(h) = map.get(&id) else { continue };
            let expected = h
                .lease
                .saturating_sub(received.saturating_duration_since(h.renewed_at));
            let left = Duration::from_micros(left_us.max(0).unsigned_abs());
            let short = expected.saturating_sub(left);
            if short > (h.lease / 10).max(Duration::from_millis(200))
                && worst.is_none_or(|(_, w)| short > w)
            {
                worst = Some((id, short));
            }
        }
    }
    if let Some((id, short)) = worst {
        tracing::warn!(
            job.id = id,
            ahead = ?short,
            "the database's clock ran {short:.1?} ahead of this worker's since the lease was last renewed: if it jumped forward, leases look expired early to every worker and jobs may run twice; keep the server's clock slewed, never stepped"
        );
    }
}

/// Records the renewal, sent at `sent`, of those `claims` whose id is in `renewed`.
fn mark_renewed(leases: &Leases, claims: &[(u64, u32)], renewed: &[u64], sent: Instant) {
    let renewed: HashSet<&u64> = renewed.iter().collect();
    let mut map = leases.lock();
    for (id, attempt) in claims {
        if !renewed.contains(id) {
            continue;
        }
        if let Some(h) = map.get_mut(id) {
            if h.attempt == *attempt {
                h.renewed_at = sent;
                h.ctx.stop_by(h.stop_at());
            }
        }
    }
}

/// A renewal left out some of `claims`: find out, per job, whether the lease was lost, an
/// operator asked for a cancel, or the row was only locked by another session (it is then
/// left for the next round, and stopped in time if its lease cannot be renewed). Returns
/// whether some job was held but locked.
async fn sort_out(
    store: &Store,
    owner: &str,
    leases: &Leases,
    metrics: &Metrics,
    claims: &[(u64, u32)],
) -> bool {
    let states = match store.lease_states(owner, claims).await {
        Ok(s) => s,
        Err(e) => {
            tracing::error!(error = %e, "could not read lease states after a short renewal; retrying shortly");
            return false;
        }
    };
    let mut locked = false;
    let mut cancel_now = Vec::new();
    {
        let mut map = leases.lock();
        for s in states {
            let Some(&(_, attempt)) = claims.iter().find(|c| c.0 == s.id) else {
                continue;
            };
            let Some(h) = map.get_mut(&s.id).filter(|h| h.attempt == attempt) else {
                // Released meanwhile: its outcome was written.
                continue;
            };
            if h.finishing {
                // The writer is recording this attempt: a row found finished is most likely
                // its own write, whose reply has not arrived yet. The writer's fenced write
                // tells which.
                continue;
            }
            if h.ctx.completion_written() && !(s.held && s.cancel_requested && !h.cancel_seen) {
                // The job completed itself in its own transaction: while that is open it
                // holds the row (locked, so not renewed); once committed the row is done.
                // The writer reads which when the job returns; a transaction that outlasts
                // the lease is stopped by `stop_expired` like any unrenewed job. A row still
                // held with a cancel requested tells that the transaction rolled back (the
                // cancel waited for it): the job goes on, and is told of the cancel below.
                locked |= s.held;
                continue;
            }
            if !s.held {
                if let Some(h) = map.remove(&s.id) {
                    h.ctx.cancel(CancelReason::LeaseLost);
                    metrics.lease_lost(&h.ctx.queue, &h.ctx.kind);
                }
                tracing::warn!(
                    job.id = s.id,
                    attempt,
                    "lease lost: another worker took the job; stopping it, nothing of this attempt will be recorded"
                );
            } else if s.cancel_requested && !h.cancel_seen {
                h.cancel_seen = true;
                h.ctx.cancel(CancelReason::Requested);
                tracing::info!(
                    job.id = s.id,
                    "cancel requested by an operator; asking the job to stop"
                );
                cancel_now.push((s.id, attempt));
            } else {
                // Held, but its row is locked by another session: not renewed this time.
                locked = true;
                tracing::debug!(
                    job.id = s.id,
                    attempt,
                    "lease not renewed: the job's row is locked by another session; trying again shortly"
                );
            }
        }
    }
    if !cancel_now.is_empty() {
        let ids: Vec<u64> = cancel_now.iter().map(|c| c.0).collect();
        let sent = Instant::now();
        metrics.renewals(1);
        match store.renew_ids(owner, &ids, true).await {
            Ok(renewed) => {
                // A short count is sorted out at the next round, like any other.
                let renewed: Vec<u64> = renewed.into_iter().map(|r| r.0).collect();
                mark_renewed(leases, &cancel_now, &renewed, sent);
            }
            Err(e) => {
                metrics.database_errors(1);
                tracing::error!(error = %e, jobs = ids.len(), "lease renewal failed; retrying shortly");
            }
        }
    }
    locked
}

#[cfg(test)]
mod tests {
    use super::*;

    fn held(id: u64, attempt: u32) -> Held {
        Held {
            attempt,
            lease: Duration::from_secs(30),
            renewed_at: Instant::now(),
            ctx: JobContext {
                id,
                attempt,
                max_attempts: 5,
                kind: "k".into(),
                queue: "default".into(),
                task_key: "k:1".into(),
                token: CancellationToken::new(),
                reason: Default::default(),
                data: Default::default(),
                claim: None,
                progress: Default::default(),
                output: Default::default(),
            },
            cancel_seen: false,
            finishing: false,
        }
    }

    #[test]
    fn a_second_claim_of_the_same_job_stops_the_first_attempt() {
        let leases = Leases::default();
        let first = held(1, 1);
        let first_ctx = first.ctx.clone();
        assert!(!leases.insert(1, first));
        let second = held(1, 2);
        let second_ctx = second.ctx.clone();
        assert!(leases.insert(1, second), "the earlier claim is reported");
        assert!(first_ctx.is_cancelled(), "the orphaned attempt is stopped");
        assert_eq!(first_ctx.cancel_reason(), Some(CancelReason::LeaseLost));
        assert!(!second_ctx.is_cancelled());
        assert!(leases.holds(1, 2) && !leases.holds(1, 1));
    }

    #[test]
    fn a_job_is_stopped_once_three_quarters_of_its_lease_pass_unrenewed() {
        let leases = Leases::default();
        let metrics = Metrics::default();
        let (mut late, mut fresh) = (held(1, 1), held(2, 1));
        // 30 s leases: stopped from 22.5 s after the last renewal was sent.
        late.renewed_at = Instant::now() - Duration::from_millis(22_600);
        fresh.renewed_at = Instant::now() - Duration::from_secs(20);
        let (late_ctx, fresh_ctx) = (late.ctx.clone(), fresh.ctx.clone());
        leases.insert(1, late);
        leases.insert(2, fresh);
        stop_expired(&leases, &metrics);
        assert_eq!(late_ctx.cancel_reason(), Some(CancelReason::LeaseLost));
        assert!(!leases.holds(1, 1), "released: nothing of it is written");
        assert!(!fresh_ctx.is_cancelled() && leases.holds(2, 1));
        assert_eq!(metrics.snapshot().lease_lost, 1);
    }

    #[test]
    fn a_renewal_counts_only_for_the_attempt_it_was_sent_for() {
        let leases = Leases::default();
        let old = Instant::now() - Duration::from_secs(10);
        let mut h = held(1, 2);
        h.renewed_at = old;
        leases.insert(1, h);
        let sent = Instant::now();
        mark_renewed(&leases, &[(1, 1)], &[1], sent);
        assert_eq!(
            leases.lock()[&1].renewed_at,
            old,
            "an earlier attempt's renewal"
        );
        mark_renewed(&leases, &[(1, 2)], &[], sent);
        assert_eq!(leases.lock()[&1].renewed_at, old, "not renewed");
        mark_renewed(&leases, &[(1, 2)], &[1], sent);
        assert_eq!(leases.lock()[&1].renewed_at, sent);
    }

    #[test]
    fn a_renewal_call_may_take_a_quarter_of_the_lease_within_bounds() {
        assert_eq!(
            call_timeout(Duration::from_secs(30)),
            Duration::from_millis(7500)
        );
        assert_eq!(
            call_timeout(Duration::from_millis(200)),
            Duration::from_millis(100)
        );
        assert_eq!(
            call_timeout(Duration::from_secs(3600)),
            Duration::from_secs(10)
        );
    }
}
