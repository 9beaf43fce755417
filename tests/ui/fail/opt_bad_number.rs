use jobqueue::job;

#[job(max_attempts = 0)]
async fn no_attempts() {}

#[job(max_attempts = "5")]
async fn quoted() {}

#[job(priority = 40000)]
async fn too_high() {}

#[job(priority = 1.5)]
async fn fractional() {}

fn main() {}
