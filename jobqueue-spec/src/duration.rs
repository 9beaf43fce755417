//! Durations as options write them: `"500ms"`, `"30s"`, `"10m"`, `"1h30m"`, `"7d"`.
//!
//! A duration is one or more numbers, each followed by a unit (`ms`, `s`, `m`, `h` or `d`),
//! from the largest unit down, with no spaces and no unit repeated.

use std::fmt;

/// The forms a duration may take, for error messages.
pub const FORMS: &str = "write a number and a unit (`ms`, `s`, `m`, `h` or `d`), or several from the largest unit down: `\"500ms\"`, `\"30s\"`, `\"10m\"`, `\"1h30m\"`, `\"7d\"`";

const UNITS: [(&str, u64); 5] = [
    ("d", 86_400_000),
    ("h", 3_600_000),
    ("m", 60_000),
    ("s", 1_000),
    ("ms", 1),
];

/// A duration in whole milliseconds, the finest unit the grammar has.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Millis(pub u64);

impl Millis {
    /// One second.
    pub const SECOND: Millis = Millis(1_000);

    /// As a [`std::time::Duration`].
    pub const fn as_duration(self) -> std::time::Duration {
        std::time::Duration::from_millis(self.0)
    }
}

impl fmt::Display for Millis {
    /// Writes the duration back in the grammar's own notation (`90000` ms as `1m30s`).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.0 == 0 {
            return f.write_str("0s");
        }
        let mut rest = self.0;
        for (unit, ms) in UNITS {
            if rest >= ms {
                write!(f, "{}{unit}", rest / ms)?;
                rest %= ms;
            }
        }
        Ok(())
    }
}

/// Why a text is not a duration.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum DurationError {
    /// The text is empty.
    Empty,
    /// A number was expected where the rest of the text begins.
    ExpectedNumber {
        /// The text from where the number was expected.
        at: String,
    },
    /// A number has no unit after it.
    MissingUnit {
        /// The number.
        number: String,
    },
    /// Letters after a number that are not a unit.
    UnknownUnit {
        /// The letters.
        unit: String,
    },
    /// A unit is used twice.
    RepeatedUnit {
        /// The unit.
        unit: String,
    },
    /// A unit follows a smaller one (`30s1m`).
    UnitOutOfOrder {
        /// The unit.
        unit: String,
    },
    /// The total does not fit in 64 bits of milliseconds.
    TooLong,
}

impl fmt::Display for DurationError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DurationError::Empty => f.write_str("the duration is empty"),
            DurationError::ExpectedNumber { at } => write!(f, "expected a number at `{at}`"),
            DurationError::MissingUnit { number } => write!(f, "`{number}` has no unit"),
            DurationError::UnknownUnit { unit } => write!(f, "`{unit}` is not a unit"),
            DurationError::RepeatedUnit { unit } => write!(f, "`{unit}` is repeated"),
            DurationError::UnitOutOfOrder { unit } => {
                write!(f, "`{unit}` comes after a smaller unit")
            }
            DurationError::TooLong => f.write_str("the duration is too long"),
        }
    }
}

impl std::error::Error for DurationError {}

/// Parses `"1h30m"` and the like. The error says what is wrong; callers add [`FORMS`].
pub fn parse(text: &str) -> Result<Millis, DurationError> {
    if text.is_empty() {
        return Err(DurationError::Empty);
    }
    let mut rest = text;
    let mut total: u64 = 0;
    // Index into `UNITS` of the last unit used: each later unit must be smaller.
    let mut last: Option<usize> = None;
    while !rest.is_empty() {
        let digits = rest.bytes().take_while(u8::is_ascii_digit).count();
        if digits == 0 {
            return Err(DurationError::ExpectedNumber {
                at: rest.to_owned(),
            });
        }
        let (number, after) = rest.split_at(digits);
        let letters = after.bytes().take_while(u8::is_ascii_alphabetic).count();
        let (unit, after) = after.split_at(letters);
        let Some(index) = UNITS.iter().position(|(u, _)| *u == unit) else {
            return Err(if unit.is_empty() {
                DurationError::MissingUnit {
                    number: number.to_owned(),
                }
            } else {
                DurationError::UnknownUnit {
                    unit: unit.to_owned(),
                }
            });
        };
        match last {
            Some(l) if l == index => {
                return Err(DurationError::RepeatedUnit {
                    unit: unit.to_owned(),
                })
            }
            Some(l) if l > index => {
                return Err(DurationError::UnitOutOfOrder {
                    unit: unit.to_owned(),
                })
            }
            _ => {}
        }
        last = Some(index);
        let part = number
            .parse::<u64>()
            .ok()
            .and_then(|n| n.checked_mul(UNITS[index].1))
            .and_then(|ms| total.checked_add(ms));
        total = part.ok_or(DurationError::TooLong)?;
        rest = after;
    }
    Ok(Millis(total))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_single_and_combined_units() {
        assert_eq!(parse("500ms"), Ok(Millis(500)));
        assert_eq!(parse("30s"), Ok(Millis(30_000)));
        assert_eq!(parse("10m"), Ok(Millis(600_000)));
        assert_eq!(parse("2h"), Ok(Millis(7_200_000)));
        assert_eq!(parse("7d"), Ok(Millis(604_800_000)));
        assert_eq!(parse("1m30s"), Ok(Millis(90_000)));
        assert_eq!(parse("1d2h3m4s5ms"), Ok(Millis(93_784_005)));
        assert_eq!(parse("0s"), Ok(Millis(0)));
        assert_eq!(
            parse("1m30s").unwrap().as_duration(),
            std::time::Duration::from_secs(90)
        );
    }

    #[test]
    fn rejects_everything_else() {
        for bad in [
            "",
            "30",
            "s",
            "30 s",
            " 30s",
            "30sec",
            "1.5h",
            "-1s",
            "30s1m",
            "1m1m",
            "1h 30m",
            "30S",
            "99999999999999999999d",
            "999999999999999d",
        ] {
            assert!(parse(bad).is_err(), "{bad:?} parsed");
        }
    }

    #[test]
    fn errors_say_what_is_wrong() {
        let message = |text: &str| parse(text).unwrap_err().to_string();
        assert_eq!(message(""), "the duration is empty");
        assert_eq!(message("30"), "`30` has no unit");
        assert_eq!(message("30sec"), "`sec` is not a unit");
        assert_eq!(message("s"), "expected a number at `s`");
        assert_eq!(message("1m1m"), "`m` is repeated");
        assert_eq!(message("30s1m"), "`m` comes after a smaller unit");
        assert_eq!(message("999999999999999d"), "the duration is too long");
    }

    #[test]
    fn displays_in_the_same_notation() {
        for text in ["500ms", "30s", "1m30s", "1d2h3m4s5ms", "0s"] {
            assert_eq!(parse(text).unwrap().to_string(), text);
        }
    }
}
