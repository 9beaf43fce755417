//! Writing a running job's progress: the first value at once, then at most one write per
//! interval however often the job reports, and the last value when the attempt ends.

use std::sync::Arc;
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use crate::progress::ProgressSlot;
use crate::store::Store;

/// How long one progress write may take, from asking the pool for a connection to the
/// reply: the most it can delay the attempt's outcome, twice (a write under way when the job
/// returns, then the last value).
const WRITE_TIMEOUT: Duration = Duration::from_secs(2);

/// One attempt's progress writer. Runs until `done` fires, then writes the value still
/// unwritten, if any, and returns: the caller awaits it before recording the outcome, so
/// the last value is in the row before the job leaves `running`.
pub(super) async fn write_progress(
    store: Store,
    slot: Arc<ProgressSlot>,
    claim: (u64, String, u32),
    every: Duration,
    done: CancellationToken,
) {
    // The outcome waits for this writer, which shares the queue's pool with the jobs: jobs
    // that hold every connection must not hold the outcome back for the pool's whole
    // timeout. A write that does not get through in time is given up (its connection, if
    // it had one, closed); the value is kept for the next write, and the last one is lost
    // (progress is advisory).
    let store = store.bounded(WRITE_TIMEOUT);
    loop {
        tokio::select! {
            _ = slot.changed.notified() => {}
            _ = done.cancelled() => break,
        }
        if !write(&store, &slot, &claim).await {
            return;
        }
        // Values set meanwhile wait; the notification they left ends the next select at once.
        tokio::select! {
            _ = tokio::time::sleep(every) => {}
            _ = done.cancelled() => break,
        }
    }
    write(&store, &slot, &claim).await;
}

/// Writes the unwritten value, if any. False when the claim is lost: nothing more of this
/// attempt may be written.
async fn write(
    store: &Store,
    slot: &ProgressSlot,
    (id, owner, attempt): &(u64, String, u32),
) -> bool {
    let Some(json) = slot.take_unwritten() else {
        return true;
    };
    match store.write_progress(*id, owner, *attempt, &json).await {
        Ok(held) => {
            if !held {
                tracing::debug!("progress not written: this attempt no longer holds the job");
            }
            held
        }
        Err(e) => {
            // Kept for the next write; progress is advisory, the job goes on.
            slot.unwritten(&json);
            tracing::warn!(error = %e, "could not write the job's progress; trying again with the next");
            true
        }
    }
}
