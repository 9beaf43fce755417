//! The worker heartbeat: each running worker keeps a row in `job_queue_worker` up to date,
//! so operators (the dashboard, `jobqueue workers`) see which workers are alive, what they
//! claim from and how busy they are. Its SQL is in the store (`store/workers.rs`).
//!
//! The same beat reads the roster back (the live workers, the maintenance turn, the queue
//! gauges, the server's clock), in the statement after the write, on the same connection:
//! the [`Roster`] the claim loop takes its probe slots from and maintenance its pace.

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::error::Result;
use crate::store::{DbErrorKind, RosterRead, Store, WorkerRow};

/// How often a worker writes its heartbeat (and reads the roster). The second beat comes
/// 2 s after the first, so that workers started together learn of each
/// other at once. Each beat costs the server four commands (the pool's check-out, a
/// `ROLLBACK`, the write, the read), so a fleet of N workers sends about 0.27 × N a second
/// for it: the one part of an idle fleet's statements that grows with N, kept small.
pub const HEARTBEAT_INTERVAL: Duration = Duration::from_secs(15);

/// A worker not seen for this long is shown as gone: it missed its last two heartbeats and
/// all of a third's interval (three heartbeat intervals, as before, when it was 30 s at
/// a 5 s heartbeat: one late beat on a busy host does not make a worker look gone).
pub const WORKER_GONE_AFTER: Duration = Duration::from_secs(45);

/// How long after the first beat the second comes.
const SECOND_BEAT_AFTER: Duration = Duration::from_secs(2);

/// A worker not seen for this long leaves the probe rotation and the fleet size maintenance
/// paces itself by: two heartbeats and a margin for a slow one. A worker that stops deletes
/// its row, which the others see at their next beat; one that dies leaves its slot empty
/// for at most this long plus one heartbeat of each other worker (50 s).
pub(crate) const ROSTER_LIVE: Duration = Duration::from_secs(35);

/// The workers of this worker's group (the live ones serving the same queues, in the same
/// order, with a free slot), read at each beat: each probes in its own slot of a rotation,
/// slots one `idle_probe` interval apart on the server's clock, so that the group probes
/// about as often as one worker alone would.
#[derive(Debug)]
pub(crate) struct Roster {
    owner: String,
    queues: String,
    view: Mutex<View>,
}

#[derive(Debug, Clone, Copy)]
struct View {
    /// When the roster was read, and the server's clock then (µs since 2000-01-01 UTC).
    read_at: Instant,
    server_us: i64,
    /// This worker's place in its group, and the group's size.
    position: usize,
    size: usize,
    /// Live workers of every group.
    fleet: usize,
}

impl Roster {
    /// The roster of a worker that has read nothing yet: alone.
    pub(crate) fn new(owner: &str, queues: &[String]) -> Arc<Roster> {
        Arc::new(Roster {
            owner: owner.to_owned(),
            queues: queues.join(","),
            view: Mutex::new(View {
                read_at: Instant::now(),
                server_us: 0,
                position: 0,
                size: 1,
                fleet: 1,
            }),
        })
    }

