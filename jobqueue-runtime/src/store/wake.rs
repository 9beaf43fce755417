//! What tells an idle worker that work may be there, by database: on MySQL/MariaDB the idle
//! probe (a one-entry read of the claim index on a probe connection, in the worker's turn of
//! its group's rotation: see `store/claim.rs` and `store/connect.rs`); on PostgreSQL a
//! listener on the notifications the schema's triggers send (`store/postgres/wake.rs`).

pub use super::postgres::wake::Listening;
use super::{Db, Store};

/// How an idle worker learns that a served queue may have a ready job.
#[derive(Debug)]
#[non_exhaustive]
pub enum WakeSource {
    /// MySQL/MariaDB: the worker probes for ready jobs itself, every `idle_probe` interval
    /// in its turn (`Store::probe_conn`, `Store::probe_on`).
    Probe,
    /// PostgreSQL: notifications wake the worker; it claims on a rare timer besides.
    Listen(Listening),
}

impl WakeSource {
    /// Resolves when a notification says work may be there; never for [`WakeSource::Probe`]
    /// (the worker's own probes say it).
    pub async fn woken(&self) {
        match self {
            WakeSource::Probe => std::future::pending().await,
            WakeSource::Listen(listening) => listening.woken().await,
        }
    }

    /// The listener, on PostgreSQL.
    pub fn listener(&self) -> Option<&Listening> {
        match self {
            WakeSource::Probe => None,
            WakeSource::Listen(listening) => Some(listening),
        }
    }
}

impl Store {
    /// What wakes an idle worker serving `queues` (see [`WakeSource`]). On PostgreSQL this
    /// starts the listener (it must run on a Tokio runtime): on a connection of the pool, held
    /// for the listener's life, which counts it in the pool's size (with the default 2, a
    /// worker process holds 4 connections: the listener, one for claims, enqueues,
    /// maintenance and the heartbeat, and the lease store's two); or, when `app_pool` (a
    /// pool of the application's, which the listener should not hold) or the pool has a
    /// single connection (which the listener would take from everyone else), on a connection
    /// of its own outside the pool.
    pub fn wake_source(&self, queues: &[String], app_pool: bool) -> WakeSource {
        match &self.db {
            Db::MySql { .. } => WakeSource::Probe,
            Db::Postgres { pool, .. } => {
                let own = app_pool || pool.options().get_max_connections() < 2;
                WakeSource::Listen(super::postgres::wake::listen(pool, queues, own))
            }
        }
    }
}
