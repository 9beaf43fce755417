//! What to write for an attempt that ended: the decision between done, retry, failure,
//! cancellation, hand-back and deferral. Pure, and tested without a database.

use std::time::Duration;

use super::execute::Ran;
use crate::job::{CancelReason, JobContext};
use crate::model::Finish;
use crate::registry::{JobDescriptor, RunError};
use crate::retry::Backoff;

/// How one attempt ended, before it is written.
#[derive(Debug)]
pub(super) enum Outcome {
    Done,
    Finish(Finish),
}

pub(super) struct Report {
    pub(super) id: u64,
    pub(super) attempt: u32,
    pub(super) kind: String,
    pub(super) queue: String,
    /// Whether the claim holds a concurrency slot (see [`crate::model::Claimed::holds_slot`]).
    pub(super) holds_slot: bool,
    pub(super) outcome: Outcome,
}

/// The wait before another worker may try a job this one cannot run, by claim number:
/// 1 s, 2 s, 4 s... at most 5 minutes, ±20 %.
pub(super) fn unrunnable_delay(attempt: u32) -> Duration {
    const BACKOFF: Backoff = Backoff::Exponential {
        base: Duration::from_secs(1),
        max: Duration::from_secs(300),
    };
    BACKOFF.delay(attempt)
}

/// What to write for an attempt that ended as `ran`. `None`: write nothing (lease lost).
/// `give_up_after`: how long a job no worker can run may wait for one.
pub(super) fn decide(
    ran: Ran,
    ctx: &JobContext,
    descriptor: Option<&JobDescriptor>,
    give_up_after: Duration,
) -> Option<Outcome> {
    let backoff = descriptor
        .map(|d| d.options().backoff)
        .unwrap_or(Backoff::DEFAULT);
    let reason = ctx.cancel_reason();
    let failed_attempt = |error: String| {
        if reason == Some(CancelReason::Requested) {
            Outcome::Finish(Finish::Cancelled { error })
        } else if ctx.attempt < ctx.max_attempts {
            Outcome::Finish(Finish::Retry {
                delay: backoff.delay(ctx.attempt),
                error,
            })
        } else {
            Outcome::Finish(Finish::Fail {
                error: format!("{error} (attempt {} of {})", ctx.attempt, ctx.max_attempts),
            })
        }
    };
    Some(match ran {
        Ran::Finished(Ok(())) => Outcome::Done,
        Ran::Unreadable(msg) | Ran::Finished(Err(RunError::Payload(msg))) => {
            Outcome::Finish(Finish::Fail { error: msg })
        }
        Ran::Unrunnable(error) => Outcome::Finish(Finish::Defer {
            delay: unrunnable_delay(ctx.attempt),
            error,
            give_up_after,
        }),
        Ran::Finished(Err(RunError::Job(e))) => {
            if reason == Some(CancelReason::Shutdown) {
                Outcome::Finish(Finish::HandBack)
            } else if !e.is_retryable() && reason != Some(CancelReason::Requested) {
                Outcome::Finish(Finish::Fail {
                    error: format!("{e} (permanent error, not retried)"),
                })
            } else {
                failed_attempt(e.to_string())
            }
        }
        Ran::Panicked(msg) => failed_attempt(format!("job panicked: {msg}")),
        Ran::TimedOut(t) => failed_attempt(format!("timed out after {t:?}")),
        Ran::Abandoned { hand_back: true } => Outcome::Finish(Finish::HandBack),
        Ran::Abandoned { hand_back: false } => return None,
    })
}

#[cfg(test)]
#[cfg(test)]
mod tests {
    use super::*;
    use tokio_util::sync::CancellationToken;

    fn ctx(attempt: u32, max_attempts: u32) -> JobContext {
        JobContext {
            id: 1,
            attempt,
            max_attempts,
            kind: "k".into(),
            queue: "default".into(),
            task_key: "k:1".into(),
            token: CancellationToken::new(),
            reason: Default::default(),
            data: Default::default(),
        }
    }

    const DAY: Duration = Duration::from_secs(24 * 3600);

    #[test]
    fn a_job_this_worker_cannot_run_is_deferred_even_on_its_last_attempt() {
        let c = ctx(1, 1);
        let Some(Outcome::Finish(Finish::Defer {
            delay,
            error,
            give_up_after,
        })) = decide(Ran::Unrunnable("no such kind".into()), &c, None, DAY)
        else {
            panic!("not deferred");
        };
        assert!(delay >= Duration::from_millis(800) && delay <= Duration::from_millis(1200));
        assert_eq!((error.as_str(), give_up_after), ("no such kind", DAY));
        // The wait grows with each claim, up to five minutes.
        assert!(unrunnable_delay(3) >= Duration::from_millis(3200));
        assert!(unrunnable_delay(30) <= Duration::from_secs(360));
    }