    fn view(&self) -> View {
        *self.view.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Takes what a roster read returned at `read_at`.
    pub(crate) fn update(&self, read: &RosterRead, read_at: Instant) {
        let mut group: Vec<&str> = read
            .workers
            .iter()
            .filter(|w| {
                w.queues == self.queues && (w.running < w.concurrency || w.owner == self.owner)
            })
            .map(|w| w.owner.as_str())
            .collect();
        if !group.contains(&self.owner.as_str()) {
            group.push(&self.owner);
        }
        group.sort_unstable();
        let position = group.iter().position(|o| *o == self.owner).unwrap_or(0);
        let view = View {
            read_at,
            server_us: read.server_us,
            position,
            size: group.len(),
            fleet: read.workers.len().max(1),
        };
        *self.view.lock().unwrap_or_else(|e| e.into_inner()) = view;
    }

    /// Live workers in the fleet, this one included, as last read.
    pub(crate) fn fleet(&self) -> usize {
        self.view().fleet
    }

    /// This worker's place in its group and the group's size, as last read.
    #[cfg(test)]
    fn place(&self) -> (usize, usize) {
        let v = self.view();
        (v.position, v.size)
    }

    /// When this worker's next probe is due, after `now`, with slots `every` apart: the
    /// next slot of the rotation that is this worker's. Alone, every `every`.
    pub(crate) fn next_probe(&self, now: Instant, every: Duration) -> Instant {
        let v = self.view();
        let w = i64::try_from(every.as_micros()).unwrap_or(i64::MAX).max(1);
        if v.size <= 1 {
            return now + every;
        }
        let elapsed =
            i64::try_from(now.saturating_duration_since(v.read_at).as_micros()).unwrap_or(i64::MAX);
        let server_now = v.server_us.saturating_add(elapsed);
        let k = v.size as i64;
        let mut slot = server_now / w + 1;
        slot += (v.position as i64 - slot.rem_euclid(k)).rem_euclid(k);
        let wait = slot.saturating_mul(w).saturating_sub(server_now).max(0);
        now + Duration::from_micros(wait as u64)
    }
}

/// Rows of workers not seen for this long are deleted by any other worker.
pub const WORKER_FORGOTTEN_AFTER: Duration = Duration::from_secs(3600);

/// Rows of long-gone workers are deleted at a worker's first beat and every this many after.
const FORGET_EVERY_BEATS: u64 = 60;

/// What a worker writes about itself.
pub(crate) struct Heartbeat {
    /// The worker's store: every call within its call timeout.
    pub(crate) store: Store,
    pub(crate) owner: String,
    pub(crate) queues: Vec<String>,
    pub(crate) concurrency: usize,
    /// Periodic kinds this worker schedules, with their cron expressions.
    pub(crate) schedules: Vec<(String, String)>,
    /// How many jobs the worker runs now.
    pub(crate) running: Box<dyn Fn() -> usize + Send + Sync>,
    /// Where the roster read at each beat goes.
    pub(crate) roster: Arc<Roster>,
    /// Whether to publish the queue gauges read at each beat (the workers that run
    /// maintenance; the holder of its turn publishes them at each count too).
    pub(crate) publish_gauges: bool,
}

impl Heartbeat {
    /// Writes the row every [`HEARTBEAT_INTERVAL`] until `stop`, then deletes it. Errors are
    /// logged and tried again at the next beat: a heartbeat never stops a worker.
    pub(crate) async fn run(mut self, stop: CancellationToken) {
        let mut beats: u64 = 0;
        let mut failing = false;
        // False once the roster could not be read for want of a grant: the worker then
        // probes and paces its maintenance as if alone, as the previous release did.
        let mut roster_readable = true;
        let mut gauges_seen = BTreeSet::new();
        loop {
            let beat = tokio::select! {
                _ = stop.cancelled() => break,
                beat = self.beat(beats % FORGET_EVERY_BEATS == 0, roster_readable) => beat,
            };
            let beat = match beat {
                Ok(Some(read)) => {
                    self.roster.update(&read, Instant::now());
                    if self.publish_gauges {
                        crate::maintenance::publish_gauges(&mut gauges_seen, &read.gauges);
                    }
                    Ok(())
                }
                Ok(None) => Ok(()),
                // The row may be writable while a table of the roster read is not (a grant
                // of the previous release's tables): beat without the read from now on.
                Err(e)
                    if roster_readable && e.database_class() == Some(DbErrorKind::TableDenied) =>
                {
                    roster_readable = false;
                    tracing::info!(owner = %self.owner, error = %e, "this user may not read the roster (`job_queue_worker`, `job_queue_turn`, `job_queue_gauges`), so this worker probes for jobs and paces its maintenance as if it were alone; grant them as the deployment guide's least-privilege section shows");
                    self.beat(false, false).await.map(|_| ())
                }
                Err(e) => Err(e),
            };
            match beat {
                Ok(()) => {
                    if failing {
                        tracing::info!(owner = %self.owner, "worker heartbeat written again");
                    }
                    beats += 1;
                    failing = false;
                }
                // A user granted rights on the job tables of an older release only: the
                // worker runs, it is just not listed among the live workers.
                Err(e) if e.database_class() == Some(DbErrorKind::TableDenied) => {
                    tracing::info!(owner = %self.owner, error = %e, "this user may not write the heartbeat's tables (`job_queue_worker`, and `job_queue_cron` for periodic kinds), so this worker is not listed by `jobqueue workers` or the dashboard; grant them as the deployment guide's least-privilege section shows");
                    // A row written before the refusal (the worker's own table may be granted
                    // and the cron table not) goes too; a refused delete has nothing to undo.
                    let _ = self.store.delete_worker(&self.owner).await;
                    return;
                }
                Err(e) => {
                    if !failing {
                        tracing::warn!(owner = %self.owner, error = %e, "worker heartbeat failed; trying again in {HEARTBEAT_INTERVAL:?}");
                    }
                    failing = true;
                }
            }
            let next = if beats == 1 {
                SECOND_BEAT_AFTER
            } else {
                HEARTBEAT_INTERVAL
            };
            tokio::select! {
                _ = stop.cancelled() => break,
                _ = tokio::time::sleep(next) => {}
            }
        }
        if let Err(e) = self.store.delete_worker(&self.owner).await {
            tracing::warn!(owner = %self.owner, error = %e, "could not delete the worker's heartbeat row; it shows as gone once it is old");
        }
    }

