//! Periodic jobs: cron schedules and the tick keys that make each tick run once.

use chrono::{DateTime, Utc};

use crate::error::{Error, Result};

/// A parsed cron schedule: six fields with seconds (`sec min hour day-of-month month
/// day-of-week`), or five without them (firing at second 0), evaluated in UTC unless the
/// expression starts with a time zone: `CRON_TZ=Europe/Berlin 0 0 9 * * Mon-Fri` fires at
/// 09:00 Berlin time, winter and summer (`TZ=` works too; names are IANA time zone names).
/// Whatever the zone, ticks and their task keys are in UTC.
#[derive(Debug, Clone)]
pub struct Schedule {
    expr: String,
    cron: croner::Cron,
    tz: Option<chrono_tz::Tz>,
}

/// Splits a leading `CRON_TZ=<zone>` or `TZ=<zone>` off a cron expression.
pub fn split_time_zone(expr: &str) -> (Option<&str>, &str) {
    let trimmed = expr.trim_start();
    for prefix in ["CRON_TZ=", "TZ="] {
        if let Some(rest) = trimmed.strip_prefix(prefix) {
            let (zone, fields) = rest.split_once(char::is_whitespace).unwrap_or((rest, ""));
            return (Some(zone), fields.trim_start());
        }
    }
    (None, trimmed)
}

impl Schedule {
    /// Parses `expr`, with an error that quotes it and says what is wrong.
    pub fn parse(expr: &str) -> Result<Self> {
        let (zone, fields) = split_time_zone(expr);
        let tz = zone
            .map(|z| {
                z.parse::<chrono_tz::Tz>().map_err(|_| {
                    Error::Config(format!(
                        "cron schedule {expr:?}: unknown time zone {z:?}; use an IANA name such as \"Europe/Berlin\" or \"America/New_York\""
                    ))
                })
            })
            .transpose()?;
        let cron = croner::Cron::new(fields)
            .with_seconds_optional()
            .parse()
            .map_err(|e| {
                Error::Config(format!(
                    "cron schedule {expr:?} does not parse: {e}; write `sec min hour day month weekday`, e.g. \"0 */5 * * * *\""
                ))
            })?;
        Ok(Schedule {
            expr: expr.to_owned(),
            cron,
            tz,
        })
    }

    /// The expression as written.
    pub fn expr(&self) -> &str {
        &self.expr
    }

    /// The first tick strictly after `t`.
    pub fn next_after(&self, t: DateTime<Utc>) -> Option<DateTime<Utc>> {
        match self.tz {
            None => self.cron.find_next_occurrence(&t, false).ok(),
            Some(tz) => self
                .cron
                .find_next_occurrence(&t.with_timezone(&tz), false)
                .ok()
                .map(|local| local.with_timezone(&Utc)),
        }
    }
}

/// The periodic kinds of this binary and the last tick each node has enqueued.
///
/// Every worker runs one. Each pass reads the database's clock and enqueues, for each
/// periodic kind, every tick since its previous pass with the task key
/// `"{kind}@{tick, RFC 3339 UTC}"`: the unique key makes each tick one job however many
/// nodes enqueue it, with no leader. Missed ticks after downtime: only the latest one runs
/// (at the first pass of a worker, and whenever more than [`MAX_CATCH_UP`] ticks were
/// missed), never a burst.
#[derive(Debug)]
pub(crate) struct Scheduler {
    entries: Vec<Entry>,
}

#[derive(Debug)]
struct Entry {
    descriptor: &'static crate::registry::JobDescriptor,
    schedule: Schedule,
    last: Option<DateTime<Utc>>,
}

/// The most ticks one pass enqueues for one kind; past this, only the latest.
pub(crate) const MAX_CATCH_UP: usize = 100;

/// The task key of a periodic kind's tick.
pub fn tick_key(kind: &str, tick: DateTime<Utc>) -> String {
    format!("{kind}@{}", tick.format("%Y-%m-%dT%H:%M:%S%.6fZ"))
}

impl Scheduler {
    pub(crate) fn new(registry: &crate::registry::Registry) -> Result<Self> {
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
        Ok(Scheduler { entries })
    }

