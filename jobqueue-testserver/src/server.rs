//! [`TestServer`]: the shared server, an external one or one this process started, and the
//! databases created on it.

use std::future::Future;
use std::path::Path;
use std::process::Child;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, OnceLock, PoisonError};
use std::time::{Duration, Instant};

use sqlx::{Connection as _, MySqlConnection, PgConnection};

use crate::discovery::*;
use crate::launch::*;
use crate::url::*;
use crate::{failure, io_failure, Result};

/// Environment variable naming an existing server to use instead of starting one.
pub(crate) const URL_VAR: &str = "JOBQUEUE_TEST_DATABASE_URL";

/// Environment variable naming an existing PostgreSQL server to use instead of starting one.
pub(crate) const POSTGRES_URL_VAR: &str = "JOBQUEUE_TEST_POSTGRES_URL";

/// The database PostgreSQL statements on the server (`CREATE DATABASE`) connect to: every
/// cluster has it, and `template1`, the template of new databases, must stay unused.
pub(crate) const POSTGRES_MAINTENANCE_DATABASE: &str = "postgres";

/// The longest database name: MySQL's 64 characters, PostgreSQL's 63 bytes.
pub(crate) fn max_database_name(backend: Backend) -> usize {
    match backend {
        Backend::MySql => 64,
        Backend::Postgres => 63,
    }
}

/// The fixed start of every database name this crate creates, to find them on a shared server.
pub(crate) const DATABASE_MARKER: &str = "jqtest";

