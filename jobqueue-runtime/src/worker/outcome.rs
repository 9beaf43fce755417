//! What to write for an attempt that ended: the decision between done, retry, failure,
//! cancellation, hand-back and deferral. Pure, and tested without a database.

use std::time::Duration;

use crate::job::{CancelReason, JobContext};
use crate::model::{Finish, MAX_OUTPUT_BYTES};
use crate::registry::{JobDescriptor, RunError};
use crate::retry::Backoff;

/// How running the job's code ended (`execute::run_one`): what [`decide`] decides on.
pub(crate) enum Ran {
    Finished(std::result::Result<(), RunError>),
    Panicked(String),
    TimedOut(Duration),
    /// Dropped unfinished: lease lost (`hand_back` false: write nothing), or shutdown and it
    /// did not stop in time (`hand_back` true).
    Abandoned {
        hand_back: bool,
    },
    /// This worker cannot run it (unknown kind, payload that does not fit the arguments);
    /// another worker may.
    Unrunnable(String),
    /// The row itself cannot be read (payload not JSON, key not UTF-8): no worker can run it.
    Unreadable(String),
}

/// How one attempt ended, before it is written.
#[derive(Debug)]
pub(crate) enum Outcome {
    /// Succeeded; with the JSON of what it returned, unless that is `()`.
    Done {
        output: Option<String>,
    },
    Finish(Finish),
    /// The job wrote its own completion in its transaction ([`JobContext::complete_in`]):
    /// done if that transaction committed, else `otherwise` (nothing, for a run dropped
    /// because its lease was lost). `output` is the JSON of what
    /// the job returned (unless `()`), written by the writer once it sees the commit;
    /// `refused` says why a value the job returned cannot be stored (over the limit, not
    /// serializable), for the writer to log if the job is done without it.
    DoneInTransaction {
        otherwise: Option<Finish>,
        output: Option<String>,
        refused: Option<String>,
    },
}