    /// Writes the row, and with `read` reads the roster back.
    async fn beat(&mut self, forget_old: bool, read: bool) -> Result<Option<RosterRead>> {
        let store = &self.store;
        let running = (self.running)() as u64;
        let (updated, mut roster) = if read {
            match store
                .beat_and_read(&self.owner, running, ROSTER_LIVE)
                .await?
            {
                Some(r) => (1, Some(r)),
                None => (0, None),
            }
        } else {
            (store.beat_worker(&self.owner, running).await?, None)
        };
        if updated == 0 {
            let (host, pid) = host_and_pid(&self.owner);
            let inserted = store
                .insert_worker(&WorkerRow {
                    owner: &self.owner,
                    host: &host,
                    pid,
                    queues: &self.queues.join(","),
                    concurrency: self.concurrency as u64,
                    running,
                })
                .await;
            match inserted {
                // Another process with this owner name: the unique key keeps one row.
                Err(e) if e.database_class() == Some(DbErrorKind::Duplicate) => {}
                other => {
                    other?;
                }
            }
            if read {
                roster = Some(store.read_roster(ROSTER_LIVE).await?);
            }
        }
        // The scheduler creates a kind's row on its first pass, which may come after this
        // beat: a schedule is written at each beat until its row took it.
        let mut written = Vec::new();
        for (i, (kind, expr)) in self.schedules.iter().enumerate() {
            if store.write_schedule(kind, expr).await? == 1 {
                written.push(i);
            }
        }
        for i in written.into_iter().rev() {
            self.schedules.swap_remove(i);
        }
        if forget_old {
            store
                .forget_workers(WORKER_FORGOTTEN_AFTER.as_secs())
                .await?;
        }
        Ok(roster)
    }
}

/// The host and process id of the worker: taken from the default owner name
/// (`host:pid:random`), else this process's.
fn host_and_pid(owner: &str) -> (String, u32) {
    let mut parts = owner.rsplitn(3, ':');
    let _random = parts.next();
    let pid = parts.next().and_then(|p| p.parse().ok());
    let host = parts.next();
    match (host, pid) {
        (Some(h), Some(p)) if p == std::process::id() => (h.to_owned(), p),
        _ => (
            std::fs::read_to_string("/proc/sys/kernel/hostname")
                .map(|h| h.trim().to_owned())
                .ok()
                .filter(|h| !h.is_empty())
                .unwrap_or_else(|| "unknown".into()),
            std::process::id(),
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::LiveWorker;

    fn live(owner: &str, queues: &str, running: u64) -> LiveWorker {
        LiveWorker {
            owner: owner.into(),
            queues: queues.into(),
            running,
            concurrency: 4,
        }
    }

    #[test]
    fn the_group_is_the_live_workers_of_the_same_queues_with_a_free_slot() {
        let roster = Roster::new("b", &["x".into(), "y".into()]);
        let read = RosterRead {
            server_us: 0,
            workers: vec![
                live("a", "x,y", 0),
                live("b", "x,y", 4),
                live("c", "x,y", 4),
                live("d", "x", 0),
                live("e", "x,y", 1),
            ],
            turn: None,
            gauges: Vec::new(),
        };
        roster.update(&read, Instant::now());
        // "c" is busy and "d" serves other queues; "b" counts itself even when busy.
        assert_eq!(roster.place(), (1, 3));
        assert_eq!(roster.fleet(), 5);
    }

    #[test]
    fn the_members_of_a_group_probe_in_turn_one_interval_apart() {
        let every = Duration::from_millis(100);
        let read_at = Instant::now();
        let owners = ["a", "b", "c"];
        let mut due = Vec::new();
        for owner in owners {
            let roster = Roster::new(owner, &["q".into()]);
            let read = RosterRead {
                // 12.345 s on the server's clock.
                server_us: 12_345_000,
                workers: owners.iter().map(|o| live(o, "q", 0)).collect(),
                turn: None,
                gauges: Vec::new(),
            };
            roster.update(&read, read_at);
            let next = roster.next_probe(read_at, every);
            // The one after is a whole rotation later.
            assert_eq!(roster.next_probe(next, every) - next, every * 3);
            due.push(next - read_at);
        }
        due.sort();
        // Slots 124, 125 and 126 (of 100 ms): 55, 155 and 255 ms from now.
        assert_eq!(due, [55, 155, 255].map(Duration::from_millis).to_vec());
    }

    #[test]
    fn a_worker_alone_probes_every_interval() {
        let roster = Roster::new("a", &["q".into()]);
        let now = Instant::now();
        let every = Duration::from_millis(90);
        assert_eq!(roster.next_probe(now, every), now + every);
    }
}
