//! The claim loop: one `select!` over shutdown, finished jobs, wake-ups and a paced poll;
//! it claims only free slots and starts each claimed job on its own task.

use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use futures_util::FutureExt;
use tokio::sync::mpsc;
use tokio::task::JoinSet;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use super::execute::{panic_message, run_one};
use super::lease::{Held, Leases};
use super::outcome::{decide, Report};
use super::pacer::Pacer;
use super::Worker;
use crate::error::Result;
use crate::job::{CancelReason, ClaimFence, JobContext};
use crate::model::{Claimed, EmptyClaim};

/// The most jobs one claim transaction takes: a larger batch holds its row locks longer
/// and needs longer `IN` lists, for little gain once a commit is shared by this many jobs.
/// (At 100, a worker with 256 slots drained a third slower than one claim of 256 would.)
const MAX_CLAIM_BATCH: usize = 256;

/// How long the idle probe stays off after it failed (a server refusing connections, a
/// revoked grant): the worker polls with claims meanwhile, backing off as they do, instead
/// of trying the probe and a claim again at every interval.
const PROBE_COOLDOWN: std::time::Duration = std::time::Duration::from_secs(10);

/// The idle worker's probing: on after a claim that found nothing to take (and no
/// contention), off after any other claim or a failed probe.
#[derive(Debug)]
struct IdleProbe {
    active: bool,
    next: Instant,
    /// Until when a failed probe keeps it off.
    off_until: Option<Instant>,
    /// Opened at the first probe and kept for the worker's life (a worker that is never
    /// idle never opens it); closed after an error, and opened again at the next probe.
    conn: Option<crate::store::ProbeConnection>,
}

impl Default for IdleProbe {
    fn default() -> Self {
        IdleProbe {
            active: false,
            next: Instant::now(),
            off_until: None,
            conn: None,
        }
    }
}

impl IdleProbe {
    /// Probing from `first` on, unless it is on already or a failure keeps it off at `now`.
    fn start(&mut self, first: Instant, now: Instant) {
        if self.off_until.is_some_and(|t| now < t) || self.active {
            return;
        }
        self.active = true;
        self.next = first;
    }

    fn stop(&mut self) {
        self.active = false;
    }

    /// The probe failed at `now`: off for [`PROBE_COOLDOWN`].
    fn failed(&mut self, now: Instant) {
        self.active = false;
        self.off_until = Some(now + PROBE_COOLDOWN);
    }
}

/// What the claim loop hands to each job it starts.
pub(super) struct Running<'a> {
    pub(super) leases: &'a Leases,
    pub(super) reports: &'a mpsc::Sender<Report>,
    /// Fired in phase two of a shutdown.
    pub(super) shutdown: &'a CancellationToken,
    /// Jobs running per served queue.
    pub(super) per_queue: &'a PerQueue,
}

/// How many jobs of each served queue this worker runs, for
/// [`WorkerBuilder::queue_concurrency`](crate::WorkerBuilder::queue_concurrency).
#[derive(Debug)]
pub(super) struct PerQueue {
    running: std::sync::Arc<[(String, AtomicUsize)]>,
}

/// Counts one job of a queue as running until dropped (the job's task ends).
struct QueueSlot {
    running: std::sync::Arc<[(String, AtomicUsize)]>,
    index: usize,
}

impl Drop for QueueSlot {
    fn drop(&mut self) {
        self.running[self.index].1.fetch_sub(1, Ordering::Relaxed);
    }
}

impl PerQueue {
    pub(super) fn new(queues: &[String]) -> Self {
        PerQueue {
            running: queues
                .iter()
                .map(|q| (q.clone(), AtomicUsize::new(0)))
                .collect(),
        }
    }

    fn running(&self, queue: &str) -> usize {
        self.running
            .iter()
            .find(|(q, _)| q == queue)
            .map_or(0, |(_, n)| n.load(Ordering::Relaxed))
    }

    fn hold(&self, queue: &str) -> Option<QueueSlot> {
        let index = self.running.iter().position(|(q, _)| q == queue)?;
        self.running[index].1.fetch_add(1, Ordering::Relaxed);
        Some(QueueSlot {
            running: self.running.clone(),
            index,
        })
    }
}

