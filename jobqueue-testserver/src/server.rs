//! [`TestServer`]: the shared server, an external one or one this process started, and the
//! databases created on it.

use std::future::Future;
use std::path::Path;
use std::process::Child;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, OnceLock, PoisonError};
use std::time::{Duration, Instant};

use sqlx::{Connection as _, MySqlConnection};

use crate::discovery::*;
use crate::launch::*;
use crate::url::*;
use crate::{failure, io_failure, Result};

/// Environment variable naming an existing server to use instead of starting one.
pub(crate) const URL_VAR: &str = "JOBQUEUE_TEST_DATABASE_URL";

/// The fixed start of every database name this crate creates, to find them on a shared server.
pub(crate) const DATABASE_MARKER: &str = "jqtest";

/// A MariaDB/MySQL server for tests: an external one, or one this process started.
///
/// See the [crate documentation](crate) for how to use it and how it is cleaned up.
#[derive(Debug)]
pub struct TestServer {
    /// `mysql://root@127.0.0.1:PORT`, or the external URL as given.
    pub(crate) url: String,
    /// `None` for an external server.
    pub(crate) local: Option<LocalServer>,
}

impl TestServer {
    /// The server this process shares among its tests.
    ///
    /// `JOBQUEUE_TEST_DATABASE_URL` when it is set (used as is, never stopped); otherwise a
    /// server started from the `mariadbd` or `mysqld` binary on this machine, on first use,
    /// once per process. The first call waits until the server accepts connections (about a
    /// second or two); an error (such as no server binary) is returned to every call.
    ///
    /// [`stop`](Self::stop) and [`restart`](Self::restart) work on it too, but every test of
    /// the process sees the outage: use a private server from [`start`](Self::start) for that.
    pub fn shared() -> Result<&'static TestServer> {
        static SHARED: OnceLock<Result<TestServer>> = OnceLock::new();
        SHARED
            .get_or_init(|| match external_url() {
                Some(url) => Ok(TestServer { url, local: None }),
                None => TestServer::start(),
            })
            .as_ref()
            .map_err(|e| e.repeat("the shared test server could not be started"))
    }

    /// Starts a new private server: its own data directory in a temporary folder and its own
    /// free TCP port on 127.0.0.1. Returns when it answers queries.
    ///
    /// Meant for tests that stop and restart the server. Dropping the `TestServer` stops the
    /// server and deletes its folder. It ignores `JOBQUEUE_TEST_DATABASE_URL`: an external
    /// server cannot be stopped by a test.
    pub fn start() -> Result<TestServer> {
        let binary = locate_server_binary()?;
        TestServer::start_with(binary)
    }

    /// [`start`](Self::start) with a given server binary.
    pub fn start_with(binary: ServerBinary) -> Result<TestServer> {
        let began = Instant::now();
        let dir = tempfile::Builder::new()
            .prefix("jobqueue-test-")
            .tempdir()
            .map_err(io_failure(
                "cannot create a temporary folder for the test server",
            ))?;
        // The watchdog comes first, so that the folder goes away even if this process dies
        // while the server is being set up.
        let watchdog = Watchdog::spawn(dir.path())?;
        // From here on, `Drop` cleans up whatever step fails.
        let mut this = TestServer {
            url: String::new(),
            local: Some(LocalServer {
                binary,
                port: 0,
                dir,
                state: Mutex::new(ServerState {
                    server: None,
                    watchdog: Some(watchdog),
                }),
            }),
        };
        let server = this.local.as_mut().expect("set above");
        server.initialize()?;
        let mut attempt = 0;
        loop {
            attempt += 1;
            server.port = free_port()?;
            match server.launch() {
                Ok(()) => break,
                // Another process took the port between our probe and the server's bind.
                Err(Launch::PortTaken(_)) if attempt < PORT_ATTEMPTS => continue,
                Err(Launch::PortTaken(e) | Launch::Failed(e)) => return Err(e),
            }
        }
        tracing::debug!(
            port = server.port,
            dir = %server.dir.path().display(),
            elapsed_ms = began.elapsed().as_millis() as u64,
            "test server started"
        );
        this.url = format!("mysql://root@127.0.0.1:{}", server.port);
        Ok(this)
    }

    /// The server's URL, `mysql://root@127.0.0.1:PORT` for a server this process started (no
    /// database part); the external URL as given otherwise.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// The port a server this process started listens on (on 127.0.0.1); `None` for an
    /// external server.
    pub fn port(&self) -> Option<u16> {
        self.local.as_ref().map(|l| l.port)
    }

    /// The temporary folder of a server this process started (its data directory is `data`
    /// in it, its error log `error.log`); `None` for an external server.
    pub fn dir(&self) -> Option<&Path> {
        self.local.as_ref().map(|l| l.dir.path())
    }

    /// The process id of the server while it runs, if this process started it.
    pub fn server_pid(&self) -> Option<u32> {
        self.local
            .as_ref()
            .and_then(|l| l.lock().server.as_ref().map(Child::id))
    }

    /// Creates a new, empty database with a unique name and returns its URL.
    ///
    /// The name is `jqtest_{prefix}_{pid}_{counter}_{random}`, with every character outside
    /// `[a-z0-9_]` replaced by `_` and the prefix shortened so that the name fits MySQL's 64
    /// characters. The database uses `utf8mb4`.
    ///
    /// On a server this process started, the databases go away with the server. On an
    /// external server (`JOBQUEUE_TEST_DATABASE_URL`), they are left behind unless dropped
    /// with [`drop_database_blocking`](Self::drop_database_blocking) (they all start with
    /// `jqtest_`). `jobqueue::testing::TestDatabase` does both: a migrated database, dropped
    /// with its guard.
    pub async fn create_database(&self, prefix: &str) -> Result<String> {
        let name = unique_database_name(prefix);
        let mut conn = MySqlConnection::connect(&url_without_database(&self.url)).await?;
        sqlx::raw_sql(&format!("CREATE DATABASE `{name}` CHARACTER SET utf8mb4"))
            .execute(&mut conn)
            .await?;
        conn.close().await?;
        Ok(url_with_database(&self.url, &name))
    }

    /// Drops the database `name` (one [`create_database`](Self::create_database) made),
    /// blocking the calling thread until it is gone: for a guard's `Drop`, where nothing can
    /// be awaited. It runs on a connection and a runtime of its own, in a thread of its own,
    /// so it may be called from inside an async test. The statement waits at most 10 s for
    /// sessions that still use the database's tables in an open transaction.
    ///
    /// Only names with the `jqtest_` prefix of this crate's databases are dropped; any other
    /// name is an error, so that a mistake cannot drop a database of the application.
    pub fn drop_database_blocking(&self, name: &str) -> Result<()> {
        let ours = name.starts_with(DATABASE_MARKER)
            && name
                .chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_');
        if !ours {
            return Err(failure(format!(
                "refusing to drop the database {name:?}: only databases made by \
                 TestServer::create_database (named {DATABASE_MARKER}_...) are dropped"
            )));
        }
        block_on(drop_database(
            url_without_database(&self.url),
            name.to_owned(),
        ))
        .map_err(|e| failure(format!("cannot drop the test database `{name}`: {e}")))
    }

    /// Stops the server, keeping its data: `SIGTERM`, then `SIGKILL` if it has not exited
    /// after 30 seconds. Returns once the process has exited. Stopping a stopped server does
    /// nothing; an external server cannot be stopped (an error).
    pub fn stop(&self) -> Result<()> {
        let local = self.local_or_error("stop")?;
        let mut state = local.lock();
        stop_server(&mut state)
    }

    /// Starts the server again, on the same port and with the same data directory (stopping
    /// it first if it runs). Returns when it answers queries. An external server cannot be
    /// restarted (an error).
    pub fn restart(&self) -> Result<()> {
        let local = self.local_or_error("restart")?;
        local.lock_and(stop_server)?;
        local.launch().map_err(Launch::into_error)
    }

    pub(crate) fn local_or_error(&self, what: &str) -> Result<&LocalServer> {
        self.local.as_ref().ok_or_else(|| {
            failure(format!(
                "cannot {what} the test server at {URL_VAR}: only a server the tests started \
                 themselves can be stopped and restarted (use TestServer::start)"
            ))
        })
    }
}

