//! Backoff: how long a failed job waits before its next attempt, and how the runtime retries
//! its own transactions after a deadlock.

use std::time::Duration;

use rand::Rng;

/// The wait before a failed job's next attempt.
///
/// Every delay is jittered by ±20 % (uniformly) so that jobs that failed together do not all
/// come back in the same instant. The default, `Exponential { base: 1s, max: 1h }`, waits
/// about 1 s, 2 s, 4 s, 8 s, 16 s, 32 s, 64 s, 128 s, 256 s, 512 s, 1024 s, 2048 s, then 1 h
/// for every later attempt: with the default 25 attempts a job keeps trying for about 13 h.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Backoff {
    /// `base * 2^(attempt - 1)`, at most `max`.
    Exponential {
        /// The wait after the first failed attempt.
        base: Duration,
        /// The longest wait.
        max: Duration,
    },
    /// `step * attempt`, at most `max`.
    Linear {
        /// The wait added by each failed attempt.
        step: Duration,
        /// The longest wait.
        max: Duration,
    },
    /// The same wait after every failed attempt.
    Constant(Duration),
}

impl Backoff {
    /// Exponential from 1 s, doubling, capped at 1 h.
    pub const DEFAULT: Backoff = Backoff::Exponential {
        base: Duration::from_secs(1),
        max: Duration::from_secs(3600),
    };

    /// The wait after failed attempt `attempt` (from 1), before jitter.
    pub fn base_delay(&self, attempt: u32) -> Duration {
        let n = attempt.max(1);
        match *self {
            Backoff::Exponential { base, max } => {
                let factor = 1u32.checked_shl(n - 1).unwrap_or(u32::MAX);
                base.checked_mul(factor).unwrap_or(max).min(max)
            }
            Backoff::Linear { step, max } => step.checked_mul(n).unwrap_or(max).min(max),
            Backoff::Constant(d) => d,
        }
    }

    /// The wait after failed attempt `attempt` (from 1), with ±20 % jitter.
    pub fn delay(&self, attempt: u32) -> Duration {
        jitter(self.base_delay(attempt), 0.2)
    }
}

impl Default for Backoff {
    fn default() -> Self {
        Backoff::DEFAULT
    }
}

/// `d` scaled by a uniform factor in `[1 - spread, 1 + spread]`.
pub(crate) fn jitter(d: Duration, spread: f64) -> Duration {
    if d.is_zero() {
        return d;
    }
    let factor = rand::thread_rng().gen_range((1.0 - spread)..=(1.0 + spread));
    d.mul_f64(factor)
}

/// Delay before the `n`th (from 1) retry of a transaction that hit a transient conflict:
/// 5 ms, 10 ms, 20 ms, 40 ms... capped at 500 ms, jittered ±50 %.
pub(crate) fn conflict_delay(n: u32) -> Duration {
    let ms = 5u64
        .saturating_mul(1 << n.saturating_sub(1).min(10))
        .min(500);
    jitter(Duration::from_millis(ms), 0.5)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exponential_doubles_and_caps() {
        let b = Backoff::DEFAULT;
        assert_eq!(b.base_delay(1), Duration::from_secs(1));
        assert_eq!(b.base_delay(2), Duration::from_secs(2));
        assert_eq!(b.base_delay(12), Duration::from_secs(2048));
        assert_eq!(b.base_delay(13), Duration::from_secs(3600));
        assert_eq!(b.base_delay(1000), Duration::from_secs(3600));
    }

    #[test]
    fn jitter_stays_within_twenty_percent() {
        let b = Backoff::Constant(Duration::from_secs(10));
        for _ in 0..1000 {
            let d = b.delay(3);
            assert!(
                d >= Duration::from_secs(8) && d <= Duration::from_secs(12),
                "{d:?}"
            );
        }
    }

    #[test]
    fn linear_grows_by_step() {
        let b = Backoff::Linear {
            step: Duration::from_secs(5),
            max: Duration::from_secs(12),
        };
        assert_eq!(b.base_delay(1), Duration::from_secs(5));
        assert_eq!(b.base_delay(2), Duration::from_secs(10));
        assert_eq!(b.base_delay(3), Duration::from_secs(12));
    }
}