    #[test]
    fn a_row_that_cannot_be_read_fails_at_once() {
        let outcome = decide(Ran::Unreadable("not JSON".into()), &ctx(1, 25), None, DAY);
        assert!(
            matches!(&outcome, Some(Outcome::Finish(Finish::Fail { error })) if error == "not JSON"),
            "{outcome:?}"
        );
    }

    /// What `decide` writes for each way a run can end, on a middle and on the last attempt,
    /// and with each reason the job may have been cancelled for.
    #[test]
    fn the_decision_table() {
        use crate::error::JobError;
        use crate::registry::RunError;

        #[derive(Debug, PartialEq)]
        enum W {
            Done,
            Retry(String),
            Fail(String),
            Cancelled(String),
            HandBack,
            Defer,
            Nothing,
        }
        fn write(o: Option<Outcome>) -> W {
            match o {
                None => W::Nothing,
                Some(Outcome::Done) => W::Done,
                Some(Outcome::Finish(Finish::Retry { error, delay })) => {
                    assert!(delay > Duration::ZERO);
                    W::Retry(error)
                }
                Some(Outcome::Finish(Finish::Fail { error })) => W::Fail(error),
                Some(Outcome::Finish(Finish::Cancelled { error })) => W::Cancelled(error),
                Some(Outcome::Finish(Finish::HandBack)) => W::HandBack,
                Some(Outcome::Finish(Finish::Defer { .. })) => W::Defer,
            }
        }
        let retryable = || Ran::Finished(Err(RunError::Job(JobError::retryable("boom"))));
        let permanent = || Ran::Finished(Err(RunError::Job(JobError::permanent("bad input"))));
        let case = |ran: Ran, attempt: u32, reason: Option<CancelReason>| {
            let c = ctx(attempt, 3);
            if let Some(r) = reason {
                c.cancel(r);
            }
            write(decide(ran, &c, None, DAY))
        };
        use CancelReason::{LeaseLost, Requested, Shutdown};
        let table = [
            (case(Ran::Finished(Ok(())), 1, None), W::Done),
            (case(Ran::Finished(Ok(())), 3, Some(Requested)), W::Done),
            (case(retryable(), 1, None), W::Retry("boom".into())),
            (
                case(retryable(), 3, None),
                W::Fail("boom (attempt 3 of 3)".into()),
            ),
            (
                case(retryable(), 1, Some(Requested)),
                W::Cancelled("boom".into()),
            ),
            (case(retryable(), 1, Some(Shutdown)), W::HandBack),
            (case(retryable(), 3, Some(Shutdown)), W::HandBack),
            (
                case(permanent(), 1, None),
                W::Fail("bad input (permanent error, not retried)".into()),
            ),
            (
                case(permanent(), 1, Some(Requested)),
                W::Cancelled("bad input".into()),
            ),
            (case(permanent(), 1, Some(Shutdown)), W::HandBack),
            (
                case(Ran::Panicked("oops".into()), 1, None),
                W::Retry("job panicked: oops".into()),
            ),
            (
                case(Ran::Panicked("oops".into()), 3, None),
                W::Fail("job panicked: oops (attempt 3 of 3)".into()),
            ),
            (
                case(Ran::TimedOut(Duration::from_secs(2)), 2, None),
                W::Retry("timed out after 2s".into()),
            ),
            (
                case(Ran::TimedOut(Duration::from_secs(2)), 2, Some(Requested)),
                W::Cancelled("timed out after 2s".into()),
            ),
            (
                case(Ran::Abandoned { hand_back: true }, 3, Some(Shutdown)),
                W::HandBack,
            ),
            (
                case(Ran::Abandoned { hand_back: false }, 1, Some(LeaseLost)),
                W::Nothing,
            ),
            (
                case(
                    Ran::Finished(Err(RunError::Payload("no field `x`".into()))),
                    1,
                    None,
                ),
                W::Fail("no field `x`".into()),
            ),
            (
                case(Ran::Unrunnable("unknown kind".into()), 3, None),
                W::Defer,
            ),
            (
                case(Ran::Unreadable("not JSON".into()), 1, None),
                W::Fail("not JSON".into()),
            ),
        ];
        for (i, (got, want)) in table.into_iter().enumerate() {
            assert_eq!(got, want, "row {i}");
        }
    }
}
