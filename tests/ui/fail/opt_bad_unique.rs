use jobqueue::job;

#[job(unique = "forever")]
async fn unknown_policy() {}

#[job(unique_for = "0s")]
async fn empty_period() {}

#[job(unique = "while_active", unique_for = "1h")]
async fn both() {}

fn main() {}
