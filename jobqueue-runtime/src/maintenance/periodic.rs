//! Periodic jobs: each maintenance pass enqueues the ticks of every periodic kind that are
//! due, once across all nodes (see [`Scheduler`]).

use chrono::{DateTime, Utc};

use crate::cron::{tick_key, Schedule};
use crate::error::{Error, Result};
use crate::model::{NewJob, TickPass};
use crate::queue::Queue;
use crate::registry::{JobDescriptor, Registry};
use crate::store::{DbErrorKind, Store};

pub(super) async fn enqueue_ticks(
    scheduler: &mut Scheduler,
    store: &Store,
    queue: &Queue,
) -> Result<()> {
    if !scheduler.is_empty() {
        let now = store.now().await?.and_utc();
        let n = scheduler.run(store, now).await?;
        if n > 0 {
            queue.wake_workers();
        }
    }
    Ok(())
}

/// The periodic kinds of this binary, and what this node last saw of each kind's schedule.
///
/// Every worker runs one. Each pass reads the database's clock and, for each periodic kind
/// with a tick due, moves the kind's row in `job_queue_cron` (the latest tick dealt with)
/// past the due ticks and enqueues them, in one transaction with that row locked. Each tick's
/// job has the task key `"{kind}@{tick, RFC 3339 UTC}"`. So a tick is enqueued once, by one
/// node, whatever the number of nodes, their restarts, or the pruning of its row since:
///
/// - A kind without a row (new, or its row deleted) starts when its row is created: its
///   first tick is the first one after that, never one from before.
/// - Catch-up: a pass enqueues every tick due since the last one when the oldest of them is
///   at most [`catch_up_window`] overdue. Older ticks were missed: no scheduler ran (every
///   worker stopped, periodic jobs off) or the kind's queue was paused (a paused queue's
///   ticks are not enqueued). Of missed ticks only the latest is enqueued, once: never a
///   burst.
/// - Overlap: unless the kind sets `overlap = true`, a tick is skipped (and counted as dealt
///   with) while the previous tick's job is still scheduled, ready or running, and so is a
///   tick whose time came before that job finished, even when the pass that deals with it
///   runs after (late, on a busy node): which ticks run does not depend on when passes run.
/// - Pause: while an operator has paused the kind (`Queue::pause_periodic`), a pass that
///   finds its row paused (read with the row locked) enqueues nothing, and this node looks
///   again at the next tick. The resume moves `last_tick` to its own time, so no tick due
///   while the kind was paused is enqueued: the schedule goes on with the next one.
#[derive(Debug)]
pub(crate) struct Scheduler {
    entries: Vec<Entry>,
    window: chrono::Duration,
}

#[derive(Debug)]
struct Entry {
    descriptor: &'static JobDescriptor,
    schedule: Schedule,
    /// The kind's `last_tick` as this node last read or wrote it: while no tick is due after
    /// it, a pass needs no transaction for the kind.
    last: Option<DateTime<Utc>>,
}

/// The shortest catch-up window; see [`catch_up_window`].
pub(crate) const MIN_CATCH_UP: std::time::Duration = std::time::Duration::from_secs(5);

/// How overdue the oldest due tick may be for a pass to enqueue every due tick: three
/// maintenance intervals, and at least [`MIN_CATCH_UP`] (5 s with the default interval of
/// 1 s). A pass delayed by less never skips a tick.
pub(crate) fn catch_up_window(maintenance_interval: std::time::Duration) -> chrono::Duration {
    let window = (maintenance_interval * 3).max(MIN_CATCH_UP);
    chrono::Duration::from_std(window).unwrap_or(chrono::Duration::MAX)
}

impl Scheduler {
    pub(crate) fn new(
        registry: &Registry,
        maintenance_interval: std::time::Duration,
    ) -> Result<Self> {
        let mut entries = Vec::new();
        for d in registry.kinds() {
            if let Some(expr) = d.options().cron {
                entries.push(Entry {
                    descriptor: d,
                    schedule: Schedule::parse(expr)?,
                    last: None,
                });
            }
        }
        Ok(Scheduler {
            entries,
            window: catch_up_window(maintenance_interval),
        })
    }