pub(super) async fn drain(jobs: &mut JoinSet<()>) {
    while let Some(joined) = jobs.join_next().await {
        if let Err(e) = joined {
            tracing::error!(error = %e, "a job task ended abnormally");
        }
    }
}

impl Worker {
    pub(super) async fn claim_loop(
        &self,
        signal: impl Future<Output = ()>,
        run: &Running<'_>,
        jobs: &mut JoinSet<()>,
    ) {
        let cfg = &*self.config;
        let mut wake = self.queue.subscribe_wake();
        let mut signal = std::pin::pin!(signal);
        let mut pacer = Pacer::new(cfg.poll_min, cfg.poll_max, Instant::now());
        let probe_sql = crate::store::ready_probe_sql(cfg.queues.len());
        // While idle: the connection the probes use, and when the next one is due.
        let mut idle = IdleProbe::default();
        loop {
            if pacer.wants_claim() {
                // Free the slots of every job that has finished, not only the one that woke
                // us, so that one claim fills them all.
                while let Some(joined) = jobs.try_join_next() {
                    if let Err(e) = joined {
                        tracing::error!(error = %e, "a job task ended abnormally");
                    }
                }
            }
            if pacer.wants_claim() && jobs.len() < cfg.concurrency {
                pacer.claim_started();
                let free = cfg.concurrency - jobs.len();
                let began = Instant::now();
                let result = self.claim(free, run, jobs).await;
                let took = began.elapsed();
                let probing = cfg.idle_probe.filter(|_| match &result {
                    // Nothing to claim, or less than asked for: the queues are drained for
                    // now, so look cheaply for what comes next. Not under contention: the
                    // probe would see the locked jobs and claim for them again and again.
                    Ok((0, reason)) => *reason != Some(EmptyClaim::Contended),
                    Ok((n, _)) => *n < free,
                    Err(_) => false,
                });
                let now = Instant::now();
                match probing {
                    Some(every) => idle.start(now + every, now),
                    None => idle.stop(),
                }
                match result.map(|(n, _)| n) {
                    Ok(n) => {
                        if pacer.claimed(n, free, took, Instant::now(), idle.active) {
                            tracing::info!("database reachable again; claiming resumed");
                        }
                    }
                    Err(e) => {
                        let retry_in = pacer.claim_failed(took, Instant::now());
                        self.metrics.database_errors(1);
                        tracing::error!(error = %e, retry_in = ?retry_in, "claim failed; retrying");
                    }
                }
            }
            tokio::select! {
                biased;
                _ = self.stop.cancelled() => return,
                _ = &mut signal => return,
                Some(joined) = jobs.join_next(), if !jobs.is_empty() => {
                    if let Err(e) = joined {
                        tracing::error!(error = %e, "a job task ended abnormally");
                    }
                    pacer.job_finished(jobs.is_empty(), Instant::now());
                }
                _ = tokio::time::sleep_until(pacer.refill_at().unwrap_or(pacer.next_poll())), if pacer.refill_at().is_some() => {
                    pacer.refill_due();
                }
                changed = wake.changed() => {
                    if changed.is_ok() {
                        pacer.woken();
                    }
                }
                // While idle the probe stands in for the polls: a claim follows only when it
                // finds a job.
                _ = tokio::time::sleep_until(idle.next), if idle.active && jobs.len() < cfg.concurrency => {
                    let looked = self.probe(&mut idle, &probe_sql).await;
                    if looked.is_ok() {
                        self.metrics.idle_probes(1);
                    }
                    match looked {
                        Ok(true) => pacer.woken(),
                        Ok(false) => {}
                        Err(e) => {
                            // Back to polling with claims, whose errors are counted and
                            // backed off; probing resumes after an empty claim once the
                            // cool-down has passed.
                            idle.failed(Instant::now());
                            pacer.poll_due();
                            tracing::debug!(error = %e, "idle probe failed; polling with claims");
                        }
                    }
                    if let Some(every) = cfg.idle_probe {
                        idle.next = Instant::now() + every;
                    }
                }
                // With every slot busy there is nothing to poll for: a finished job wakes us.
                _ = tokio::time::sleep_until(pacer.next_poll()), if jobs.len() < cfg.concurrency => {
                    pacer.poll_due();
                }
            }
        }
    }

