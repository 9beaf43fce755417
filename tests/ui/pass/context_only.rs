use jobqueue::{job, JobContext, JobError};

#[job(queue = "maintenance")]
async fn ping(ctx: JobContext) -> Result<(), JobError> {
    if ctx.is_cancelled() {
        return Err(JobError::permanent("cancelled before it started"));
    }
    Ok(())
}

fn main() {
    let _job = Ping {};
    let _ = ping(JobContext::detached(1, "ping"));
}
