//! The backoff of failed attempts as options write it: `"exponential(1s, 1h)"` (first wait,
//! longest wait), `"linear(10s, 10m)"` (step, longest wait) or `"constant(30s)"`.

use std::fmt;

use crate::duration::{self, DurationError, Millis};

/// The forms a backoff may take, for error messages.
pub const FORMS: &str =
    r#"write `"exponential(1s, 1h)"`, `"linear(10s, 10m)"` or `"constant(30s)"`"#;

/// A parsed backoff, in the units of the grammar.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BackoffSpec {
    /// `exponential(base, max)`: `base`, doubling after each failed attempt, at most `max`.
    Exponential {
        /// The wait after the first failed attempt.
        base: Millis,
        /// The longest wait.
        max: Millis,
    },
    /// `linear(step, max)`: `step` times the attempt, at most `max`.
    Linear {
        /// The wait added by each failed attempt.
        step: Millis,
        /// The longest wait.
        max: Millis,
    },
    /// `constant(wait)`: the same wait after every failed attempt.
    Constant(Millis),
}

/// Why a text is not a backoff.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum BackoffError {
    /// Not one of the three forms (or the wrong number of durations for it).
    NotABackoff {
        /// The text as given.
        text: String,
    },
    /// One of the durations does not parse.
    Duration {
        /// The duration's text.
        part: String,
        /// What is wrong with it.
        error: DurationError,
    },
    /// A growing backoff starts at 0s, so it would never wait.
    ZeroStart {
        /// `"first wait"` or `"step"`.
        what: &'static str,
    },
    /// The longest wait is shorter than the first one.
    MaxBelowStart {
        /// `"first wait"` or `"step"`.
        what: &'static str,
        /// The first wait (or the step).
        start: Millis,
        /// The longest wait.
        max: Millis,
    },
}

impl fmt::Display for BackoffError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            BackoffError::NotABackoff { text } => write!(f, "`{text}` is not a backoff; {FORMS}"),
            BackoffError::Duration { part, error } => write!(
                f,
                "`{part}` is not a duration: {error}; {}",
                duration::FORMS
            ),
            BackoffError::ZeroStart { what } => write!(f, "the {what} must be longer than 0s"),
            BackoffError::MaxBelowStart { what, start, max } => write!(
                f,
                "the longest wait ({max}) is shorter than the {what} ({start})"
            ),
        }
    }
}

impl std::error::Error for BackoffError {}

/// Parses one of the three forms; spaces around the durations are allowed.
pub fn parse(text: &str) -> Result<BackoffSpec, BackoffError> {
    let wrong = || BackoffError::NotABackoff {
        text: text.to_owned(),
    };
    let (kind, rest) = text.trim().split_once('(').ok_or_else(wrong)?;
    let inner = rest.strip_suffix(')').ok_or_else(wrong)?;
    let parts: Vec<&str> = inner.split(',').map(str::trim).collect();
    let parse = |part: &str| {
        duration::parse(part).map_err(|error| BackoffError::Duration {
            part: part.to_owned(),
            error,
        })
    };
    let growing = |what: &'static str, start: Millis, max: Millis| {
        if start == Millis(0) {
            Err(BackoffError::ZeroStart { what })
        } else if max < start {
            Err(BackoffError::MaxBelowStart { what, start, max })
        } else {
            Ok(())
        }
    };
    match (kind.trim(), parts.as_slice()) {
        ("exponential", [base, max]) => {
            let (base, max) = (parse(base)?, parse(max)?);
            growing("first wait", base, max)?;
            Ok(BackoffSpec::Exponential { base, max })
        }
        ("linear", [step, max]) => {
            let (step, max) = (parse(step)?, parse(max)?);
            growing("step", step, max)?;
            Ok(BackoffSpec::Linear { step, max })
        }
        ("constant", [wait]) => Ok(BackoffSpec::Constant(parse(wait)?)),
        _ => Err(wrong()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_three_forms_parse() {
        assert_eq!(
            parse("exponential(1s, 1h)"),
            Ok(BackoffSpec::Exponential {
                base: Millis(1_000),
                max: Millis(3_600_000)
            })
        );
        assert_eq!(
            parse(" linear(10s,10m) "),
            Ok(BackoffSpec::Linear {
                step: Millis(10_000),
                max: Millis(600_000)
            })
        );
        assert_eq!(parse("constant(0s)"), Ok(BackoffSpec::Constant(Millis(0))));
    }

    #[test]
    fn everything_else_is_refused() {
        for bad in [
            "exponential",
            "exponential(1s)",
            "exponential(0s, 1h)",
            "exponential(1h, 1s)",
            "linear(1s)",
            "constant(1s, 2s)",
            "fibonacci(1s, 1h)",
            "constant(1 s)",
        ] {
            assert!(parse(bad).is_err(), "{bad:?} parsed");
        }
    }

    #[test]
    fn errors_say_what_is_wrong() {
        let message = |text: &str| parse(text).unwrap_err().to_string();
        assert!(
            message("fibonacci(1s, 1h)").starts_with("`fibonacci(1s, 1h)` is not a backoff; write")
        );
        assert!(message("constant(1 s)")
            .starts_with("`1 s` is not a duration: `1` has no unit; write a number"));
        assert_eq!(message("linear(0s, 1m)"), "the step must be longer than 0s");
        assert_eq!(
            message("exponential(1h, 1s)"),
            "the longest wait (1s) is shorter than the first wait (1h)"
        );
    }
}