    /// A scheduler that enqueues nothing.
    pub(crate) fn none() -> Self {
        Scheduler {
            entries: Vec::new(),
        }
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Enqueues the ticks due by `now` (the database's clock). Returns how many were new.
    pub(crate) async fn run(
        &mut self,
        store: &crate::store::Store,
        now: DateTime<Utc>,
    ) -> Result<u64> {
        let mut new = 0;
        for e in &mut self.entries {
            let ticks = due_ticks(&e.schedule, e.last, now);
            for tick in &ticks {
                let kind = e.descriptor.kind();
                let Some(make) = e.descriptor.cron_payload() else {
                    continue;
                };
                let payload = make().map_err(|source| Error::Serialize { kind, source })?;
                let o = e.descriptor.options();
                let job = crate::store::NewJob {
                    kind: kind.to_owned(),
                    queue: o.queue.to_owned(),
                    key: tick_key(kind, *tick),
                    payload: payload.to_string(),
                    priority: o.priority,
                    max_attempts: o.max_attempts,
                    lease_ms: crate::enqueue::lease_ms(kind, o.lease)?,
                    run_at: Some(tick.naive_utc()),
                    delay_us: 0,
                };
                if store.insert_tick(&job).await?.is_new() {
                    new += 1;
                    tracing::debug!(job.kind = kind, tick = %tick, "periodic job enqueued");
                }
            }
            if let Some(last) = ticks.last() {
                e.last = Some(*last);
            }
        }
        Ok(new)
    }
}

/// The ticks of `schedule` in `(last, now]`; with no `last`, or too many, only the latest.
fn due_ticks(
    schedule: &Schedule,
    last: Option<DateTime<Utc>>,
    now: DateTime<Utc>,
) -> Vec<DateTime<Utc>> {
    let latest = latest_at_or_before(schedule, now);
    let Some(latest) = latest else {
        return Vec::new();
    };
    let Some(mut t) = last else {
        return vec![latest];
    };
    let mut ticks = Vec::new();
    while let Some(next) = schedule.next_after(t) {
        if next > now {
            break;
        }
        if ticks.len() == MAX_CATCH_UP {
            return vec![latest];
        }
        ticks.push(next);
        t = next;
    }
    ticks
}

/// The latest tick at or before `now`, looking back at most a year.
fn latest_at_or_before(schedule: &Schedule, now: DateTime<Utc>) -> Option<DateTime<Utc>> {
    // Walk back in growing windows until a window holds a tick, then walk forward in it.
    let mut span = chrono::Duration::seconds(2);
    while span <= chrono::Duration::days(366) {
        let from = now - span;
        if let Some(first) = schedule.next_after(from) {
            if first <= now {
                let mut t = first;
                while let Some(n) = schedule.next_after(t) {
                    if n > now {
                        break;
                    }
                    t = n;
                }
                return Some(t);
            }
        }
        span = span * 4;
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeZone;

    fn at(s: u32) -> DateTime<Utc> {
        Utc.with_ymd_and_hms(2026, 11, 30, 12, 0, s).unwrap()
    }

    #[test]
    fn first_pass_enqueues_only_the_latest_tick() {
        let every_5s = Schedule::parse("*/5 * * * * *").unwrap();
        assert_eq!(due_ticks(&every_5s, None, at(12)), vec![at(10)]);
    }

    #[test]
    fn later_passes_enqueue_every_tick_since_the_last() {
        let every_s = Schedule::parse("* * * * * *").unwrap();
        assert_eq!(
            due_ticks(&every_s, Some(at(3)), at(6)),
            vec![at(4), at(5), at(6)]
        );
        assert!(due_ticks(&every_s, Some(at(6)), at(6)).is_empty());
    }

    #[test]
    fn a_long_gap_enqueues_only_the_latest() {
        let every_s = Schedule::parse("* * * * * *").unwrap();
        let ticks = due_ticks(&every_s, Some(at(0)), at(0) + chrono::Duration::hours(1));
        assert_eq!(ticks, vec![at(0) + chrono::Duration::hours(1)]);
    }

    #[test]
    fn bad_expressions_say_what_to_write() {
        let e = Schedule::parse("every five minutes")
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("every five minutes") && e.contains("sec min hour"),
            "{e}"
        );
    }

    #[test]
    fn a_time_zone_prefix_follows_the_zone_through_daylight_saving() {
        let nine_in_berlin = Schedule::parse("CRON_TZ=Europe/Berlin 0 0 9 * * *").unwrap();
        let winter = Utc.with_ymd_and_hms(2026, 11, 30, 7, 0, 0).unwrap();
        assert_eq!(
            nine_in_berlin.next_after(winter),
            Some(Utc.with_ymd_and_hms(2026, 11, 30, 8, 0, 0).unwrap())
        );
        let summer = Utc.with_ymd_and_hms(2026, 7, 1, 6, 0, 0).unwrap();
        assert_eq!(
            nine_in_berlin.next_after(summer),
            Some(Utc.with_ymd_and_hms(2026, 7, 1, 7, 0, 0).unwrap())
        );
        let tz = Schedule::parse("TZ=America/New_York 0 30 17 * * *").unwrap();
        assert_eq!(
            tz.next_after(winter),
            Some(Utc.with_ymd_and_hms(2026, 11, 30, 22, 30, 0).unwrap())
        );
    }

    #[test]
    fn an_unknown_time_zone_is_named_in_the_error() {
        let e = Schedule::parse("CRON_TZ=Mars/Olympus 0 0 9 * * *")
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("unknown time zone \"Mars/Olympus\"") && e.contains("IANA"),
            "{e}"
        );
    }

    #[test]
    fn tick_keys_are_stable() {
        assert_eq!(
            tick_key("report", at(5)),
            "report@2026-11-30T12:00:05.000000Z"
        );
    }
}
