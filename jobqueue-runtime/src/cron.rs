//! Periodic jobs: cron schedules and the tick keys that make each tick run once.

use chrono::{DateTime, Utc};

use crate::error::{Error, Result};

/// A parsed cron schedule: six fields with seconds (`sec min hour day-of-month month
/// day-of-week`), evaluated in UTC. A five-field expression (no seconds) is accepted too and
/// fires at second 0.
#[derive(Debug, Clone)]
pub struct Schedule {
    expr: String,
    cron: croner::Cron,
}

impl Schedule {
    /// Parses `expr`, with an error that quotes it and says what is wrong.
    pub fn parse(expr: &str) -> Result<Self> {
        let cron = croner::Cron::new(expr)
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
        })
    }

    /// The expression as written.
    pub fn expr(&self) -> &str {
        &self.expr
    }

    /// The first tick strictly after `t`.
    pub fn next_after(&self, t: DateTime<Utc>) -> Option<DateTime<Utc>> {
        self.cron.find_next_occurrence(&t, false).ok()
    }
}
