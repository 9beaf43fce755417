use std::time::Duration;

use jobqueue::{job, Backoff, Job};

#[job(
    name = "reports.daily",
    queue = "reports",
    max_attempts = 3,
    lease = "2m",
    timeout = "1h30m",
    priority = -100,
    key = "report:{region}",
    backoff = "exponential(500ms, 10m)",
    cron = "0 0 6 * * *",
    overlap = true,
    crate = "::jobqueue"
)]
pub(crate) async fn daily_report(region: String, recipients: Option<Vec<String>>) {
    let _ = (region, recipients);
}

// Five fields: no seconds.
#[job(cron = "*/15 * * * *")]
async fn poll() {}

fn main() {
    let o = DailyReport::OPTIONS;
    assert_eq!(DailyReport::KIND, "reports.daily");
    assert_eq!(o.queue, "reports");
    assert_eq!(o.max_attempts, 3);
    assert_eq!(o.lease, Duration::from_secs(120));
    assert_eq!(o.timeout, Some(Duration::from_secs(5400)));
    assert_eq!(o.priority, -100);
    assert_eq!(
        o.backoff,
        Backoff::Exponential {
            base: Duration::from_millis(500),
            max: Duration::from_secs(600)
        }
    );
    assert_eq!(o.cron, Some("0 0 6 * * *"));
    assert!(o.overlap);
    assert!(!Poll::OPTIONS.overlap, "ticks do not overlap by default");
    // A tick builds its arguments with `Default`.
    let job = DailyReport::default();
    assert_eq!(job.task_key().unwrap(), "report:");
    assert_eq!(Poll::OPTIONS.cron, Some("*/15 * * * *"));
    jobqueue::registry::Registry::load().expect("the options pass the runtime's checks");
}
