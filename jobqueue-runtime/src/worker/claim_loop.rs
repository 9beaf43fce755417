//! The claim loop: one `select!` over shutdown, finished jobs, wake-ups and a paced poll;
//! it claims only free slots and starts each claimed job on its own task, as an
//! [`Execution`]. While the queues are drained an idle probe stands in for the polls, in
//! this worker's slot of its group's rotation ([`Roster::next_probe`]): the workers serving
//! the same queues take turns, so that together they probe about as often as one would.
//! On PostgreSQL the store's listener stands in for the probe ([`WakeSource::Listen`]): a
//! notification wakes the loop, and a rare fallback claim takes the probe's timer.

use std::future::Future;

use tokio::task::JoinSet;
use tokio::time::Instant;

use super::execute::{Execution, Running};
use super::heartbeat::Roster;
use super::pacer::Pacer;
use super::Worker;
use crate::error::Result;
use crate::model::EmptyClaim;
use crate::store::WakeSource;

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
    /// Taken at the first probe of an idle spell: one of the pool's, given back before the
    /// next claim; or, on a pool of the application's, one of its own, kept for the
    /// worker's life. Closed after an error, and taken again at the next probe.
    conn: Option<crate::store::ProbeConn>,
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
        roster: &Roster,
    ) {
        let cfg = &*self.config;
        let mut wake = self.queue.subscribe_wake();
        let mut signal = std::pin::pin!(signal);
        let mut pacer = Pacer::new(cfg.poll_min, cfg.poll_max, Instant::now());
        let probe_sql = crate::store::ready_probe_sql(cfg.queues.len());
        // While idle: the connection the probes use, and when the next one is due (on
        // PostgreSQL: when the next fallback claim is due).
        let mut idle = IdleProbe::default();
        // What says that work may be there while idle: the probe, or a listener.
        let source = match cfg.idle_probe {
            Some(_) => self.store.wake_source(&cfg.queues, self.queue.app_pool()),
            None => WakeSource::Probe,
        };
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
                // The claim may need every connection of the pool.
                if matches!(idle.conn, Some(crate::store::ProbeConn::Pooled(_))) {
                    idle.conn = None;
                }
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
                match (probing, source.listener()) {
                    // In this worker's slot of its group's rotation.
                    (Some(every), None) => idle.start(roster.next_probe(now, every), now),
                    // A listener that listens stands in for the polls but for a rare claim;
                    // one that cannot leaves the worker polling with claims.
                    (Some(_), Some(listener)) if listener.is_up() => {
                        idle.start(now + cfg.listen_fallback, now)
                    }
                    _ => idle.stop(),
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
                // A notification for a served queue (PostgreSQL).
                _ = source.woken(), if jobs.len() < cfg.concurrency => {
                    pacer.woken();
                }
                // While listening, a claim now and then: a notification sent while the
                // listener was reconnecting is lost.
                _ = tokio::time::sleep_until(idle.next), if idle.active && jobs.len() < cfg.concurrency && source.listener().is_some() => {
                    pacer.poll_due();
                    idle.next = Instant::now() + cfg.listen_fallback;
                }
                // While idle the probe stands in for the polls: a claim follows only when it
                // finds a job.
                _ = tokio::time::sleep_until(idle.next), if idle.active && jobs.len() < cfg.concurrency && source.listener().is_none() => {
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
                        idle.next = roster.next_probe(Instant::now(), every);
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
            None => match self.store.probe_conn().await? {
                Some(c) => c,
                // The pool has none to spare: this slot is skipped.
                None => return Ok(false),
            },
        };
        // On an error the connection is dropped: after a failed or abandoned read its state
        // is unknown.
        let found = self
            .store
            .probe_on(&mut conn, sql, &self.config.queues)
            .await?;
        let pooled = matches!(conn, crate::store::ProbeConn::Pooled(_));
        if !(pooled && self.store.pool_exhausted()) {
            idle.conn = Some(conn);
        }
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
                    jobs.spawn(Execution::new(self, c, run).run());
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
