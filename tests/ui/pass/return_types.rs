use jobqueue::{job, JobError};

#[job]
async fn returns_unit(n: u32) {
    let _ = n;
}

#[job]
async fn returns_io_error(path: String) -> Result<(), std::io::Error> {
    std::fs::metadata(path).map(drop)
}

#[job]
async fn returns_string(reason: String) -> Result<(), String> {
    Err(reason)
}

#[job]
async fn returns_job_error() -> Result<(), JobError> {
    Err(JobError::permanent("never works"))
}

#[job]
async fn returns_anyhow() -> anyhow::Result<()> {
    Ok(())
}

fn main() {
    let _ = (ReturnsUnit { n: 1 }, ReturnsIoError { path: "/".into() });
    let _ = (
        ReturnsString { reason: "x".into() },
        ReturnsJobError {},
        ReturnsAnyhow {},
    );
}
