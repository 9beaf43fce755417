use std::time::Duration;

use jobqueue::{job, Job};
use jobqueue::limits::RateLimit;

#[job(concurrency = 2, concurrency_key = "account:{account_id}")]
async fn export(account_id: u64, format: String) {
    let _ = (account_id, format);
}

#[job(rate_limit = "100/1m", rate_key = "provider:{provider}", concurrency = 10)]
async fn send_mail(provider: String, to: String) {
    let _ = (provider, to);
}

// One limit for the whole kind.
#[job(concurrency = 1)]
async fn rebuild_index() {}

fn main() {
    let e = Export { account_id: 42, format: "csv".into() };
    assert_eq!(Export::OPTIONS.concurrency, Some(2));
    assert_eq!(e.concurrency_key().as_deref(), Some("account:42"));
    assert_eq!(e.rate_key(), None);
    let m = SendMail { provider: "smtp".into(), to: "a@b".into() };
    assert_eq!(
        SendMail::OPTIONS.rate_limit,
        Some(RateLimit { starts: 100, per: Duration::from_secs(60) })
    );
    assert_eq!(m.rate_key().as_deref(), Some("provider:smtp"));
    assert_eq!(RebuildIndex::OPTIONS.concurrency, Some(1));
    assert_eq!(RebuildIndex {}.concurrency_key(), None, "the kind's name is the key");
}
