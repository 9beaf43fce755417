//! When the claim loop claims: at once on start, when woken, when polled, and when slots
//! free up after a claim that filled them all. Pure: it is told what happened and when,
//! and says when to claim next, so its decisions are tested without a database or a clock.

use std::time::Duration;

use tokio::time::Instant;

use crate::retry::jitter;

/// The first wait after a failed claim; it doubles on each failure in a row.
const FIRST_ERROR_DELAY: Duration = Duration::from_millis(100);

/// The longest wait after failed claims.
const MAX_ERROR_DELAY: Duration = Duration::from_secs(10);

/// How far off the next poll is set while an idle probe stands in for the polls: never,
/// in practice (a probe that finds a job, or fails, asks for a claim at once).
const NO_POLL: Duration = Duration::from_secs(24 * 3600);

/// The claim loop's pacing state.
#[derive(Debug)]
pub(super) struct Pacer {
    poll_min: Duration,
    poll_max: Duration,
    /// The wait before the next poll after an empty claim; doubles up to `poll_max`.
    idle_delay: Duration,
    /// The wait after a failed claim; doubles up to [`MAX_ERROR_DELAY`].
    error_delay: Duration,
    in_outage: bool,
    /// Claim at once on start; afterwards when woken, polled, or a slot frees while the
    /// last claim filled every slot (more may be waiting).
    want_claim: bool,
    /// The last claim that took jobs filled every free slot.
    saturated: bool,
    next_poll: Instant,
    /// After a full claim, a freed slot is refilled once every slot is free, or one
    /// claim's duration after the first one freed, whichever comes first: jobs that finish
    /// together are then claimed for together, in one transaction instead of one per
    /// slot, and no slot waits longer than a claim would have kept it waiting anyway.
    refill_at: Option<Instant>,
    /// How long the last claim took, at most `poll_min`.
    claim_took: Duration,
}

impl Pacer {
    /// A pacer that wants to claim at once.
    pub(super) fn new(poll_min: Duration, poll_max: Duration, now: Instant) -> Pacer {
        Pacer {
            poll_min,
            poll_max,
            idle_delay: poll_min,
            error_delay: FIRST_ERROR_DELAY,
            in_outage: false,
            want_claim: true,
            saturated: false,
            next_poll: now,
            refill_at: None,
            claim_took: Duration::ZERO,
        }
    }

    /// Whether the loop should claim (if it has a free slot).
    pub(super) fn wants_claim(&self) -> bool {
        self.want_claim
    }

    /// A claim starts now.
    pub(super) fn claim_started(&mut self) {
        self.want_claim = false;
        self.refill_at = None;
    }

    /// A claim for `free` slots took `n` jobs in `took`, ending at `now`. `probed`: an idle
    /// probe looks for jobs from now on, and stands in for the polls after an empty claim.
    /// Returns true when it ends an outage (the claim before it failed).
    pub(super) fn claimed(
        &mut self,
        n: usize,
        free: usize,
        took: Duration,
        now: Instant,
        probed: bool,
    ) -> bool {
        self.claim_took = took.min(self.poll_min);
        let recovered = std::mem::take(&mut self.in_outage);
        self.error_delay = FIRST_ERROR_DELAY;
        if n == 0 && probed {
            self.next_poll = now + NO_POLL;
        } else if n == 0 {
            self.next_poll = now + jitter(self.idle_delay, 0.2);
            self.idle_delay = (self.idle_delay * 2).min(self.poll_max);
        } else {
            self.idle_delay = self.poll_min;
            self.saturated = n == free;
            // A partial batch drained the queue for now: poll soon after.
            self.next_poll = now + self.poll_min;
        }
        recovered
    }

    /// A claim that took `took` failed at `now`. Returns the wait before the next try.
    pub(super) fn claim_failed(&mut self, took: Duration, now: Instant) -> Duration {
        self.claim_took = took.min(self.poll_min);
        self.in_outage = true;
        let wait = self.error_delay;
        self.next_poll = now + jitter(wait, 0.2);
        self.error_delay = (wait * 2).min(MAX_ERROR_DELAY);
        wait
    }

    /// A job finished at `now`; `none_left` when it was the last one running.
    pub(super) fn job_finished(&mut self, none_left: bool, now: Instant) {
        if self.saturated {
            if none_left {
                self.want_claim = true;
            } else if self.refill_at.is_none() {
                self.refill_at = Some(now + self.claim_took);
            }
        }
    }

    /// When freed slots are to be refilled, if some are waiting for it.
    pub(super) fn refill_at(&self) -> Option<Instant> {
        self.refill_at
    }

    /// The refill time came.
    pub(super) fn refill_due(&mut self) {
        self.refill_at = None;
        self.want_claim = true;
    }

    /// This process enqueued, retried or resumed something: claim at once, and poll from
    /// the shortest interval again.
    pub(super) fn woken(&mut self) {
        self.want_claim = true;
        self.idle_delay = self.poll_min;
    }

    /// When to poll next (while a slot is free).
    pub(super) fn next_poll(&self) -> Instant {
        self.next_poll
    }

