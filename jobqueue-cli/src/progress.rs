//! A progress bar for bulk changes (purge, retry of every failed job).
//!
//! The runtime does such a change in batches inside one call and reports only the total, so
//! the bar follows the database instead: while the call runs, a second connection counts
//! the rows still left to change, twice a second.

use std::future::Future;
use std::io::{self, IsTerminal};
use std::time::Duration;

use indicatif::{ProgressBar, ProgressStyle};

/// Changes of fewer rows than this finish in one or two batches: no bar.
const MIN_ROWS_FOR_BAR: u64 = 2_000;

/// Runs `work`, which changes `total` rows, showing a bar on standard error when that is
/// a terminal and the change is long. `remaining` counts the rows not yet changed.
pub(crate) async fn track<T, W, R, RF>(
    what: &str,
    total: u64,
    work: W,
    remaining: R,
) -> jobqueue::Result<T>
where
    W: Future<Output = jobqueue::Result<T>>,
    R: Fn() -> RF,
    RF: Future<Output = jobqueue::Result<u64>>,
{
    if total < MIN_ROWS_FOR_BAR || !io::stderr().is_terminal() {
        return work.await;
    }
    let bar = ProgressBar::new(total);
    if let Ok(style) = ProgressStyle::with_template(
        "{msg} [{bar:40}] {human_pos}/{human_len} rows, {elapsed}, eta {eta}",
    ) {
        bar.set_style(style.progress_chars("=> "));
    }
    bar.set_message(what.to_owned());
    let mut work = std::pin::pin!(work);
    let result = tokio::select! {
        result = &mut work => result,
        // `follow` never ends; if it did, the work would simply be awaited without a bar.
        () = follow(&bar, total, remaining) => work.await,
    };
    bar.finish_and_clear();
    result
}

/// Moves `bar` along as the rows left to change go down, forever.
async fn follow<R, RF>(bar: &ProgressBar, total: u64, remaining: R)
where
    R: Fn() -> RF,
    RF: Future<Output = jobqueue::Result<u64>>,
{
    let mut tick = tokio::time::interval(Duration::from_millis(500));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        // A failed count leaves the bar where it was: the work itself decides whether the
        // command fails.
        if let Ok(left) = remaining().await {
            bar.set_position(total.saturating_sub(left));
        }
    }
}