    /// Whether a served queue has a ready job, on the idle probe's connection (opened on
    /// first use). On an error the connection is closed. A kept connection that fails is
    /// replaced once at once: the server may have closed it while the worker was busy
    /// (its `wait_timeout`, a restart), which says nothing of the next one; only a failure
    /// on a new connection counts as a failed probe.
    async fn probe(&self, idle: &mut IdleProbe, sql: &str) -> Result<bool> {
        let kept = idle.conn.is_some();
        match self.probe_once(idle, sql).await {
            Err(e) if kept => {
                tracing::debug!(error = %e, "the idle probe's connection failed; probing on a new one");
                self.probe_once(idle, sql).await
            }
            other => other,
        }
    }

    async fn probe_once(&self, idle: &mut IdleProbe, sql: &str) -> Result<bool> {
        let mut conn = match idle.conn.take() {
            Some(c) => c,
            None => self.store.probe_connection().await?,
        };
        // On an error the connection is dropped: after a failed or abandoned read its state
        // is unknown.
        let found = self
            .store
            .probe_ready(&mut conn, sql, &self.config.queues)
            .await?;
        idle.conn = Some(conn);
        Ok(found)
    }

    /// Claims up to `free` jobs over the served queues, in their order, and starts them.
    /// Each queue's claim is started as soon as it commits, so an error on a later queue
    /// cannot strand jobs already claimed. One transaction takes at most
    /// [`MAX_CLAIM_BATCH`] jobs; a worker with more free slots claims again from the same
    /// queue until its slots are full or a claim comes back short (the queue has no more
    /// ready jobs for now). Returns how many were started and, when none, why.
    async fn claim(
        &self,
        free: usize,
        run: &Running<'_>,
        jobs: &mut JoinSet<()>,
    ) -> Result<(usize, Option<EmptyClaim>)> {
        let mut claimed = 0;
        for queue in &self.config.queues {
            loop {
                let want = free - claimed;
                let want = match self
                    .config
                    .queue_concurrency
                    .iter()
                    .find(|(q, _)| q == queue)
                {
                    Some((_, bound)) => {
                        want.min(bound.saturating_sub(run.per_queue.running(queue)))
                    }
                    None => want,
                };
                let want = want.min(MAX_CLAIM_BATCH);
                if want == 0 {
                    break;
                }
                let batch = self.store.claim(queue, &self.config.owner, want).await?;
                claimed += batch.len();
                let short = batch.len() < want;
                if !batch.is_empty() {
                    for c in &batch {
                        self.metrics.claimed(&c.queue, &c.kind);
                    }
                    tracing::debug!(queue = %queue, jobs = batch.len(), "claimed");
                }
                for c in batch {
                    self.spawn_job(c, run, jobs);
                }
                if short {
                    break;
                }
            }
            if claimed == free {
                break;
            }
        }
        if claimed == 0 {
            let reason = self.store.classify_empty(&self.config.queues).await?;
            self.metrics.empty(reason);
            if reason == EmptyClaim::Contended {
                tracing::debug!("claim found only jobs locked by other claimers");
            }
            return Ok((0, Some(reason)));
        }
        Ok((claimed, None))
    }

