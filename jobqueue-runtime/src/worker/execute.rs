//! Running one job: its code under its timeout, the shutdown's second phase and the loss
//! of its lease, with panics caught, down to how the run ended ([`Ran`]).

use std::panic::AssertUnwindSafe;
use std::time::{Duration, Instant};

use futures_util::FutureExt;
use tokio_util::sync::CancellationToken;

use crate::job::{CancelReason, JobContext};
use crate::registry::{JobDescriptor, Registry, RunError};

/// How running the job's code ended.
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

pub(crate) async fn run_one(
    kind: String,
    descriptor: Option<&'static JobDescriptor>,
    payload: std::result::Result<serde_json::Value, String>,
    ctx: JobContext,
    cancel_grace: Duration,
    shutdown: CancellationToken,
    registry: &Registry,
) -> Ran {
    let Some(d) = descriptor else {
        let known = registry
            .kinds()
            .iter()
            .map(|d| d.kind())
            .collect::<Vec<_>>()
            .join(", ");
        let known = if known.is_empty() {
            "it knows no kinds".to_owned()
        } else {
            format!("it knows: {known}")
        };
        return Ran::Unrunnable(format!(
            "job kind `{kind}` is not registered in this worker ({known}); deploy a worker that has it, or cancel the job"
        ));
    };
    let payload = match payload {
        Ok(p) => p,
        Err(e) => return Ran::Unreadable(e),
    };
    tracing::debug!("job started");
    let started = Instant::now();
    let timeout = d.options().timeout;
    // Boxed already (`RunFuture`), so it can be dropped below, where a panicking destructor
    // is caught too. Every step checks the lease's stop-by moment first (see `Fenced`).
    let mut run = Fenced {
        run: AssertUnwindSafe(d.run(payload, ctx.clone())).catch_unwind(),
        ctx: &ctx,
    };
    let deadline = async {
        match timeout {
            Some(t) => tokio::time::sleep(t).await,
            None => std::future::pending().await,
        }
    };
    let mut deadline = std::pin::pin!(deadline);
    let ran = tokio::select! {
        r = &mut run => fenced(r),
        _ = &mut deadline => {
            ctx.cancel(CancelReason::Timeout);
            Ran::TimedOut(timeout.unwrap_or_default())
        }
        // Phase two of a shutdown (whatever the job was told before, an operator's cancel
        // included): it may stop by itself, and is dropped after `cancel_grace`.
        _ = shutdown.cancelled() => tokio::select! {
            r = &mut run => fenced(r),
            _ = tokio::time::sleep(cancel_grace) => Ran::Abandoned { hand_back: true },
            _ = ctx.lease_lost() => Ran::Abandoned { hand_back: false },
        },
        // Lease lost: another worker may run it now; stop at once, even if the job was told
        // of an operator's cancel or a shutdown before and is still deciding how to stop.
        // (An operator's cancel alone only tells the job.)
        _ = ctx.lease_lost() => Ran::Abandoned { hand_back: false },
    };
    // An unfinished job (timed out, abandoned) is dropped here: its destructors run now,
    // outside the polls above, and one that panics must not take the outcome with it.
    if let Err(panic) = std::panic::catch_unwind(AssertUnwindSafe(move || drop(run))) {
        tracing::error!(panic = %panic_message(&*panic), "the job panicked while being dropped");
    }
    metrics::histogram!(crate::metrics::JOB_DURATION, "queue" => ctx.queue.clone(), "kind" => d.kind())
        .record(started.elapsed().as_secs_f64());
    ran
}

/// The job's future, polled only while the attempt's lease may still be held: a poll past the
/// moment by which the worker must have stopped the run (three quarters of the lease after
/// the last renewal sent) ends it as a lost lease without polling the job. The lease thread
/// stops such runs as well, but after a freeze of the whole process (SIGSTOP, a stalled VM)
/// the job's task can wake first, and one more step of the job (a write of its own) would
/// run outside its claim.
struct Fenced<'a, F> {
    run: F,
    ctx: &'a JobContext,
}

impl<F: std::future::Future + Unpin> std::future::Future for Fenced<'_, F> {
    type Output = Option<F::Output>;

    fn poll(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Self::Output> {
        if self.ctx.past_stop_by() {
            self.ctx.cancel(CancelReason::LeaseLost);
            return std::task::Poll::Ready(None);
        }
        std::pin::Pin::new(&mut self.run).poll(cx).map(Some)
    }
}

/// What a run that `Fenced` let end, or stopped, came to.
fn fenced(
    r: Option<
        std::result::Result<std::result::Result<(), RunError>, Box<dyn std::any::Any + Send>>,
    >,
) -> Ran {
    match r {
        Some(r) => finished(r),
        None => Ran::Abandoned { hand_back: false },
    }
}

fn finished(
    r: std::result::Result<std::result::Result<(), RunError>, Box<dyn std::any::Any + Send>>,
) -> Ran {
    match r {
        Ok(Err(RunError::Payload(msg))) => Ran::Unrunnable(msg),
        Ok(r) => Ran::Finished(r),
        Err(panic) => Ran::Panicked(panic_message(&*panic)),
    }
}

pub(super) fn panic_message(panic: &(dyn std::any::Any + Send)) -> String {
    panic
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| panic.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "a non-string panic payload".into())
}