    /// The poll time came.
    pub(super) fn poll_due(&mut self) {
        self.want_claim = true;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIN: Duration = Duration::from_millis(50);
    const MAX: Duration = Duration::from_secs(2);

    /// The wait until the next poll, from `now`.
    fn wait(p: &Pacer, now: Instant) -> Duration {
        p.next_poll() - now
    }

    fn within(d: Duration, of: Duration) -> bool {
        d >= of.mul_f64(0.8) && d <= of.mul_f64(1.2)
    }

    #[test]
    fn it_claims_at_once_on_start() {
        let now = Instant::now();
        let p = Pacer::new(MIN, MAX, now);
        assert!(p.wants_claim());
        assert_eq!(p.next_poll(), now);
    }

    #[test]
    fn empty_claims_back_off_to_the_longest_interval_and_a_hit_resets_it() {
        let now = Instant::now();
        let mut p = Pacer::new(MIN, MAX, now);
        let mut expected = MIN;
        for _ in 0..8 {
            p.claim_started();
            assert!(!p.wants_claim());
            p.claimed(0, 10, Duration::ZERO, now, false);
            assert!(
                within(wait(&p, now), expected),
                "{:?} vs {expected:?}",
                wait(&p, now)
            );
            expected = (expected * 2).min(MAX);
            p.poll_due();
        }
        assert!(within(wait(&p, now), MAX));
        // A claim that takes jobs polls again after the shortest interval, without jitter.
        p.claimed(3, 10, Duration::ZERO, now, false);
        assert_eq!(wait(&p, now), MIN);
        p.claimed(0, 10, Duration::ZERO, now, false);
        assert!(within(wait(&p, now), MIN));
    }

    #[test]
    fn while_a_probe_looks_an_empty_claim_sets_no_poll_and_a_claim_with_jobs_polls_as_ever() {
        let now = Instant::now();
        let mut p = Pacer::new(MIN, MAX, now);
        p.claim_started();
        p.claimed(0, 10, Duration::ZERO, now, true);
        assert!(wait(&p, now) >= NO_POLL, "no poll: the probe stands in");
        // The probe found a job.
        p.woken();
        assert!(p.wants_claim());
        p.claim_started();
        p.claimed(3, 10, Duration::ZERO, now, true);
        assert_eq!(wait(&p, now), MIN, "a short claim polls again soon");
        // Without a probe the empty claims back off as ever, from the shortest interval.
        p.claimed(0, 10, Duration::ZERO, now, false);
        assert!(within(wait(&p, now), MIN));
    }

    #[test]
    fn a_wake_up_claims_at_once_and_polls_from_the_shortest_interval_again() {
        let now = Instant::now();
        let mut p = Pacer::new(MIN, MAX, now);
        for _ in 0..6 {
            p.claim_started();
            p.claimed(0, 10, Duration::ZERO, now, false);
        }
        p.woken();
        assert!(p.wants_claim());
        p.claim_started();
        p.claimed(0, 10, Duration::ZERO, now, false);
        assert!(within(wait(&p, now), MIN));
    }

    #[test]
    fn after_a_full_claim_freed_slots_are_refilled_together() {
        let now = Instant::now();
        let mut p = Pacer::new(MIN, MAX, now);
        p.claim_started();
        p.claimed(4, 4, Duration::from_millis(7), now, false);
        // The first job to finish sets the refill one claim's duration later; later ones
        // wait for the same refill.
        p.job_finished(false, now);
        assert!(!p.wants_claim());
        assert_eq!(p.refill_at(), Some(now + Duration::from_millis(7)));
        p.job_finished(false, now + Duration::from_millis(3));
        assert_eq!(p.refill_at(), Some(now + Duration::from_millis(7)));
        p.refill_due();
        assert!(p.wants_claim());
        assert_eq!(p.refill_at(), None);
        // The last job finishing refills at once.
        p.claim_started();
        p.claimed(4, 4, Duration::from_secs(1), now, false);
        p.job_finished(true, now);
        assert!(p.wants_claim());
    }

    #[test]
    fn a_claim_duration_counts_at_most_the_shortest_poll_interval() {
        let now = Instant::now();
        let mut p = Pacer::new(MIN, MAX, now);
        p.claim_started();
        p.claimed(2, 2, Duration::from_secs(3), now, false);
        p.job_finished(false, now);
        assert_eq!(p.refill_at(), Some(now + MIN));
    }

    #[test]
    fn after_a_partial_claim_a_finished_job_waits_for_the_poll() {
        let now = Instant::now();
        let mut p = Pacer::new(MIN, MAX, now);
        p.claim_started();
        p.claimed(2, 4, Duration::ZERO, now, false);
        p.job_finished(false, now);
        p.job_finished(true, now);
        assert!(!p.wants_claim());
        assert_eq!(p.refill_at(), None);
        assert_eq!(wait(&p, now), MIN);
    }

    #[test]
    fn failed_claims_back_off_to_ten_seconds_and_recovery_is_reported_once() {
        let now = Instant::now();
        let mut p = Pacer::new(MIN, MAX, now);
        let waits: Vec<Duration> = (0..10)
            .map(|_| p.claim_failed(Duration::ZERO, now))
            .collect();
        assert_eq!(waits[0], Duration::from_millis(100));
        assert_eq!(waits[1], Duration::from_millis(200));
        assert_eq!(waits[9], Duration::from_secs(10));
        assert!(within(wait(&p, now), Duration::from_secs(10)));
        assert!(
            p.claimed(0, 10, Duration::ZERO, now, false),
            "the outage ends"
        );
        assert!(
            !p.claimed(0, 10, Duration::ZERO, now, false),
            "and is reported once"
        );
        assert_eq!(
            p.claim_failed(Duration::ZERO, now),
            Duration::from_millis(100)
        );
    }
}
