use jobqueue::job;

#[job(queue = "exports; drop table")]
async fn bad_character() {}

#[job(queue = "")]
async fn empty() {}

fn main() {}
