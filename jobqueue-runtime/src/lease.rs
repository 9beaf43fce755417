//! Lease renewal: while a worker holds jobs it extends their leases, one statement for all of
//! them, a third of the way through each lease; and it stops any job whose lease it can no
//! longer vouch for before another worker may take it.

use std::collections::HashMap;
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
        match self.lock().insert(id, held) {
            Some(old) => {
                old.ctx.cancel(CancelReason::LeaseLost);
                true
            }
            None => false,
        }
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
/// when a lease is a third used. At the shortest lease (1 s) a job whose renewals fail is
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
    let mut renewal: Option<tokio::task::JoinHandle<()>> = None;
    loop {
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = tokio::time::sleep(CHECK_EVERY) => {}
        }
        stop_expired(&leases, &metrics);
        if renewal.as_ref().is_none_or(|r| r.is_finished()) {
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
        .filter(|(_, h)| now.duration_since(h.renewed_at) >= h.lease.mul_f64(0.75))
        .map(|(&id, _)| id)
        .collect();
    for id in expired {
        if let Some(h) = map.remove(&id) {
            h.ctx.cancel(CancelReason::LeaseLost);
            metrics.add(&metrics.lease_lost, "jobqueue_leases_lost_total", 1);
            tracing::error!(
                job.id = id,
                attempt = h.attempt,
                lease = ?h.lease,
                "lease could not be renewed in time; job stopped, nothing of this attempt will be recorded, and it will run again after its lease expires"
            );
        }
    }
}

async fn renew_due(store: &Store, owner: &str, leases: &Leases, metrics: &Metrics) {
    let now = Instant::now();
    let mut due = Vec::new();
    let mut due_cancel = Vec::new();
    for (&id, h) in leases.lock().iter() {
        if now.duration_since(h.renewed_at) >= h.lease / 3 {
            if h.cancel_seen {
                due_cancel.push((id, h.attempt));
            } else {
                due.push((id, h.attempt));
            }
        }
    }
    for (claims, with_cancel) in [(due, false), (due_cancel, true)] {
        if claims.is_empty() {
            continue;
        }
        let sent = Instant::now();
        let ids: Vec<u64> = claims.iter().map(|c| c.0).collect();
        match store.renew(owner, &ids, with_cancel).await {
            Ok(matched) if matched == ids.len() as u64 => mark_renewed(leases, &claims, sent),
            Ok(_) => sort_out(store, owner, leases, metrics, &claims, sent).await,
            Err(e) => {
                metrics.add(
                    &metrics.database_errors,
                    "jobqueue_database_errors_total",
                    1,
                );
                tracing::error!(error = %e, jobs = ids.len(), "lease renewal failed; retrying shortly");
            }
        }
    }
}

fn mark_renewed(leases: &Leases, claims: &[(u64, u32)], sent: Instant) {
    let mut map = leases.lock();
    for (id, attempt) in claims {
        if let Some(h) = map.get_mut(id) {
            if h.attempt == *attempt {
                h.renewed_at = sent;
            }
        }
    }
}

/// A renewal matched fewer rows than it named: find out, per job, whether the lease was lost
/// or an operator asked for a cancel.
async fn sort_out(
    store: &Store,
    owner: &str,
    leases: &Leases,
    metrics: &Metrics,
    claims: &[(u64, u32)],
    sent: Instant,
) {
    let states = match store.lease_states(owner, claims).await {
        Ok(s) => s,
        Err(e) => {
            tracing::error!(error = %e, "could not read lease states after a short renewal; retrying shortly");
            return;
        }
    };
    let mut cancel_now = Vec::new();
    {
        let mut map = leases.lock();
        for s in states {
            let Some(&(_, attempt)) = claims.iter().find(|c| c.0 == s.id) else {
                continue;
            };
            if !s.held {
                if map.get(&s.id).is_some_and(|h| h.attempt == attempt) {
                    if let Some(h) = map.remove(&s.id) {
                        h.ctx.cancel(CancelReason::LeaseLost);
                    }
                    metrics.add(&metrics.lease_lost, "jobqueue_leases_lost_total", 1);
                    tracing::warn!(
                        job.id = s.id,
                        attempt,
                        "lease lost: another worker took the job; stopping it, nothing of this attempt will be recorded"
                    );
                }
            } else if let Some(h) = map.get_mut(&s.id) {
                if s.cancel_requested && !h.cancel_seen {
                    h.cancel_seen = true;
                    h.ctx.cancel(CancelReason::Requested);
                    tracing::info!(
                        job.id = s.id,
                        "cancel requested by an operator; asking the job to stop"
                    );
                    cancel_now.push((s.id, attempt));
                } else {
                    h.renewed_at = sent;
                }
            }
        }
    }
    if !cancel_now.is_empty() {
        let ids: Vec<u64> = cancel_now.iter().map(|c| c.0).collect();
        let sent = Instant::now();
        match store.renew(owner, &ids, true).await {
            Ok(n) if n == ids.len() as u64 => mark_renewed(leases, &cancel_now, sent),
            // A short count is sorted out at the next tick, like any other.
            Ok(_) => {}
            Err(e) => {
                metrics.add(
                    &metrics.database_errors,
                    "jobqueue_database_errors_total",
                    1,
                );
                tracing::error!(error = %e, jobs = ids.len(), "lease renewal failed; retrying shortly");
            }
        }
    }
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
            },
            cancel_seen: false,
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
}
