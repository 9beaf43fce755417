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

impl Schedule {
    /// Parses `expr`, with an error that quotes it and says what is wrong.
    pub fn parse(expr: &str) -> Result<Self> {
        let parsed = jobqueue_spec::cron::parse(expr).map_err(|e| Error::InvalidCron {
            expr: expr.to_owned(),
            reason: e.to_string(),
        })?;
        let tz = parsed
            .zone
            .map(|z| {
                z.parse::<chrono_tz::Tz>().map_err(|_| {
                    Error::InvalidCron {
                        expr: expr.to_owned(),
                        reason: format!("unknown time zone {z:?}; use an IANA name such as \"Europe/Berlin\" or \"America/New_York\""),
                    }
                })
            })
            .transpose()?;
        Ok(Schedule {
            expr: expr.to_owned(),
            cron: parsed.fields,
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

/// The task key of a periodic kind's tick.
pub fn tick_key(kind: &str, tick: DateTime<Utc>) -> String {
    format!("{kind}@{}", tick.format("%Y-%m-%dT%H:%M:%S%.6fZ"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeZone;

    fn at(s: u32) -> DateTime<Utc> {
        Utc.with_ymd_and_hms(2026, 11, 30, 12, 0, s).unwrap()
    }

    #[test]
    fn bad_expressions_say_what_to_write() {
        let e = Schedule::parse("every five minutes").unwrap_err();
        assert!(matches!(&e, Error::InvalidCron { expr, .. } if expr == "every five minutes"));
        let e = e.to_string();
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