/// Why an attempt that returned `Ok` after `complete_in` is not done.
pub(super) const NOT_COMMITTED: &str = "the job returned Ok, but the transaction in which it called `complete_in` did not commit (it was rolled back, or its commit failed), so none of its writes happened";

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
pub(crate) fn decide(
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
            Finish::Cancelled { error }
        } else if ctx.attempt < ctx.max_attempts {
            Finish::Retry {
                delay: backoff.delay(ctx.attempt),
                error,
            }
        } else {
            Finish::Fail {
                error: format!("{error} (attempt {} of {})", ctx.attempt, ctx.max_attempts),
            }
        }
    };
    let kind = descriptor.map(|d| d.kind()).unwrap_or(ctx.kind.as_str());
    let returned_ok = matches!(ran, Ran::Finished(Ok(())));
    let outcome = match ran {
        Ran::Finished(Ok(())) => match ctx.output() {
            None => Outcome::Done { output: None },
            Some(Ok(json)) if json.len() <= MAX_OUTPUT_BYTES => Outcome::Done { output: Some(json) },
            Some(Ok(json)) => Outcome::Finish(Finish::Fail {
                error: format!(
                    "the output of job `{kind}` is {} bytes of JSON, over the limit of {MAX_OUTPUT_BYTES} bytes; \
                     store large results elsewhere (a table, a file) and return a reference to them (not retried)",
                    json.len()
                ),
            }),
            Some(Err(e)) => Outcome::Finish(Finish::Fail {
                error: format!("cannot serialize the output of job `{kind}` as JSON: {e} (not retried)"),
            }),
        },
        Ran::Unreadable(msg) | Ran::Finished(Err(RunError::Payload(msg))) => {
            Outcome::Finish(Finish::Fail { error: msg })
        }
        Ran::Unrunnable(error) => Outcome::Finish(Finish::Defer {
            delay: unrunnable_delay(ctx.attempt),
            error,
            give_up_after,
        }),
        Ran::Finished(Err(RunError::Job(e))) if e.is_cancel() => Outcome::Finish(Finish::Cancelled {
            error: format!("cancelled by the job: {e}"),
        }),
        // A snooze is the job's own choice, honoured at shutdown too; an operator's cancel
        // still wins.
        Ran::Finished(Err(RunError::Job(e)))
            if reason != Some(CancelReason::Requested) && e.snoozed_for().is_some() =>
        {
            let delay = e.snoozed_for().unwrap_or_default();
            let max_snoozes = descriptor
                .map(|d| d.options().max_snoozes)
                .unwrap_or(crate::job::JobOptions::DEFAULT.max_snoozes);
            Outcome::Finish(Finish::Snooze {
                delay,
                max_snoozes,
                exhausted: format!(
                    "job `{kind}` snoozed {max_snoozes} times, the most its kind allows; \
                     raise the bound with `#[job(max_snoozes = ...)]`, or return an error instead of snoozing"
                ),
            })
        }
        Ran::Finished(Err(RunError::Job(e))) => {
            if reason == Some(CancelReason::Shutdown) {
                Outcome::Finish(Finish::HandBack)
            } else if !e.is_retryable() && reason != Some(CancelReason::Requested) {
                Outcome::Finish(Finish::Fail {
                    error: format!("{e} (permanent error, not retried)"),
                })
            } else {
                Outcome::Finish(failed_attempt(e.to_string()))
            }
        }
        Ran::Panicked(msg) => Outcome::Finish(failed_attempt(format!("job panicked: {msg}"))),
        Ran::TimedOut(t) => Outcome::Finish(failed_attempt(format!("timed out after {t:?}"))),
        Ran::Abandoned { hand_back: true } => Outcome::Finish(Finish::HandBack),
        // Lease lost: nothing of the attempt is written, unless the job's own transaction
        // committed its completion before the run was dropped. The writer reads whether it
        // did, so that the job is recorded done and its key's next job woken either way.
        Ran::Abandoned { hand_back: false } if ctx.completion_tried() => {
            return Some(Outcome::DoneInTransaction {
                otherwise: None,
                output: None,
                refused: None,
            })
        }
        Ran::Abandoned { hand_back: false } => return None,
    };
    if !ctx.completion_tried() {
        return Some(outcome);
    }
    // The job's completion may have committed with its transaction: the writer reads which,
    // and writes this only if it did not.
    // An output over the limit (or one that cannot be serialized) cannot be stored: if the
    // completion committed, the job is done without it, and the writer says why.
    Some(match outcome {
        Outcome::Done { output } => Outcome::DoneInTransaction {
            otherwise: Some(failed_attempt(NOT_COMMITTED.into())),
            output,
            refused: None,
        },
        already @ Outcome::DoneInTransaction { .. } => already,
        Outcome::Finish(how) => {
            let refused = match &how {
                Finish::Fail { error } if returned_ok => Some(error.clone()),
                _ => None,
            };
            Outcome::DoneInTransaction {
                otherwise: Some(how),
                output: None,
                refused,
            }
        }
    })
}

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
            claim: None,
            progress: Default::default(),
            output: Default::default(),
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
    fn a_job_that_completed_itself_is_done_only_if_its_transaction_committed() {
        use crate::error::JobError;
        use crate::job::ClaimFence;
        let tried = |attempt: u32, reason: Option<CancelReason>| {
            let mut c = ctx(attempt, 3);
            let claim = std::sync::Arc::new(ClaimFence::new("worker-a", false));
            claim.completion_tried();
            c.claim = Some(claim);
            if let Some(r) = reason {
                c.cancel(r);
            }
            c
        };
        let otherwise = |ran: Ran, c: &JobContext| match decide(ran, c, None, DAY) {
            Some(Outcome::DoneInTransaction {
                otherwise: Some(otherwise),
                ..
            }) => otherwise,
            other => panic!("not left to the transaction: {other:?}"),
        };
        // Ok, but not committed: a failed attempt, retried, failed on the last one, or
        // cancelled when an operator asked.
        assert!(matches!(
            otherwise(Ran::Finished(Ok(())), &tried(1, None)),
            Finish::Retry { error, .. } if error == NOT_COMMITTED
        ));
        assert!(matches!(
            otherwise(Ran::Finished(Ok(())), &tried(3, None)),
            Finish::Fail { error } if error.starts_with(NOT_COMMITTED) && error.ends_with("(attempt 3 of 3)")
        ));
        assert!(matches!(
            otherwise(Ran::Finished(Ok(())), &tried(1, Some(CancelReason::Requested))),
            Finish::Cancelled { error } if error == NOT_COMMITTED
        ));
        // An error: what the error alone would have written.
        let failed = Ran::Finished(Err(RunError::Job(JobError::permanent("refused"))));
        assert!(matches!(
            otherwise(failed, &tried(1, None)),
            Finish::Fail { error } if error == "refused (permanent error, not retried)"
        ));
        // A job that never called it is done as ever; a lost lease writes nothing, but a
        // run dropped after calling it is looked up, in case its transaction committed.
        assert!(matches!(
            decide(Ran::Finished(Ok(())), &ctx(1, 3), None, DAY),
            Some(Outcome::Done { output: None })
        ));
        assert!(decide(Ran::Abandoned { hand_back: false }, &ctx(1, 3), None, DAY).is_none());
        assert!(matches!(
            decide(
                Ran::Abandoned { hand_back: false },
                &tried(1, Some(CancelReason::LeaseLost)),
                None,
                DAY
            ),
            Some(Outcome::DoneInTransaction {
                otherwise: None,
                output: None,
                ..
            })
        ));
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
            Output(String),
            Snooze(Duration),
        }
        fn write(o: Option<Outcome>) -> W {
            match o {
                None => W::Nothing,
                Some(Outcome::Done { output: None }) => W::Done,
                Some(Outcome::Done { output: Some(json) }) => W::Output(json),
                Some(Outcome::Finish(Finish::Retry { error, delay })) => {
                    assert!(delay > Duration::ZERO);
                    W::Retry(error)
                }
                Some(Outcome::Finish(Finish::Fail { error })) => W::Fail(error),
                Some(Outcome::Finish(Finish::Cancelled { error })) => W::Cancelled(error),
                Some(Outcome::Finish(Finish::HandBack)) => W::HandBack,
                Some(Outcome::Finish(Finish::Defer { .. })) => W::Defer,
                Some(Outcome::DoneInTransaction { .. }) => unreachable!("no `complete_in` here"),
                Some(Outcome::Finish(Finish::Snooze {
                    delay,
                    max_snoozes,
                    exhausted,
                })) => {
                    assert_eq!(max_snoozes, 100);
                    assert!(exhausted.contains("snoozed 100 times"), "{exhausted}");
                    W::Snooze(delay)
                }
            }
        }
        let retryable = || Ran::Finished(Err(RunError::Job(JobError::retryable("boom"))));
        let snooze = || Ran::Finished(Err(RunError::Job(JobError::snooze(Duration::from_secs(5)))));
        let cancel = || Ran::Finished(Err(RunError::Job(JobError::cancel("order withdrawn"))));
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
            // A snooze spends no attempt, on the last one too, and at shutdown.
            (case(snooze(), 3, None), W::Snooze(Duration::from_secs(5))),
            (
                case(snooze(), 1, Some(Shutdown)),
                W::Snooze(Duration::from_secs(5)),
            ),
            (
                case(snooze(), 1, Some(Requested)),
                W::Cancelled("snoozed for 5s".into()),
            ),
            // A cancel from inside ends the job, whatever attempts remain.
            (
                case(cancel(), 1, None),
                W::Cancelled("cancelled by the job: order withdrawn".into()),
            ),
            (
                case(cancel(), 1, Some(Shutdown)),
                W::Cancelled("cancelled by the job: order withdrawn".into()),
            ),
        ];
        for (i, (got, want)) in table.into_iter().enumerate() {
            assert_eq!(got, want, "row {i}");
        }
    }

    #[test]
    fn an_output_is_kept_within_its_limit_and_fails_the_job_beyond_it() {
        let c = ctx(1, 3);
        c.set_output(&vec![1, 2, 3]);
        assert!(matches!(
            decide(Ran::Finished(Ok(())), &c, None, DAY),
            Some(Outcome::Done { output: Some(json) }) if json == "[1,2,3]"
        ));
        // `()` stores nothing.
        let c = ctx(1, 3);
        c.set_output(&());
        assert!(matches!(
            decide(Ran::Finished(Ok(())), &c, None, DAY),
            Some(Outcome::Done { output: None })
        ));
        let c = ctx(1, 3);
        c.set_output(&"x".repeat(MAX_OUTPUT_BYTES));
        let Some(Outcome::Finish(Finish::Fail { error })) =
            decide(Ran::Finished(Ok(())), &c, None, DAY)
        else {
            panic!("an oversized output must fail the job");
        };
        assert_eq!(
            error,
            "the output of job `k` is 65538 bytes of JSON, over the limit of 65536 bytes; \
             store large results elsewhere (a table, a file) and return a reference to them (not retried)"
        );
    }

    #[test]
    fn a_job_that_completed_itself_keeps_its_output_for_the_writer() {
        use crate::job::ClaimFence;
        let tried = || {
            let mut c = ctx(1, 3);
            let claim = std::sync::Arc::new(ClaimFence::new("worker-a", false));
            claim.completion_tried();
            c.claim = Some(claim);
            c
        };
        let c = tried();
        c.set_output(&42);
        assert!(matches!(
            decide(Ran::Finished(Ok(())), &c, None, DAY),
            Some(Outcome::DoneInTransaction { output: Some(json), refused: None, .. }) if json == "42"
        ));
        // Over the limit: not kept, and the reason goes with it.
        let c = tried();
        c.set_output(&"x".repeat(MAX_OUTPUT_BYTES));
        assert!(matches!(
            decide(Ran::Finished(Ok(())), &c, None, DAY),
            Some(Outcome::DoneInTransaction { output: None, refused: Some(why), .. })
                if why.contains("over the limit of 65536 bytes")
        ));
    }
}
