use jobqueue::{job, JobContext};

#[job]
async fn twice(first: JobContext, id: u64, second: jobqueue::JobContext) {
    let _ = (first, id, second);
}

fn main() {}
