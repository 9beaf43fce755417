//! The grammar of jobqueue's options, written once: the `#[job]` macro checks options with it
//! at compile time and the runtime parses and checks the same values at run time, so that
//! both accept exactly the same text.
//!
//! - [`duration`]: `"500ms"`, `"30s"`, `"1m30s"`, `"7d"`;
//! - [`backoff`]: `"exponential(1s, 1h)"`, `"linear(10s, 10m)"`, `"constant(30s)"`;
//! - [`cron`]: six fields with seconds or five without, optionally after `CRON_TZ=<zone>`;
//! - [`queue`]: queue names, 1 to 64 characters of `[A-Za-z0-9_.:-]`.
//!
//! Errors are values that say what is wrong, not sentences: each caller phrases them for its
//! own context (a spanned compile error naming the option, or a run-time error naming the
//! value).

pub mod backoff;
pub mod cron;
pub mod duration;
pub mod queue;
