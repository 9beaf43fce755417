//! Runnable examples of jobqueue (the `*.rs` files beside this crate; the README lists their
//! commands), and the little they share: connecting to `DATABASE_URL` or a throwaway server,
//! and waiting for a job to finish.

use std::time::Duration;

use jobqueue::{JobRecord, JobStatus, Queue};

/// `DATABASE_URL`, or, when it is unset, the URL of a new database on a throwaway server
/// started from the MariaDB/MySQL binaries on PATH (it goes away with this process).
pub async fn database_url(name: &str) -> anyhow::Result<String> {
    if let Ok(url) = std::env::var("DATABASE_URL") {
        return Ok(url);
    }
    eprintln!("DATABASE_URL is not set: starting a throwaway database server...");
    let server = jobqueue::testing::TestServer::shared()?;
    Ok(server.create_database(name).await?)
}

/// A migrated queue on [`database_url`].
pub async fn connect(name: &str) -> anyhow::Result<Queue> {
    let queue = Queue::connect(&database_url(name).await?).await?;
    queue.migrate().await?;
    Ok(queue)
}

/// Waits until job `id` is done, failed or cancelled (polling the table).
pub async fn wait_until_finished(queue: &Queue, id: u64) -> anyhow::Result<JobRecord> {
    loop {
        let job = queue
            .job(id)
            .await?
            .ok_or_else(|| anyhow::anyhow!("job {id} vanished"))?;
        if matches!(
            job.status,
            JobStatus::Done | JobStatus::Failed | JobStatus::Cancelled
        ) {
            return Ok(job);
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Waits until job `id` has `status` (polling the table).
pub async fn wait_for_status(
    queue: &Queue,
    id: u64,
    status: JobStatus,
) -> anyhow::Result<JobRecord> {
    loop {
        let job = queue
            .job(id)
            .await?
            .ok_or_else(|| anyhow::anyhow!("job {id} vanished"))?;
        if job.status == status {
            return Ok(job);
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}
