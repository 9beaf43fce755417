//! An idle worker's wake-ups on PostgreSQL: `LISTEN job_queue_ready` instead of MySQL's idle
//! probe. The schema's triggers (migration `20261203000002_ready_notify`) notify that channel
//! with a job's queue whenever a job becomes ready, whoever made it ready (an enqueue,
//! promotion, a retry, a release from `blocked`, a hand-back, a plain `INSERT` of an SQL
//! producer) and whenever a paused queue is resumed. So an idle worker sends nothing while it
//! waits: a notification for one of its queues wakes it, and it claims.
//!
//! Notifications are not kept for a session that is not listening: one sent while the
//! listener reconnects is lost. The listener therefore wakes the worker once after each
//! (re)connection (its claim finds what was missed), and the worker still claims on a rare
//! timer (`WorkerBuilder::listen_fallback`); while the listener cannot connect, the worker
//! polls with claims as it does without an idle probe.
//!
//! The listener reads its connection on a task of its own, busy or idle: a session that
//! stops reading its notifications holds back PostgreSQL's notification queue for every
//! session of the server.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::time::Duration;

use sqlx::postgres::{PgListener, PgPool, PgPoolOptions};
use tokio::sync::Notify;

/// The channel the schema's triggers notify, with the queue's name as the payload.
pub const READY_CHANNEL: &str = "job_queue_ready";

/// The first wait before the listener tries to connect again after a failure; it doubles
/// up to [`MAX_RETRY_DELAY`].
const FIRST_RETRY_DELAY: Duration = Duration::from_millis(500);

/// The longest wait between two attempts to connect the listener.
const MAX_RETRY_DELAY: Duration = Duration::from_secs(10);

/// What the listener's task tells the worker.
#[derive(Debug, Default)]
struct Shared {
    /// Work may be there: a notification for a served queue, or a (re)connection.
    woken: Notify,
    /// The listener is connected and listening.
    up: AtomicBool,
    /// Notifications received, for any queue.
    seen: AtomicU64,
    /// Wake-ups given: notifications for a served queue, and (re)connections.
    wakes: AtomicU64,
}

impl Shared {
    fn wake(&self) {
        self.wakes.fetch_add(1, Relaxed);
        self.woken.notify_one();
    }
}

/// A listener on [`READY_CHANNEL`] for some queues, read by a task of its own; dropping it
/// ends the task, and the listener's connection `UNLISTEN`s and goes back to its pool.
#[derive(Debug)]
pub struct Listening {
    shared: Arc<Shared>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Listening {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Listening {
    /// Resolves when work may be there for a served queue: a job of one became ready or a
    /// queue was resumed, or the listener (re)connected and may have missed notifications. A
    /// wake-up given while nobody waited is kept (one, however many came): the next call
    /// resolves at once.
    pub async fn woken(&self) {
        self.shared.woken.notified().await
    }

    /// Whether the listener is connected and listening now.
    pub fn is_up(&self) -> bool {
        self.shared.up.load(Relaxed)
    }

    /// Notifications received so far on the channel, for any queue.
    pub fn notifications_seen(&self) -> u64 {
        self.shared.seen.load(Relaxed)
    }

    /// Wake-ups given so far: notifications for a served queue, and (re)connections.
    pub fn wakes(&self) -> u64 {
        self.shared.wakes.load(Relaxed)
    }
}

/// Starts listening for ready jobs of `queues`. With `own_connection`, on a connection of
/// its own outside `pool` (opened with its options); otherwise on one of `pool`'s, held for
/// as long as the listener lives.
pub(crate) fn listen(pool: &PgPool, queues: &[String], own_connection: bool) -> Listening {
    let pool = if own_connection {
        PgPoolOptions::new()
            .max_connections(1)
            .acquire_timeout(pool.options().get_acquire_timeout())
            // Held for the worker's life: no lifetime or idle bound to enforce.
            .max_lifetime(None)
            .idle_timeout(None)
            .connect_lazy_with((*pool.connect_options()).clone())
    } else {
        pool.clone()
    };
    let shared = Arc::new(Shared::default());
    let task = tokio::spawn(run(pool, queues.to_vec(), own_connection, shared.clone()));
    Listening { shared, task }
}

/// The listener's task: connect and `LISTEN`, wake the worker (anything made ready before is
/// found by the claim that follows), then read notifications until the connection fails;
/// start over after a backoff.
async fn run(pool: PgPool, queues: Vec<String>, own_pool: bool, shared: Arc<Shared>) {
    let mut delay = FIRST_RETRY_DELAY;
    let mut failing = false;
    loop {
        if pool.is_closed() {
            shared.up.store(false, Relaxed);
            return;
        }
        let listening = async {
            let mut listener = PgListener::connect_with(&pool).await?;
            if own_pool {
                // The pool is the listener's alone: nobody else closes it.
                listener.ignore_pool_close_event(true);
            }
            listener.listen(READY_CHANNEL).await?;
            Ok::<_, sqlx::Error>(listener)
        };
        let mut listener = match listening.await {
            Ok(listener) => listener,
            Err(e) => {
                shared.up.store(false, Relaxed);
                // The worker polls with claims meanwhile.
                shared.wake();
                if !failing {
                    tracing::warn!(error = %e, retry_in = ?delay, "cannot listen for ready jobs; polling with claims until it can");
                    failing = true;
                } else {
                    tracing::debug!(error = %e, retry_in = ?delay, "cannot listen for ready jobs yet");
                }
                tokio::time::sleep(crate::retry::jitter(delay, 0.2)).await;
                delay = (delay * 2).min(MAX_RETRY_DELAY);
                continue;
            }
        };
        if std::mem::take(&mut failing) {
            tracing::info!("listening for ready jobs again");
        }
        delay = FIRST_RETRY_DELAY;
        shared.up.store(true, Relaxed);
        shared.wake();
        loop {
            match listener.try_recv().await {
                Ok(Some(notification)) => {
                    shared.seen.fetch_add(1, Relaxed);
                    if queues.iter().any(|q| q == notification.payload()) {
                        shared.wake();
                    }
                }
                // The connection was lost and a new one listens: what was sent in between
                // is lost, so look once.
                Ok(None) => {
                    tracing::debug!("the listener's connection was replaced");
                    shared.wake();
                }
                Err(e) => {
                    shared.up.store(false, Relaxed);
                    shared.wake();
                    tracing::debug!(error = %e, "the listener's connection failed");
                    // Not at once: a server that fails every connection is tried with the
                    // backoff above.
                    tokio::time::sleep(crate::retry::jitter(FIRST_RETRY_DELAY, 0.2)).await;
                    break;
                }
            }
        }
    }
}