    /// A scheduler that enqueues nothing.
    pub(crate) fn none() -> Self {
        Scheduler {
            entries: Vec::new(),
            window: catch_up_window(MIN_CATCH_UP),
        }
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Enqueues the ticks due by `now` (the database's clock). Returns how many were new.
    pub(crate) async fn run(&mut self, store: &Store, now: DateTime<Utc>) -> Result<u64> {
        let mut new = 0;
        let mut paused: Option<Vec<String>> = None;
        // One kind that cannot be scheduled must not hold up the others: its error is kept
        // and returned after the pass over every kind.
        let mut first_error: Option<Error> = None;
        macro_rules! or_next_kind {
            ($result:expr) => {
                match $result {
                    Ok(value) => value,
                    Err(error) => {
                        first_error.get_or_insert(error);
                        continue;
                    }
                }
            };
        }
        for e in &mut self.entries {
            if let Some(last) = e.last {
                if e.schedule.next_after(last).is_none_or(|t| t > now) {
                    continue;
                }
            }
            let kind = e.descriptor.kind();
            let o = e.descriptor.options();
            let paused = match &mut paused {
                Some(p) => p,
                None => paused.insert(store.paused_queues().await?),
            };
            if paused.iter().any(|q| q == o.queue) {
                // Not enqueued and not dealt with: after `resume`, the catch-up rule decides.
                continue;
            }
            let Some(template) = or_next_kind!(tick_template(e.descriptor)) else {
                continue;
            };
            let job_of = |tick: chrono::NaiveDateTime| NewJob {
                key: tick_key(kind, tick.and_utc()),
                run_at: Some(tick),
                ..template.clone()
            };
            let (schedule, window) = (&e.schedule, self.window);
            let due = |last: chrono::NaiveDateTime| {
                due_ticks(schedule, last.and_utc(), now, window)
                    .into_iter()
                    .map(|t| t.naive_utc())
                    .collect()
            };
            let pass = or_next_kind!(store
                .schedule_ticks(kind, now.naive_utc(), o.overlap, due, job_of)
                .await
                .map_err(|e| match e.database_class() {
                    Some(DbErrorKind::MissingTable) => Error::Schema(format!(
                        "periodic jobs need the table `job_queue_cron`, which this database lacks ({e}); apply the migrations (`Queue::migrate`, or `jobqueue migrate`) with the migration user"
                    )),
                    _ => e,
                }));
            match pass {
                TickPass::Busy => {}
                // Looked at again at its next tick: no transaction until then.
                TickPass::Paused => e.last = Some(now),
                TickPass::Started(at) => {
                    tracing::info!(job.kind = kind, from = %at.and_utc(), "periodic job scheduled from now on; no earlier tick runs");
                    e.last = Some(at.and_utc());
                }
                TickPass::Advanced {
                    last_tick,
                    new: ids,
                    skipped,
                } => {
                    e.last = Some(last_tick.and_utc());
                    new += ids.len() as u64;
                    for id in ids {
                        tracing::debug!(job.kind = kind, job.id = id, "periodic job enqueued");
                    }
                    if skipped > 0 {
                        tracing::info!(
                            job.kind = kind,
                            ticks = skipped,
                            "periodic ticks skipped: the previous tick's job has not finished (`overlap = false`)"
                        );
                    }
                }
            }
        }
        first_error.map_or(Ok(new), Err)
    }
}

/// The job a tick of the periodic kind `d` enqueues, without its key and time: its default
/// arguments, its queue, priority, attempts, lease and limits. `None` if the kind has no
/// default arguments (not a periodic kind).
pub(crate) fn tick_template(d: &JobDescriptor) -> Result<Option<NewJob>> {
    let kind = d.kind();
    let o = d.options();
    let Some(make) = d.cron_payload() else {
        return Ok(None);
    };
    let payload = make()
        .map_err(|source| Error::Serialize { kind, source })?
        .to_string();
    let lease_ms = crate::enqueue::lease_ms(kind, o.lease)?;
    // A tick's arguments are the defaults: its limit keys are theirs, so that a tick
    // shares its slots with enqueued jobs of the same key.
    let (concurrency_key, rate_key) = d.cron_keys();
    let limits = crate::enqueue::job_limits(kind, o, || concurrency_key, || rate_key)?;
    Ok(Some(NewJob {
        kind: kind.to_owned(),
        queue: o.queue.to_owned(),
        key: String::new(),
        payload,
        priority: o.priority,
        max_attempts: o.max_attempts,
        lease_ms,
        run_at: None,
        delay_us: 0,
        // A tick is started by the schedule, not by traced code.
        traceparent: None,
        // Each tick has its own key, enqueued once (`job_queue_cron` sees to it):
        // the kind's policy has nothing to free.
        unique: crate::model::Uniqueness::UntilPruned,
        metadata: None,
        limits,
    }))
}

/// The ticks of `schedule` after `last` and at or before `now` that a pass enqueues: all of
/// them when the oldest is at most `window` overdue, otherwise only the latest.
fn due_ticks(
    schedule: &Schedule,
    last: DateTime<Utc>,
    now: DateTime<Utc>,
    window: chrono::Duration,
) -> Vec<DateTime<Utc>> {
    let Some(first) = schedule.next_after(last).filter(|t| *t <= now) else {
        return Vec::new();
    };
    if now - first > window {
        return vec![latest_at_or_before(schedule, now, last).unwrap_or(first)];
    }
    let mut ticks = vec![first];
    let mut t = first;
    while let Some(next) = schedule.next_after(t) {
        if next > now {
            break;
        }
        ticks.push(next);
        t = next;
    }
    ticks
}

/// The latest tick after `after` and at or before `now`, however far back.
fn latest_at_or_before(
    schedule: &Schedule,
    now: DateTime<Utc>,
    after: DateTime<Utc>,
) -> Option<DateTime<Utc>> {
    // Walk back in growing windows (never before `after`) until one holds a tick, then walk
    // forward in it.
    let mut span = chrono::Duration::seconds(2);
    loop {
        let from = now
            .checked_sub_signed(span)
            .filter(|from| *from > after)
            .unwrap_or(after);
        if let Some(first) = schedule.next_after(from).filter(|t| *t <= now) {
            let mut t = first;
            while let Some(n) = schedule.next_after(t) {
                if n > now {
                    break;
                }
                t = n;
            }
            return Some(t);
        }
        if from == after {
            return None;
        }
        span = span.checked_mul(4).unwrap_or(chrono::Duration::MAX);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeZone;

    fn at(s: u32) -> DateTime<Utc> {
        Utc.with_ymd_and_hms(2026, 11, 30, 12, 0, s).unwrap()
    }

    const WINDOW: chrono::Duration = chrono::Duration::seconds(5);

    #[test]
    fn a_pass_enqueues_every_tick_due_within_the_window() {
        let every_s = Schedule::parse("* * * * * *").unwrap();
        assert_eq!(
            due_ticks(&every_s, at(3), at(6), WINDOW),
            vec![at(4), at(5), at(6)]
        );
        assert!(due_ticks(&every_s, at(6), at(6), WINDOW).is_empty());
    }

    #[test]
    fn after_a_gap_only_the_latest_missed_tick_is_enqueued() {
        let every_s = Schedule::parse("* * * * * *").unwrap();
        let later = at(0) + chrono::Duration::hours(1);
        assert_eq!(due_ticks(&every_s, at(0), later, WINDOW), vec![later]);
        let every_5s = Schedule::parse("*/5 * * * * *").unwrap();
        assert_eq!(due_ticks(&every_5s, at(0), at(12), WINDOW), vec![at(10)]);
        // One missed tick is enqueued however late.
        let daily = Schedule::parse("0 0 3 * * *").unwrap();
        let three = Utc.with_ymd_and_hms(2026, 11, 30, 3, 0, 0).unwrap();
        assert_eq!(
            due_ticks(&daily, three - chrono::Duration::days(1), at(0), WINDOW),
            vec![three]
        );
    }

    #[test]
    fn the_latest_tick_is_found_however_far_back() {
        // A yearly schedule whose last tick is 333 days back, and one recorded ten years ago.
        let yearly = Schedule::parse("0 0 0 1 1 *").unwrap();
        let new_year = Utc.with_ymd_and_hms(2026, 1, 1, 0, 0, 0).unwrap();
        let ten_years_ago = Utc.with_ymd_and_hms(2016, 6, 1, 0, 0, 0).unwrap();
        assert_eq!(
            latest_at_or_before(&yearly, at(0), ten_years_ago),
            Some(new_year)
        );
        assert_eq!(
            due_ticks(&yearly, ten_years_ago, at(0), WINDOW),
            vec![new_year]
        );
        // Nothing after `after`: nothing, without walking back further.
        assert_eq!(latest_at_or_before(&yearly, at(0), new_year), None);
    }
}
