//! The lease thread: an OS thread of the worker's own, with a runtime and two connections,
//! that renews leases and writes outcomes whatever the jobs do to their threads.

use std::sync::Arc;

use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use super::lease::{self, Leases};
use super::outcome::Report;
use super::writer::{write_outcomes, WRITE_TIMEOUT};
use crate::error::{Error, Result};
use crate::metrics::Metrics;
use crate::store::{LeaseConnect, Store};

/// What the lease thread needs: it renews the worker's leases and writes the outcomes of its
/// jobs, on an OS thread of its own with a single-threaded runtime and a pool of two
/// connections of its own. Job code that blocks its thread or hogs the CPU, or uses up the
/// queue's pool, cannot delay a renewal there.
pub(super) struct LeaseThread {
    pub(super) connect: LeaseConnect,
    pub(super) owner: String,
    pub(super) leases: Leases,
    pub(super) metrics: Arc<Metrics>,
    pub(super) stop: CancellationToken,
    pub(super) reports: mpsc::Receiver<Report>,
    /// Told when outcomes are written, for the process's [`Queue::wait`](crate::Queue::wait).
    pub(super) queue: crate::queue::Queue,
}

/// A running lease thread.
pub(super) struct LeaseThreadHandle {
    /// Resolves when every report has been written (the senders are gone).
    pub(super) writer_done: tokio::sync::oneshot::Receiver<()>,
    /// Resolves when the thread has stopped (after `stop`) and closed its connections.
    pub(super) finished: tokio::sync::oneshot::Receiver<()>,
}

impl LeaseThread {
    pub(super) fn spawn(self) -> Result<LeaseThreadHandle> {
        let cannot = Error::WorkerStart;
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(cannot)?;
        let (writer_tx, writer_done) = tokio::sync::oneshot::channel();
        let (finished_tx, finished) = tokio::sync::oneshot::channel();
        // Events of the thread go where the caller's go.
        let dispatch = tracing::dispatcher::get_default(|d| d.clone());
        std::thread::Builder::new()
            .name("jobqueue-lease".into())
            .spawn(move || {
                let _log = tracing::dispatcher::set_default(&dispatch);
                runtime.block_on(self.run(writer_tx));
                drop(runtime);
                let _ = finished_tx.send(());
            })
            .map_err(cannot)?;
        Ok(LeaseThreadHandle {
            writer_done,
            finished,
        })
    }

    async fn run(self, writer_done: tokio::sync::oneshot::Sender<()>) {
        let store = Store::lease_store(self.connect, self.metrics.clone());
        let renewer = tokio::spawn(lease::renew_loop(
            store.clone(),
            self.owner.clone(),
            self.leases.clone(),
            self.metrics.clone(),
            self.stop.clone(),
        ));
        write_outcomes(
            store.bounded(WRITE_TIMEOUT),
            self.owner,
            self.leases,
            self.metrics,
            self.reports,
            self.queue,
        )
        .await;
        let _ = writer_done.send(());
        let _ = renewer.await;
        // Closing waits for nothing that can hang: every call is bounded, and a connection
        // given up on is closed at once.
        store.close().await;
    }
}
