use jobqueue::job;

#[job(concurrency = 0)]
async fn zero() {}

#[job(concurrency = 1001)]
async fn too_many() {}

#[job(concurrency_key = "account:{account}")]
async fn key_without_limit(account: u64) {}

#[job(rate_limit = "100 per minute")]
async fn no_slash() {}

#[job(rate_limit = "0/1s")]
async fn no_starts() {}

#[job(rate_limit = "5/soon")]
async fn bad_window() {}

#[job(rate_limit = "5/1s", rate_key = "{nope}")]
async fn unknown_argument(provider: String) {}

fn main() {}
