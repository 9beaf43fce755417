//! Queue names: 1 to [`MAX_QUEUE_CHARS`] characters of `[A-Za-z0-9_.:-]`, so that a name
//! fits the `queue` column and needs no quoting in logs, URLs or shell commands.

use std::fmt;

/// The longest queue name, in characters (the `queue` column).
pub const MAX_QUEUE_CHARS: usize = 64;

/// Why a text is not a queue name.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum QueueNameError {
    /// The name is empty.
    Empty,
    /// The name is longer than [`MAX_QUEUE_CHARS`].
    TooLong {
        /// Its length in characters.
        chars: usize,
    },
    /// The name has a character outside `[A-Za-z0-9_.:-]`.
    NotAllowed(char),
}

impl fmt::Display for QueueNameError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            QueueNameError::Empty => f.write_str("a queue name must not be empty"),
            QueueNameError::TooLong { chars } => write!(
                f,
                "it is {chars} characters long, over the limit of {MAX_QUEUE_CHARS}"
            ),
            QueueNameError::NotAllowed(c) => write!(
                f,
                "{c:?} is not allowed; use letters, digits, `_`, `-`, `.` and `:`"
            ),
        }
    }
}

impl std::error::Error for QueueNameError {}

/// Checks a queue name: its length first, then its characters.
pub fn check(name: &str) -> Result<(), QueueNameError> {
    let chars = name.chars().count();
    if chars == 0 {
        return Err(QueueNameError::Empty);
    }
    if chars > MAX_QUEUE_CHARS {
        return Err(QueueNameError::TooLong { chars });
    }
    match name
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.' | ':')))
    {
        Some(c) => Err(QueueNameError::NotAllowed(c)),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_of_allowed_characters_and_length_pass() {
        for good in ["exports", "emails.high-priority:v2", "a", &"q".repeat(64)] {
            assert_eq!(check(good), Ok(()), "{good:?}");
        }
    }

    #[test]
    fn everything_else_is_refused_with_the_reason() {
        assert_eq!(check(""), Err(QueueNameError::Empty));
        assert_eq!(
            check(&"q".repeat(65)),
            Err(QueueNameError::TooLong { chars: 65 })
        );
        // Counted in characters, as the column counts them.
        assert_eq!(check(&"é".repeat(40)), Err(QueueNameError::NotAllowed('é')));
        assert_eq!(
            check("a'; DROP TABLE job_queue; --"),
            Err(QueueNameError::NotAllowed('\''))
        );
        assert_eq!(check("a b"), Err(QueueNameError::NotAllowed(' ')));
        assert_eq!(
            QueueNameError::NotAllowed(';').to_string(),
            "';' is not allowed; use letters, digits, `_`, `-`, `.` and `:`"
        );
    }
}