impl Drop for TestServer {
    fn drop(&mut self) {
        if let Some(local) = &mut self.local {
            let state = local
                .state
                .get_mut()
                .unwrap_or_else(PoisonError::into_inner);
            let _ = stop_server(state);
            if let Some(watchdog) = state.watchdog.take() {
                watchdog.finish();
            }
        }
        // The temporary folder is deleted (if the watchdog has not already) when `dir` drops.
    }
}

/// `DROP DATABASE`, waiting at most 10 s for metadata locks and 30 s in all.
pub(crate) async fn drop_database(url: String, name: String) -> std::result::Result<(), String> {
    let attempt = async {
        let mut conn = MySqlConnection::connect(&url).await?;
        sqlx::query("SET SESSION lock_wait_timeout = 10")
            .execute(&mut conn)
            .await?;
        sqlx::query(&format!("DROP DATABASE IF EXISTS `{name}`"))
            .execute(&mut conn)
            .await?;
        conn.close().await
    };
    match tokio::time::timeout(Duration::from_secs(30), attempt).await {
        Ok(Ok(())) => Ok(()),
        Ok(Err(e)) => Err(e.to_string()),
        Err(_) => Err("no answer within 30s".to_owned()),
    }
}

/// Connects and runs a query: the server is ready when this works.
pub(crate) async fn probe(url: &str) -> std::result::Result<(), String> {
    let attempt = async {
        let mut conn = MySqlConnection::connect(url).await?;
        sqlx::query("SELECT 1").execute(&mut conn).await?;
        conn.close().await
    };
    match tokio::time::timeout(Duration::from_secs(5), attempt).await {
        Ok(Ok(())) => Ok(()),
        Ok(Err(e)) => Err(e.to_string()),
        Err(_) => Err("connecting timed out".to_owned()),
    }
}

