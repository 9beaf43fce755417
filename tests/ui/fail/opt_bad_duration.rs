use jobqueue::job;

#[job(lease = "30 seconds")]
async fn unit_spelled_out() {}

#[job(timeout = 600)]
async fn not_a_string() {}

#[job(lease = "500ms")]
async fn lease_too_short() {}

#[job(timeout = "30s1m")]
async fn smallest_unit_first() {}

fn main() {}