    fn spawn_job(&self, c: Claimed, run: &Running<'_>, jobs: &mut JoinSet<()>) {
        let (leases, reports, shutdown) = (run.leases, run.reports, run.shutdown);
        let ctx = JobContext {
            id: c.id,
            attempt: c.attempt,
            max_attempts: c.max_attempts,
            kind: c.kind.clone(),
            queue: c.queue.clone(),
            task_key: c.task_key.clone(),
            token: CancellationToken::new(),
            reason: Default::default(),
            data: self.data.clone(),
            claim: Some(Arc::new(ClaimFence::new(
                self.config.owner.clone(),
                c.holds_slot,
            ))),
            progress: Default::default(),
            output: Default::default(),
        };
        let displaced = leases.insert(
            c.id,
            Held {
                attempt: c.attempt,
                lease: c.lease,
                renewed_at: c.claimed_at,
                ctx: ctx.clone(),
                cancel_seen: false,
                finishing: false,
            },
        );
        if displaced {
            self.metrics.lease_lost(&c.queue, &c.kind);
            tracing::warn!(
                job.id = c.id,
                attempt = c.attempt,
                "claimed a job this worker was still running under an earlier attempt; that attempt is stopped"
            );
        }
        let span = tracing::info_span!(
            "job",
            job.kind = %c.kind,
            job.id = c.id,
            attempt = c.attempt,
            queue = %c.queue
        );
        crate::trace::continue_trace(&span, c.traceparent.as_deref(), c.attempt);
        let descriptor = self.registry.get(&c.kind);
        let registry = self.registry.clone();
        let reports = reports.clone();
        let cancel_grace = self.config.cancel_grace;
        let give_up_after = self.config.unrunnable_deadline;
        let shutdown = shutdown.clone();
        let leases = leases.clone();
        let (task_leases, metrics) = (leases.clone(), self.metrics.clone());
        let (id, attempt) = (c.id, c.attempt);
        let task_ctx = ctx.clone();
        let queue_slot = run.per_queue.hold(&c.queue);
        let progress_done = CancellationToken::new();
        let progress = super::progress::write_progress(
            self.store.clone(),
            ctx.progress.clone(),
            (c.id, self.config.owner.clone(), c.attempt),
            self.config.progress_interval,
            progress_done.clone(),
        );
        let task = async move {
            let _queue_slot = queue_slot;
            let run = async {
                let outcome = run_one(
                    c.kind.clone(),
                    descriptor,
                    c.payload,
                    ctx.clone(),
                    cancel_grace,
                    shutdown,
                    &registry,
                )
                .await;
                // The last progress value is written before the outcome, while the row is
                // still this attempt's.
                progress_done.cancel();
                outcome
            };
            // The progress writer runs beside the job on this task (no task of its own per
            // job): it sleeps until the job reports progress, and returns once the job has,
            // after writing the value still unwritten.
            let (outcome, ()) = tokio::join!(run, progress);
            let Some(outcome) = decide(outcome, &ctx, descriptor, give_up_after) else {
                // Stopped for a lost lease: by the lease thread, which let the claim go, or
                // by the run itself at its stop-by moment, before the lease thread got to it.
                if task_leases.release(id, attempt) {
                    metrics.lease_lost(&ctx.queue, &ctx.kind);
                    tracing::error!(
                        job.id = id,
                        attempt,
                        "lease could not be renewed in time; job stopped, nothing of this attempt will be recorded, and it will run again after its lease expires"
                    );
                }
                return;
            };
            let report = Report {
                id: c.id,
                attempt: c.attempt,
                kind: c.kind,
                queue: c.queue,
                holds_slot: c.holds_slot,
                outcome,
            };
            if reports.send(report).await.is_err() {
                tracing::error!(
                    "outcome writer is gone; the job's lease will expire and it will run again"
                );
            }
        };
        jobs.spawn(
            async move {
                // A panic outside the job's own code (a tracing layer, a metrics recorder)
                // must not leave the claim in `leases`, renewed for ever: stop and release
                // it, so that the lease runs out and the job is taken back.
                if let Err(panic) = AssertUnwindSafe(task).catch_unwind().await {
                    task_ctx.cancel(CancelReason::LeaseLost);
                    leases.release(id, attempt);
                    tracing::error!(
                        job.id = id,
                        attempt,
                        panic = %panic_message(&*panic),
                        "the job's task panicked outside the job; its lease is released, and the job is taken back once it expires"
                    );
                }
            }
            .instrument(span),
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn a_failed_probe_keeps_probing_off_for_its_cool_down() {
        let now = Instant::now();
        let mut idle = IdleProbe::default();
        idle.start(now + Duration::from_millis(90), now);
        assert!(idle.active);
        idle.failed(now);
        assert!(!idle.active);
        // An empty claim soon after does not turn it back on...
        idle.start(
            now + Duration::from_millis(90),
            now + Duration::from_secs(1),
        );
        assert!(!idle.active);
        // ...one after the cool-down does.
        let later = now + PROBE_COOLDOWN;
        idle.start(later + Duration::from_millis(90), later);
        assert!(idle.active);
        assert_eq!(idle.next, later + Duration::from_millis(90));
    }
}
