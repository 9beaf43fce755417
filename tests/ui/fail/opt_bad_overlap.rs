use jobqueue::job;

#[job(overlap = true)]
async fn not_periodic() {}

#[job(cron = "0 */5 * * * *", overlap = "yes")]
async fn not_a_bool() {}

fn main() {}
