use jobqueue::job;

#[job(backoff = "exponential(1s)")]
async fn missing_max() {}

#[job(backoff = "linear(1m, 10s)")]
async fn max_below_step() {}

#[job(backoff = "fibonacci(1s, 1h)")]
async fn unknown_kind() {}

fn main() {}
