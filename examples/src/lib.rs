//! Runnable examples of jobqueue (the `*.rs` files beside this crate; the README lists their
//! commands), and the little they share: logging, connecting to `DATABASE_URL` or a
//! throwaway server, waiting for jobs to finish, and a minimal HTTP request.

use std::time::Duration;

use jobqueue::admin::{JobFilter, JobRecord};
use jobqueue::testing::TestDatabase;
use jobqueue::{Backend, JobStatus, Queue};

/// Logs to standard error at the level `RUST_LOG` asks for, else at `default_filter` (an
/// `EnvFilter` directive such as `"warn"` or `"warn,jobqueue_runtime=info"`).
pub fn init_logging(default_filter: &str) {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| default_filter.into()),
        )
        .init();
}

/// The database of the throwaway server an example starts when `DATABASE_URL` is unset:
/// PostgreSQL when `JOBQUEUE_EXAMPLES_BACKEND` is `postgres` (`scripts/quickstart --postgres`
/// sets it), else MariaDB/MySQL.
pub fn throwaway_backend() -> Backend {
    match std::env::var("JOBQUEUE_EXAMPLES_BACKEND").as_deref() {
        Ok("postgres" | "postgresql") => Backend::Postgres,
        _ => Backend::MySql,
    }
}

/// `DATABASE_URL`, or, when it is unset, the URL of a new database on a throwaway server
/// started from the server binaries on PATH (see [`throwaway_backend`]; it goes away with
/// this process).
pub async fn database_url(name: &str) -> anyhow::Result<String> {
    if let Ok(url) = std::env::var("DATABASE_URL") {
        return Ok(url);
    }
    let backend = throwaway_backend();
    eprintln!("DATABASE_URL is not set: starting a throwaway {backend} server...");
    Ok(TestDatabase::empty_on(backend, name).await?.keep())
}

/// A migrated queue on `DATABASE_URL` (a `mysql://` or `postgres://` URL), or on a new
/// database of a throwaway server (see [`throwaway_backend`]).
pub async fn connect(name: &str) -> anyhow::Result<Queue> {
    if let Ok(url) = std::env::var("DATABASE_URL") {
        let queue = Queue::connect(&url).await?;
        queue.migrate().await?;
        return Ok(queue);
    }
    let backend = throwaway_backend();
    eprintln!("DATABASE_URL is not set: starting a throwaway {backend} server...");
    let db = TestDatabase::new_on(backend, name).await?;
    let queue = db.queue().clone();
    // The database stays for the life of the example's process (and its server).
    db.keep();
    Ok(queue)
}

/// Waits until job `id` is done, failed or cancelled (polling the table).
pub async fn wait_until_finished(queue: &Queue, id: u64) -> anyhow::Result<JobRecord> {
    poll_job(queue, id, Duration::from_millis(100), |job| {
        matches!(
            job.status,
            JobStatus::Done | JobStatus::Failed | JobStatus::Cancelled
        )
    })
    .await
}

/// Waits until job `id` has `status` (polling the table).
pub async fn wait_for_status(
    queue: &Queue,
    id: u64,
    status: JobStatus,
) -> anyhow::Result<JobRecord> {
    poll_job(queue, id, Duration::from_millis(50), |job| {
        job.status == status
    })
    .await
}

/// Waits until `count` jobs are done (all queues; polling the table).
pub async fn wait_until_done(queue: &Queue, count: u64) -> anyhow::Result<()> {
    let done = JobFilter::default().status(JobStatus::Done);
    loop {
        if queue.count(&done).await? >= count {
            return Ok(());
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Reads job `id` every `every` until `ready` accepts it.
async fn poll_job(
    queue: &Queue,
    id: u64,
    every: Duration,
    ready: impl Fn(&JobRecord) -> bool,
) -> anyhow::Result<JobRecord> {
    loop {
        let job = queue
            .job(id)
            .await?
            .ok_or_else(|| anyhow::anyhow!("job {id} vanished"))?;
        if ready(&job) {
            return Ok(job);
        }
        tokio::time::sleep(every).await;
    }
}

/// A minimal HTTP/1.1 POST of a JSON `body` to `path`, to keep the examples free of an HTTP
/// client crate: the response's status line (`"201 Created"`) and its body.
pub async fn post_json(
    addr: std::net::SocketAddr,
    path: &str,
    body: &str,
) -> anyhow::Result<(String, String)> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut stream = tokio::net::TcpStream::connect(addr).await?;
    let request = format!(
        "POST {path} HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    stream.write_all(request.as_bytes()).await?;
    let mut response = String::new();
    stream.read_to_string(&mut response).await?;
    let status = response
        .lines()
        .next()
        .unwrap_or_default()
        .trim_start_matches("HTTP/1.1 ")
        .to_owned();
    let body = response
        .split("\r\n\r\n")
        .nth(1)
        .unwrap_or_default()
        .to_owned();
    Ok((status, body))
}
