//! Cron schedules: six fields with seconds (`sec min hour day-of-month month day-of-week`) or
//! five without them, optionally after a time zone: `CRON_TZ=Europe/Berlin 0 0 9 * * Mon-Fri`
//! (`TZ=` works too).
//!
//! This grammar checks the zone's spelling only; whether the name is in the time zone
//! database is for the runtime to say, which has the database.

use std::fmt;

/// What a schedule looks like, for error messages.
pub const FORMS: &str = "write six fields `sec min hour day month weekday`, such as `\"0 */5 * * * *\"`, or five without the seconds";

/// A parsed schedule: the time zone as written (if any) and the fields.
#[derive(Debug, Clone)]
pub struct CronExpr<'a> {
    /// The zone of a `CRON_TZ=` or `TZ=` prefix, as written.
    pub zone: Option<&'a str>,
    /// The parsed fields.
    pub fields: croner::Cron,
}

/// Why a text is not a cron schedule.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum CronError {
    /// The `CRON_TZ=` prefix names no zone, or one spelt with characters no zone name has.
    TimeZone {
        /// The zone as written.
        zone: String,
    },
    /// Not five or six fields.
    FieldCount {
        /// How many fields there are.
        fields: usize,
    },
    /// A field is out of range or does not parse.
    Fields {
        /// What is wrong, lowercase, as the cron parser says it.
        reason: String,
    },
}

impl fmt::Display for CronError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CronError::TimeZone { zone } => write!(
                f,
                "invalid time zone {zone:?}; write an IANA name such as `CRON_TZ=Europe/Berlin` before the fields"
            ),
            CronError::FieldCount { fields } => write!(f, "it has {fields} fields; {FORMS}"),
            CronError::Fields { reason } => write!(f, "{reason}; {FORMS}"),
        }
    }
}

impl std::error::Error for CronError {}

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

/// Parses a schedule, with its time zone prefix if it has one.
pub fn parse(expr: &str) -> Result<CronExpr<'_>, CronError> {
    let (zone, fields) = split_time_zone(expr);
    if let Some(zone) = zone {
        if zone.is_empty()
            || !zone
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '/' | '_' | '-' | '+'))
        {
            return Err(CronError::TimeZone {
                zone: zone.to_owned(),
            });
        }
    }
    let count = fields.split_whitespace().count();
    if !(5..=6).contains(&count) {
        return Err(CronError::FieldCount { fields: count });
    }
    let parsed = croner::Cron::new(fields)
        .with_seconds_optional()
        .parse()
        .map_err(|e| {
            // croner's messages start with its error kind ("Component error: ..."); keep
            // the reason and lowercase it to read as part of a sentence.
            let message = e.to_string();
            let reason = message
                .split_once(": ")
                .map_or(message.as_str(), |(_, reason)| reason)
                .trim_end_matches('.');
            let mut chars = reason.chars();
            let reason: String = chars
                .next()
                .map(|c| c.to_lowercase().chain(chars).collect())
                .unwrap_or_default();
            CronError::Fields { reason }
        })?;
    Ok(CronExpr {
        zone,
        fields: parsed,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn schedules_with_and_without_zone_and_seconds() {
        assert_eq!(parse("0 */5 * * * *").unwrap().zone, None);
        assert_eq!(
            parse("CRON_TZ=Europe/Berlin 0 0 9 * * Mon-Fri")
                .unwrap()
                .zone,
            Some("Europe/Berlin")
        );
        assert_eq!(
            parse("  TZ=America/New_York 0 30 17 * * *").unwrap().zone,
            Some("America/New_York")
        );
        assert!(parse("*/5 * * * *").is_ok());
    }

    #[test]
    fn mistakes_are_named() {
        assert_eq!(
            parse("CRON_TZ= 0 0 9 * * *").unwrap_err(),
            CronError::TimeZone {
                zone: String::new()
            }
        );
        assert_eq!(
            parse("CRON_TZ=Europe;Berlin 0 0 9 * * *").unwrap_err(),
            CronError::TimeZone {
                zone: "Europe;Berlin".into()
            }
        );
        assert_eq!(
            parse("* * *").unwrap_err(),
            CronError::FieldCount { fields: 3 }
        );
        assert_eq!(
            parse("every five minutes").unwrap_err(),
            CronError::FieldCount { fields: 3 }
        );
        assert_eq!(
            parse("0 61 * * * *").unwrap_err(),
            CronError::Fields {
                reason: "number out of bounds".into()
            }
        );
        assert!(parse("CRON_TZ=Europe/Berlin 0 0 99 * * *").is_err());
        assert!(parse("0 61 * * * *")
            .unwrap_err()
            .to_string()
            .ends_with(FORMS));
    }

    #[test]
    fn the_zone_is_split_off_before_the_fields() {
        assert_eq!(
            split_time_zone("CRON_TZ=UTC   0 0 * * * *"),
            (Some("UTC"), "0 0 * * * *")
        );
        assert_eq!(split_time_zone(" 0 0 * * * *"), (None, "0 0 * * * *"));
        assert_eq!(split_time_zone("TZ=UTC"), (Some("UTC"), ""));
    }
}