/// Runs a future to completion on a runtime of its own, in a thread of its own: the
/// synchronous functions here are called from inside async tests, where blocking on the
/// test's own runtime would panic.
pub(crate) fn block_on<F>(future: F) -> std::result::Result<(), String>
where
    F: Future<Output = std::result::Result<(), String>> + Send,
{
    std::thread::scope(|scope| {
        scope
            .spawn(|| {
                tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .map_err(|e| format!("cannot build a runtime: {e}"))?
                    .block_on(future)
            })
            .join()
            .unwrap_or_else(|panic| std::panic::resume_unwind(panic))
    })
}

pub(crate) fn external_url() -> Option<String> {
    std::env::var(URL_VAR)
        .ok()
        .map(|url| url.trim().to_owned())
        .filter(|url| !url.is_empty())
}

/// `jqtest_{prefix}_{pid}_{counter}_{random}`, in `[a-z0-9_]`, at most 64 characters.
pub(crate) fn unique_database_name(prefix: &str) -> String {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let suffix = format!(
        "_{}_{}_{:08x}",
        std::process::id(),
        COUNTER.fetch_add(1, Ordering::Relaxed),
        rand::random::<u32>()
    );
    let mut head = String::from(DATABASE_MARKER);
    if !prefix.is_empty() {
        head.push('_');
        head.extend(prefix.chars().map(|c| match c.to_ascii_lowercase() {
            c @ ('a'..='z' | '0'..='9' | '_') => c,
            _ => '_',
        }));
    }
    head.truncate(64 - suffix.len());
    head + &suffix
}