/// A MariaDB/MySQL or PostgreSQL server for tests: an external one, or one this process
/// started.
///
/// See the [crate documentation](crate) for how to use it and how it is cleaned up.
#[derive(Debug)]
pub struct TestServer {
    /// `mysql://root@127.0.0.1:PORT` or `postgres://postgres@127.0.0.1:PORT/postgres`, or the
    /// external URL as given.
    pub(crate) url: String,
    /// Which database it is.
    pub(crate) backend: Backend,
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
            .get_or_init(|| match external_url(URL_VAR) {
                Some(url) => Ok(TestServer {
                    url,
                    backend: Backend::MySql,
                    local: None,
                }),
                None => TestServer::start(),
            })
            .as_ref()
            .map_err(|e| e.repeat("the shared test server could not be started"))
    }

    /// The PostgreSQL server this process shares among its tests: [`shared`](Self::shared)
    /// for PostgreSQL.
    ///
    /// `JOBQUEUE_TEST_POSTGRES_URL` when it is set (`postgres://user:pass@host:port/postgres`;
    /// used as is, never stopped); otherwise a server started from the `initdb` and `postgres`
    /// binaries on this machine ([`postgres_search_dirs`]), on first use, once per process. The
    /// first call waits until the server accepts connections (about a second); an error (such
    /// as no PostgreSQL binaries) is returned to every call.
    pub fn shared_postgres() -> Result<&'static TestServer> {
        static SHARED: OnceLock<Result<TestServer>> = OnceLock::new();
        SHARED
            .get_or_init(|| match external_url(POSTGRES_URL_VAR) {
                Some(url) => TestServer::external_postgres(url),
                None => TestServer::start_postgres(),
            })
            .as_ref()
            .map_err(|e| e.repeat("the shared PostgreSQL test server could not be started"))
    }

    /// An external PostgreSQL server at `url`, which must be a `postgres://` or
    /// `postgresql://` URL.
    pub(crate) fn external_postgres(url: String) -> Result<TestServer> {
        if !(url.starts_with("postgres://") || url.starts_with("postgresql://")) {
            return Err(failure(format!(
                "{POSTGRES_URL_VAR} must be a postgres:// URL, such as \
                 postgres://postgres@127.0.0.1:5432/postgres, not {url:?}"
            )));
        }
        Ok(TestServer {
            url,
            backend: Backend::Postgres,
            local: None,
        })
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

    /// Starts a new private PostgreSQL server, as [`start`](Self::start) does a MariaDB/MySQL
    /// one: from the `initdb` and `postgres` binaries found in [`postgres_search_dirs`], with
    /// its own folder and port, and its socket in that folder. It ignores
    /// `JOBQUEUE_TEST_POSTGRES_URL`.
    ///
    /// Its cluster's superuser is `postgres`, without a password; it runs without `fsync`,
    /// with `synchronous_commit` and `full_page_writes` off (nothing a test writes has to
    /// survive a crash of the machine) and allows 300 connections. When the tests run as
    /// root, it runs as the account `postgres` (else `nobody`), since PostgreSQL refuses root.
    pub fn start_postgres() -> Result<TestServer> {
        let binary = find_postgres_binary(&postgres_search_dirs())?;
        TestServer::start_with(binary)
    }

    /// [`start`](Self::start) with a given server binary (for PostgreSQL, its `postgres`, with
    /// `initdb` beside it).
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
        let flavor = binary.flavor;
        let watchdog = Watchdog::spawn(dir.path(), flavor.stop_signal())?;
        // From here on, `Drop` cleans up whatever step fails.
        let mut this = TestServer {
            url: String::new(),
            backend: flavor.backend(),
            local: Some(LocalServer {
                binary,
                port: 0,
                dir,
                state: Mutex::new(ServerState {
                    server: None,
                    stop_signal: flavor.stop_signal(),
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
        this.url = flavor.local_url(server.port);
        Ok(this)
    }

    /// The server's URL: for a server this process started, `mysql://root@127.0.0.1:PORT` (no
    /// database part) or `postgres://postgres@127.0.0.1:PORT/postgres`; the external URL as
    /// given otherwise.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// Whether it is a MariaDB/MySQL or a PostgreSQL server.
    pub fn backend(&self) -> Backend {
        self.backend
    }

    /// The port a server this process started listens on (on 127.0.0.1); `None` for an
    /// external server.
    pub fn port(&self) -> Option<u16> {
        self.local.as_ref().map(|l| l.port)
    }

    /// The temporary folder of a server this process started (its data directory is `data`
    /// in it, its error log `error.log`, a PostgreSQL server's socket `.s.PGSQL.PORT`); `None`
    /// for an external server.
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
    /// characters (PostgreSQL's 63). The database uses `utf8mb4` (PostgreSQL: `UTF8`, made
    /// from `template1` over a connection to the `postgres` database).
    ///
    /// On a server this process started, the databases go away with the server. On an
    /// external server (`JOBQUEUE_TEST_DATABASE_URL`), they are left behind unless dropped
    /// with [`drop_database_blocking`](Self::drop_database_blocking) (they all start with
    /// `jqtest_`). `jobqueue::testing::TestDatabase` does both: a migrated database, dropped
    /// with its guard.
    pub async fn create_database(&self, prefix: &str) -> Result<String> {
        let name = unique_database_name(self.backend, prefix);
        let server_url = server_url(self.backend, &self.url);
        match self.backend {
            Backend::MySql => {
                let mut conn = MySqlConnection::connect(&server_url).await?;
                sqlx::raw_sql(&format!("CREATE DATABASE `{name}` CHARACTER SET utf8mb4"))
                    .execute(&mut conn)
                    .await?;
                conn.close().await?;
            }
            Backend::Postgres => {
                let mut conn = PgConnection::connect(&server_url).await?;
                sqlx::raw_sql(&format!("CREATE DATABASE \"{name}\" ENCODING 'UTF8'"))
                    .execute(&mut conn)
                    .await?;
                conn.close().await?;
            }
        }
        Ok(url_with_database(&self.url, &name))
    }

    /// Drops the database `name` (one [`create_database`](Self::create_database) made),
    /// blocking the calling thread until it is gone: for a guard's `Drop`, where nothing can
    /// be awaited. It runs on a connection and a runtime of its own, in a thread of its own,
    /// so it may be called from inside an async test. The statement waits at most 10 s for
    /// sessions that still use the database's tables in an open transaction. On PostgreSQL,
    /// `DROP DATABASE ... WITH (FORCE)` ends the sessions still connected to it.
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
            self.backend,
            server_url(self.backend, &self.url),
            name.to_owned(),
        ))
        .map_err(|e| failure(format!("cannot drop the test database `{name}`: {e}")))
    }

    /// Stops the server, keeping its data: `SIGTERM` (PostgreSQL: `SIGINT`, its fast
    /// shutdown, which ends the sessions of connected clients), then `SIGKILL` if it has not
    /// exited after 30 seconds. Returns once the process has exited. Stopping a stopped server does
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
        let (var, start) = match self.backend {
            Backend::MySql => (URL_VAR, "TestServer::start"),
            Backend::Postgres => (POSTGRES_URL_VAR, "TestServer::start_postgres"),
        };
        self.local.as_ref().ok_or_else(|| {
            failure(format!(
                "cannot {what} the test server at {var}: only a server the tests started \
                 themselves can be stopped and restarted (use {start})"
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

/// `url` for statements on the server rather than in a database: MySQL's without a database
/// part, PostgreSQL's naming the `postgres` database (a connection needs one).
pub(crate) fn server_url(backend: Backend, url: &str) -> String {
    match backend {
        Backend::MySql => url_without_database(url),
        Backend::Postgres => url_with_database(url, POSTGRES_MAINTENANCE_DATABASE),
    }
}

/// `DROP DATABASE`, waiting at most 10 s for locks and 30 s in all; on PostgreSQL `WITH
/// (FORCE)`, ending the sessions connected to it.
pub(crate) async fn drop_database(
    backend: Backend,
    url: String,
    name: String,
) -> std::result::Result<(), String> {
    let attempt = async {
        match backend {
            Backend::MySql => {
                let mut conn = MySqlConnection::connect(&url).await?;
                sqlx::query("SET SESSION lock_wait_timeout = 10")
                    .execute(&mut conn)
                    .await?;
                sqlx::query(&format!("DROP DATABASE IF EXISTS `{name}`"))
                    .execute(&mut conn)
                    .await?;
                conn.close().await
            }
            Backend::Postgres => {
                let mut conn = PgConnection::connect(&url).await?;
                sqlx::query("SET lock_timeout = '10s'")
                    .execute(&mut conn)
                    .await?;
                sqlx::query(&format!("DROP DATABASE IF EXISTS \"{name}\" WITH (FORCE)"))
                    .execute(&mut conn)
                    .await?;
                conn.close().await
            }
        }
    };
    match tokio::time::timeout(Duration::from_secs(30), attempt).await {
        Ok(Ok(())) => Ok(()),
        Ok(Err(e)) => Err(e.to_string()),
        Err(_) => Err("no answer within 30s".to_owned()),
    }
}

/// Connects and runs a query: the server is ready when this works.
pub(crate) async fn probe(backend: Backend, url: &str) -> std::result::Result<(), String> {
    let attempt = async {
        match backend {
            Backend::MySql => {
                let mut conn = MySqlConnection::connect(url).await?;
                sqlx::query("SELECT 1").execute(&mut conn).await?;
                conn.close().await
            }
            Backend::Postgres => {
                let mut conn = PgConnection::connect(url).await?;
                sqlx::query("SELECT 1").execute(&mut conn).await?;
                conn.close().await
            }
        }
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

/// The URL the environment variable `var` holds, if it is set and not blank.
pub(crate) fn external_url(var: &str) -> Option<String> {
    std::env::var(var)
        .ok()
        .map(|url| url.trim().to_owned())
        .filter(|url| !url.is_empty())
}

/// `jqtest_{prefix}_{pid}_{counter}_{random}`, in `[a-z0-9_]`, at most as long as `backend`
/// allows ([`max_database_name`]).
pub(crate) fn unique_database_name(backend: Backend, prefix: &str) -> String {
    let max = max_database_name(backend);
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
    head.truncate(max - suffix.len());
    head + &suffix
}
