use jobqueue::job;

#[job(cron = "every 5 minutes")]
async fn words() {}

#[job(cron = "0 61 * * * *")]
async fn minute_out_of_range() {}

fn main() {}
