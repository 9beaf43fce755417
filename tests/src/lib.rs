//! Shared helpers of the integration tests in `tests/tests/`.
//!
//! Every test gets its own database on the shared test server (see
//! `jobqueue::testing::TestServer`), so tests run in parallel without seeing each other's
//! jobs.

use std::future::Future;
use std::io::Write;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use jobqueue::testing::TestServer;
use jobqueue::Queue;

/// The test server of this process (started on first use).
pub fn server() -> &'static TestServer {
    TestServer::shared().unwrap_or_else(|e| panic!("{e}"))
}

/// A URL of a new, empty database on the shared server.
pub async fn fresh_database(prefix: &str) -> String {
    server()
        .create_database(prefix)
        .await
        .unwrap_or_else(|e| panic!("cannot create a test database: {e}"))
}

/// A queue on a new database, migrated.
pub async fn fresh_queue(prefix: &str) -> Queue {
    let url = fresh_database(prefix).await;
    let queue = Queue::connect(&url).await.expect("connect");
    queue.migrate().await.expect("migrate");
    queue
}

/// Logs to the test's output (shown on failure), once per process.
pub fn init_tracing() {
    let _ = tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| "warn,jobqueue_runtime=info".into()),
        )
        .with_test_writer()
        .try_init();
}

/// Polls `check` until it returns `Some`, or panics after `timeout` naming `what`. For
/// waiting on database state, which has no push notification; each poll is a query.
pub async fn wait_for<T, F, Fut>(what: &str, timeout: Duration, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let start = Instant::now();
    loop {
        if let Some(v) = check().await {
            return v;
        }
        if start.elapsed() > timeout {
            panic!("timed out after {timeout:?} waiting for {what}");
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
}

/// Count of jobs in `status` (all queues).
pub async fn count_status(queue: &Queue, status: &str) -> i64 {
    sqlx::query_scalar("SELECT COUNT(*) FROM job_queue WHERE status = ?")
        .bind(status)
        .fetch_one(queue.pool())
        .await
        .expect("count")
}

/// Log lines captured from `tracing`, for tests that assert what was logged.
#[derive(Clone, Default, Debug)]
pub struct LogCapture {
    lines: Arc<Mutex<Vec<u8>>>,
}

impl LogCapture {
    /// Everything captured so far.
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.lines.lock().unwrap()).into_owned()
    }

    /// Captured lines that contain every one of `parts`.
    pub fn lines_with(&self, parts: &[&str]) -> Vec<String> {
        self.text()
            .lines()
            .filter(|l| parts.iter().all(|p| l.contains(p)))
            .map(str::to_owned)
            .collect()
    }

    /// Installs a subscriber capturing events at `filter` for the current thread; use it in
    /// a `current_thread` test so that every task logs through it.
    pub fn install(filter: &str) -> (LogCapture, tracing::subscriber::DefaultGuard) {
        let capture = LogCapture::default();
        let writer = capture.clone();
        let subscriber = tracing_subscriber::fmt()
            .with_env_filter(tracing_subscriber::EnvFilter::new(filter))
            .with_ansi(false)
            .with_writer(move || CaptureWriter(writer.lines.clone()))
            .finish();
        let guard = tracing::subscriber::set_default(subscriber);
        (capture, guard)
    }
}

struct CaptureWriter(Arc<Mutex<Vec<u8>>>);

impl Write for CaptureWriter {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}
