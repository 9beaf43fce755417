//! A throwaway MariaDB/MySQL server for tests and examples.
//!
//! Tests of code that uses a database need a real server. [`TestServer::shared`] gives every
//! test of a process the same one:
//!
//! * when `JOBQUEUE_TEST_DATABASE_URL` is set (`mysql://user:pass@host:port`), that server,
//!   used as it is and never stopped. A database in the URL (`mysql://root@host:3306/test`)
//!   is neither needed nor used: it need not exist, and each test gets a database of its own;
//! * otherwise a server this process starts itself, from the `mariadbd` (preferred) or
//!   `mysqld` binary found on `PATH` or in `/usr/sbin`, `/usr/local/sbin` or
//!   `/usr/local/mysql/bin`, with its own data directory in a temporary folder and its own
//!   TCP port on 127.0.0.1. It is started once, on first use, and goes away with the process
//!   that started it, however that process ends (see below).
//!
//! Each test then takes a database of its own with [`TestServer::create_database`], so that
//! tests run in parallel without seeing each other's rows. Tests that stop and restart the
//! server start a private one with [`TestServer::start`], so that they disturb no other test.
//!
//! Users of `jobqueue` reach this crate as `jobqueue::testing` (the `testing` feature).
//!
//! ```no_run
//! use jobqueue_testserver::TestServer;
//!
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! // A database of its own for this test, on the server all tests of the process share.
//! let url = TestServer::shared()?.create_database("enqueue_twice").await?;
//! let pool = sqlx::MySqlPool::connect(&url).await?;
//!
//! // A private server, to see what the code under test does while the server is down.
//! let server = TestServer::start()?;
//! let url = server.create_database("outage").await?;
//! server.stop()?;
//! // ... the code under test fails and retries ...
//! server.restart()?;
//! # Ok(()) }
//! ```
//!
//! # A missing server
//!
//! When no server binary can be found and `JOBQUEUE_TEST_DATABASE_URL` is not set, both
//! constructors return [`Error::NotInstalled`], saying how to install one
//! (`apt-get install mariadb-server`, `brew install mariadb`) or how to point the tests at an
//! existing server. Tests fail with it: they are never skipped silently.
//!
//! # Cleanup
//!
//! The shared server lives in a `static`, which is never dropped, and a test process may end
//! without running destructors at all (`std::process::exit`, a panic that aborts, `SIGKILL`).
//! So each server this crate starts comes with a small watchdog process (`sh`) that holds the
//! reading end of a pipe whose writing end only the starting process has. When that process is
//! gone, however it ended, the pipe closes; the watchdog then stops the server (`SIGTERM`,
//! `SIGKILL` after 30 seconds) and deletes its temporary folder. A private server is also
//! stopped and deleted when the [`TestServer`] is dropped.
//!
//! Databases created on an external server (`JOBQUEUE_TEST_DATABASE_URL`) are left there
//! unless dropped ([`TestServer::drop_database_blocking`]; `jobqueue::testing::TestDatabase`
//! drops its database when it is dropped). Their names all start with `jqtest_`, so that
//! they are easy to find and drop.
//!
//! # Settings
//!
//! * `JOBQUEUE_TEST_DATABASE_URL`: use this server instead of starting one.
//! * `JOBQUEUE_TEST_SERVER_BINARY`: the server binary to start (for example a `mysqld` when a
//!   `mariadbd` is installed as well), instead of searching for one.
//! * `JOBQUEUE_TEST_SERVER_ARGS`: more options for the servers this crate starts, separated
//!   by spaces (for example `--innodb-lock-wait-timeout=5`); they come last and so win over
//!   the defaults.

use std::ffi::{OsStr, OsString};
use std::fmt::Write as _;
use std::fs::File;
use std::future::Future;
use std::io::{Read as _, Seek as _, SeekFrom, Write as _};
use std::net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard, OnceLock, PoisonError};
use std::time::{Duration, Instant};

use sqlx::{Connection as _, MySqlConnection};

mod error;

pub use error::{Error, Result};

/// Environment variable naming an existing server to use instead of starting one.
const URL_VAR: &str = "JOBQUEUE_TEST_DATABASE_URL";
/// Environment variable naming the server binary to start.
const BINARY_VAR: &str = "JOBQUEUE_TEST_SERVER_BINARY";
/// Environment variable with extra server options, separated by spaces.
const ARGS_VAR: &str = "JOBQUEUE_TEST_SERVER_ARGS";

/// Folders searched for a server binary after those on `PATH`.
const SERVER_DIRS: &[&str] = &["/usr/sbin", "/usr/local/sbin", "/usr/local/mysql/bin"];
/// Folders searched for `mariadb-install-db` after the server's own and those on `PATH`.
const INSTALL_DB_DIRS: &[&str] = &["/usr/bin", "/usr/local/bin", "/usr/local/mysql/scripts"];

/// How long a server may take to accept connections after it was launched.
const READY_TIMEOUT: Duration = Duration::from_secs(60);
/// How long a server may take to shut down after `SIGTERM` before it gets `SIGKILL`.
const STOP_TIMEOUT: Duration = Duration::from_secs(30);
/// How often readiness and shutdown are polled.
const POLL_INTERVAL: Duration = Duration::from_millis(25);
/// How many ports to try when the one picked was taken before the server could bind it.
const PORT_ATTEMPTS: usize = 5;
/// The fixed start of every database name this crate creates, to find them on a shared server.
const DATABASE_MARKER: &str = "jqtest";

/// The watchdog. Its standard input is a pipe from the process that started the server;
/// that process writes `pid N` when a server runs as process N and `none` when it was
/// stopped. End of input means that process is gone: the watchdog stops the server it was
/// last told about and deletes the folder (`$1`).
const WATCHDOG_SCRIPT: &str = r#"
trap '' INT HUP
dir=$1
pid=
# Whether process $1 still runs. An exited server whose parent is gone may stay a zombie for
# a while (when nothing reaps orphans quickly), and `kill -0` succeeds on zombies.
running() {
  kill -0 "$1" 2>/dev/null || return 1
  if [ -r "/proc/$1/stat" ]; then
    read -r stat < "/proc/$1/stat" || return 1
    case ${stat##*) } in Z*|X*) return 1 ;; esac
  fi
  return 0
}
while read -r cmd arg; do
  case $cmd in
    pid) pid=$arg ;;
    none) pid= ;;
  esac
done
if [ -n "$pid" ] && running "$pid"; then
  kill -TERM "$pid" 2>/dev/null
  n=0
  while running "$pid" && [ "$n" -lt 350 ]; do
    n=$((n + 1))
    if [ "$n" -eq 300 ]; then kill -KILL "$pid" 2>/dev/null; fi
    sleep 0.1
  done
fi
rm -rf "$dir"
"#;

/// A MariaDB/MySQL server for tests: an external one, or one this process started.
///
/// See the [crate documentation](crate) for how to use it and how it is cleaned up.
#[derive(Debug)]
pub struct TestServer {
    /// `mysql://root@127.0.0.1:PORT`, or the external URL as given.
    url: String,
    /// `None` for an external server.
    local: Option<LocalServer>,
}

/// A server process this process started, with everything it needs to stop and restart it.
#[derive(Debug)]
struct LocalServer {
    binary: ServerBinary,
    /// The port it listens on, on 127.0.0.1; the same across restarts.
    port: u16,
    /// Data directory, socket, pid file and logs; deleted on drop.
    dir: tempfile::TempDir,
    state: Mutex<ServerState>,
}

/// The processes of a [`LocalServer`] (behind its mutex, so that `stop` can take `&self`).
#[derive(Debug)]
struct ServerState {
    /// The server process, while it runs.
    server: Option<Child>,
    /// The watchdog that stops the server and deletes the folder when this process is gone.
    watchdog: Option<Watchdog>,
}

#[derive(Debug)]
struct Watchdog {
    child: Child,
    /// The writing end of the watchdog's input: closing it (even by dying) tells it to clean up.
    input: ChildStdin,
}

impl Watchdog {
    fn spawn(dir: &Path) -> Result<Watchdog> {
        let mut command = Command::new("sh");
        command
            .arg("-c")
            .arg(WATCHDOG_SCRIPT)
            .arg("jobqueue-test-server-watchdog")
            .arg(dir)
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        detach_from_terminal(&mut command);
        let mut child = command.spawn().map_err(|e| {
            failure(format!(
                "cannot run `sh` for the test server's watchdog: {e}"
            ))
        })?;
        let input = child.stdin.take().expect("stdin was piped");
        Ok(Watchdog { child, input })
    }

    /// Tells the watchdog which server process to stop (`Some`) or that none runs (`None`).
    fn watch(&mut self, pid: Option<u32>) {
        let line = match pid {
            Some(pid) => format!("pid {pid}\n"),
            None => "none\n".to_owned(),
        };
        // A watchdog that is gone cannot be told anything; the server still works, and
        // `Drop` stops it in an orderly exit.
        let _ = self
            .input
            .write_all(line.as_bytes())
            .and_then(|()| self.input.flush());
    }

    /// Closes its input, so that it deletes the folder, and waits until it has.
    fn finish(self) {
        let Watchdog { mut child, input } = self;
        drop(input);
        let _ = child.wait();
    }
}

/// Puts a child in a process group of its own, so that Ctrl-C in the terminal stops the
/// test process alone and the watchdog is left to clean up after it.
fn detach_from_terminal(command: &mut Command) {
    #[cfg(unix)]
    {
        use std::os::unix::process::CommandExt as _;
        command.process_group(0);
    }
    #[cfg(not(unix))]
    let _ = command;
}

/// Which server a binary is: they are initialised differently.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Flavor {
    /// `mariadbd`, or a `mysqld` that says `MariaDB` in its `--version`.
    MariaDb,
    /// MySQL's `mysqld`.
    MySql,
}

/// A server binary found on this machine.
#[derive(Debug, Clone)]
pub struct ServerBinary {
    /// Its path.
    pub path: PathBuf,
    /// Whether it is MariaDB or MySQL.
    pub flavor: Flavor,
}

/// The folders searched for a server binary: those on `PATH`, then the usual places servers
/// are installed that are often not on a user's `PATH`.
pub fn server_search_dirs() -> Vec<PathBuf> {
    let mut dirs: Vec<PathBuf> = std::env::var_os("PATH")
        .map(|path| std::env::split_paths(&path).collect())
        .unwrap_or_default();
    dirs.extend(SERVER_DIRS.iter().map(PathBuf::from));
    dirs
}

/// Finds a server binary in `dirs`: the first `mariadbd` in any of them, else the first
/// `mysqld`. When there is none, [`Error::NotInstalled`] says how to install one.
pub fn find_server_binary(dirs: &[PathBuf]) -> Result<ServerBinary> {
    for name in ["mariadbd", "mysqld"] {
        if let Some(path) = dirs
            .iter()
            .map(|dir| dir.join(name))
            .find(|p| is_executable(p))
        {
            return Ok(ServerBinary {
                flavor: flavor_of(&path, name),
                path,
            });
        }
    }
    let searched = dirs
        .iter()
        .map(|d| d.display().to_string())
        .collect::<Vec<_>>()
        .join(":");
    Err(Error::NotInstalled(format!(
        "no MariaDB or MySQL server binary (`mariadbd` or `mysqld`) found in {searched}. \
         The tests need one to start a throwaway server of their own. Install one:\n\
         \x20 Debian/Ubuntu: sudo apt-get install mariadb-server\n\
         \x20 macOS:         brew install mariadb\n\
         or use an existing server (the tests create databases named jqtest_* on it):\n\
         \x20 export {URL_VAR}=mysql://user:pass@host:port"
    )))
}

fn is_executable(path: &Path) -> bool {
    match std::fs::metadata(path) {
        #[cfg(unix)]
        Ok(meta) => {
            use std::os::unix::fs::PermissionsExt as _;
            meta.is_file() && meta.permissions().mode() & 0o111 != 0
        }
        #[cfg(not(unix))]
        Ok(meta) => meta.is_file(),
        Err(_) => false,
    }
}

/// MariaDB has shipped its server as `mysqld` too (and still links it under that name), so a
/// `mysqld` is asked what it is.
fn flavor_of(path: &Path, name: &str) -> Flavor {
    if name == "mariadbd" {
        return Flavor::MariaDb;
    }
    match Command::new(path)
        .arg("--version")
        .stdin(Stdio::null())
        .output()
    {
        Ok(out) if String::from_utf8_lossy(&out.stdout).contains("MariaDB") => Flavor::MariaDb,
        _ => Flavor::MySql,
    }
}

/// The server binary to start: `JOBQUEUE_TEST_SERVER_BINARY`, or the one found by searching.
fn locate_server_binary() -> Result<ServerBinary> {
    match std::env::var_os(BINARY_VAR).filter(|v| !v.is_empty()) {
        Some(path) => {
            let path = PathBuf::from(path);
            if !is_executable(&path) {
                return Err(failure(format!(
                    "{BINARY_VAR}={} is not an executable file",
                    path.display()
                )));
            }
            let name = path.file_name().and_then(OsStr::to_str).unwrap_or("mysqld");
            let flavor = flavor_of(
                &path,
                if name.starts_with("mariadb") {
                    "mariadbd"
                } else {
                    "mysqld"
                },
            );
            Ok(ServerBinary { path, flavor })
        }
        None => find_server_binary(&server_search_dirs()),
    }
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

    fn local_or_error(&self, what: &str) -> Result<&LocalServer> {
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

/// Why launching the server failed: a port taken by someone else can be retried.
enum Launch {
    PortTaken(Error),
    Failed(Error),
}

impl Launch {
    fn into_error(self) -> Error {
        match self {
            Launch::PortTaken(e) | Launch::Failed(e) => e,
        }
    }
}

impl LocalServer {
    fn lock(&self) -> MutexGuard<'_, ServerState> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn lock_and<T>(&self, f: impl FnOnce(&mut ServerState) -> T) -> T {
        f(&mut self.lock())
    }

    fn data_dir(&self) -> PathBuf {
        self.dir.path().join("data")
    }

    fn error_log(&self) -> PathBuf {
        self.dir.path().join("error.log")
    }

    fn stderr_log(&self) -> PathBuf {
        self.dir.path().join("stderr.log")
    }

    /// The server's own temporary folder. With the shared `/tmp`, a starting server deletes
    /// the temporary tables of another one still initialising, and that one fails.
    fn tmp_dir(&self) -> Result<PathBuf> {
        let tmp = self.dir.path().join("tmp");
        std::fs::create_dir_all(&tmp)
            .map_err(|e| failure(format!("cannot create the test server's tmpdir: {e}")))?;
        Ok(tmp)
    }

    /// Creates the system tables in a new data directory.
    fn initialize(&self) -> Result<()> {
        let data_dir = self.data_dir();
        let tmp_dir = self.tmp_dir()?;
        let mut command = match self.binary.flavor {
            Flavor::MariaDb => {
                let install_db = find_install_db(&self.binary.path)?;
                let mut command = Command::new(&install_db);
                command
                    .arg("--no-defaults")
                    .arg(concat_arg("--datadir=", &data_dir))
                    .arg("--auth-root-authentication-method=normal")
                    .arg("--skip-test-db")
                    // Passed on to the bootstrap server.
                    .arg(concat_arg("--tmpdir=", &tmp_dir));
                command
            }
            Flavor::MySql => {
                let mut command = Command::new(&self.binary.path);
                command
                    .arg("--no-defaults")
                    .arg("--initialize-insecure")
                    .arg(concat_arg("--datadir=", &data_dir))
                    .arg(concat_arg("--tmpdir=", &tmp_dir));
                command
            }
        };
        if let Some(user) = user_if_root() {
            command.arg(format!("--user={user}"));
        }
        let output = command
            .stdin(Stdio::null())
            .output()
            .map_err(|e| failure(format!("cannot run {command:?}: {e}")))?;
        if !output.status.success() {
            return Err(failure(format!(
                "initialising the test server's data directory failed ({}): {command:?}\n{}{}",
                output.status,
                last_lines(&String::from_utf8_lossy(&output.stdout), 20),
                last_lines(&String::from_utf8_lossy(&output.stderr), 20),
            )));
        }
        Ok(())
    }

    /// Runs the server on `self.port` and waits until it answers a query.
    fn launch(&self) -> std::result::Result<(), Launch> {
        let began = Instant::now();
        let dir = self.dir.path();
        let log_start = std::fs::metadata(self.error_log())
            .map(|m| m.len())
            .unwrap_or(0);
        let stderr = File::options()
            .create(true)
            .append(true)
            .open(self.stderr_log())
            .map_err(|e| {
                Launch::Failed(failure(format!("cannot create the test server's log: {e}")))
            })?;

        let tmp_dir = self.tmp_dir().map_err(Launch::Failed)?;
        let mut command = Command::new(&self.binary.path);
        command
            .arg("--no-defaults")
            .arg(concat_arg("--datadir=", &self.data_dir()))
            .arg(concat_arg("--tmpdir=", &tmp_dir))
            .arg(concat_arg("--socket=", &dir.join("s.sock")))
            .arg(format!("--port={}", self.port))
            .arg("--bind-address=127.0.0.1")
            .arg(concat_arg("--pid-file=", &dir.join("server.pid")))
            .arg(concat_arg("--log-error=", &self.error_log()))
            .arg("--skip-log-bin")
            .arg("--innodb-flush-log-at-trx-commit=2")
            .arg("--innodb-buffer-pool-size=256M")
            .arg("--max-connections=1000")
            .arg("--innodb-lock-wait-timeout=50");
        if self.binary.flavor == Flavor::MySql {
            // Else every MySQL server wants the X protocol's port 33060, and all but one fail.
            command.arg("--mysqlx=OFF");
        }
        if let Some(user) = user_if_root() {
            // The server refuses to run as root unless told to.
            command.arg(format!("--user={user}"));
        }
        if let Ok(extra) = std::env::var(ARGS_VAR) {
            command.args(extra.split_whitespace());
        }
        command
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(stderr);
        detach_from_terminal(&mut command);

        let mut state = self.lock();
        let child = command
            .spawn()
            .map_err(|e| Launch::Failed(failure(format!("cannot run {command:?}: {e}"))))?;
        let pid = child.id();
        state.server = Some(child);
        if let Some(watchdog) = &mut state.watchdog {
            watchdog.watch(Some(pid));
        }

        let url = format!("mysql://root@127.0.0.1:{}", self.port);
        let address = SocketAddr::from((Ipv4Addr::LOCALHOST, self.port));
        let mut last_error: String;
        loop {
            let child = state.server.as_mut().expect("launched above");
            if let Ok(Some(status)) = child.try_wait() {
                state.server = None;
                if let Some(watchdog) = &mut state.watchdog {
                    watchdog.watch(None);
                }
                let log = self.log_tail(log_start);
                let error = failure(format!(
                    "the test server exited at startup ({status}): {command:?}\n\
                     last lines of its error log ({}):\n{log}",
                    self.error_log().display()
                ));
                return Err(if log.contains("already in use") {
                    Launch::PortTaken(error)
                } else {
                    Launch::Failed(error)
                });
            }
            if TcpStream::connect_timeout(&address, Duration::from_secs(1)).is_ok() {
                match block_on(probe(&url)) {
                    Ok(()) => break,
                    Err(e) => last_error = e,
                }
            } else {
                last_error = format!("nothing accepts connections on port {} yet", self.port);
            }
            if began.elapsed() > READY_TIMEOUT {
                // Leave it to the caller (or `Drop`) to decide; a server that never became
                // ready is of no use, so stop it now.
                let _ = stop_server(&mut state);
                return Err(Launch::Failed(failure(format!(
                    "the test server did not answer a query within {}s ({last_error}): \
                     {command:?}\nlast lines of its error log ({}):\n{}",
                    READY_TIMEOUT.as_secs(),
                    self.error_log().display(),
                    self.log_tail(log_start),
                ))));
            }
            std::thread::sleep(POLL_INTERVAL);
        }
        tracing::debug!(
            port = self.port,
            elapsed_ms = began.elapsed().as_millis() as u64,
            "test server accepts connections"
        );
        Ok(())
    }

    /// The last lines the server wrote to its error log (and standard error) since `from`.
    fn log_tail(&self, from: u64) -> String {
        let mut text = read_from(&self.error_log(), from);
        text.push_str(&read_from(&self.stderr_log(), 0));
        last_lines(&text, 30)
    }
}

/// Stops the server of `state` if it runs: `SIGTERM`, then `SIGKILL` after [`STOP_TIMEOUT`].
fn stop_server(state: &mut ServerState) -> Result<()> {
    let Some(mut child) = state.server.take() else {
        return Ok(());
    };
    if let Some(watchdog) = &mut state.watchdog {
        watchdog.watch(None);
    }
    if child
        .try_wait()
        .map_err(io_failure("cannot check on the test server"))?
        .is_some()
    {
        return Ok(());
    }
    // `Child::kill` sends SIGKILL only; an orderly shutdown wants SIGTERM.
    let _ = Command::new("sh")
        .args(["-c", "kill -TERM \"$1\"", "sh"])
        .arg(child.id().to_string())
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status();
    let deadline = Instant::now() + STOP_TIMEOUT;
    loop {
        if child
            .try_wait()
            .map_err(io_failure("cannot check on the test server"))?
            .is_some()
        {
            return Ok(());
        }
        if Instant::now() >= deadline {
            tracing::warn!(
                pid = child.id(),
                "test server ignored SIGTERM for 30s; killing it"
            );
            child
                .kill()
                .map_err(io_failure("cannot kill the test server"))?;
            child
                .wait()
                .map_err(io_failure("cannot wait for the test server"))?;
            return Ok(());
        }
        std::thread::sleep(POLL_INTERVAL);
    }
}

/// `DROP DATABASE`, waiting at most 10 s for metadata locks and 30 s in all.
async fn drop_database(url: String, name: String) -> std::result::Result<(), String> {
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
async fn probe(url: &str) -> std::result::Result<(), String> {
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
fn block_on<F>(future: F) -> std::result::Result<(), String>
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

/// `mariadb-install-db` (or its old name `mysql_install_db`): next to the server, in the
/// `bin` or `scripts` folder beside the server's, on `PATH`, or in the usual places.
fn find_install_db(server: &Path) -> Result<PathBuf> {
    let mut dirs = Vec::new();
    if let Some(dir) = server.parent() {
        dirs.push(dir.to_path_buf());
        if let Some(base) = dir.parent() {
            dirs.push(base.join("bin"));
            dirs.push(base.join("scripts"));
        }
    }
    if let Some(path) = std::env::var_os("PATH") {
        dirs.extend(std::env::split_paths(&path));
    }
    dirs.extend(INSTALL_DB_DIRS.iter().map(PathBuf::from));
    for name in ["mariadb-install-db", "mysql_install_db"] {
        if let Some(path) = dirs.iter().map(|d| d.join(name)).find(|p| is_executable(p)) {
            return Ok(path);
        }
    }
    Err(Error::NotInstalled(format!(
        "found the MariaDB server {} but not `mariadb-install-db` (or `mysql_install_db`), \
         which creates a new data directory; it comes with the server package \
         (Debian/Ubuntu: apt-get install mariadb-server; macOS: brew install mariadb)",
        server.display()
    )))
}

/// The user to pass as `--user` when running as root (the server refuses root without it).
fn user_if_root() -> Option<&'static str> {
    static USER: OnceLock<Option<String>> = OnceLock::new();
    USER.get_or_init(|| {
        let id = |flag: &str| {
            Command::new("id")
                .arg(flag)
                .stdin(Stdio::null())
                .stderr(Stdio::null())
                .output()
                .ok()
                .filter(|o| o.status.success())
                .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned())
        };
        match id("-u") {
            Some(uid) if uid == "0" => Some(
                id("-un")
                    .filter(|n| !n.is_empty())
                    .unwrap_or_else(|| "root".to_owned()),
            ),
            _ => None,
        }
    })
    .as_deref()
}

/// A free TCP port on 127.0.0.1, as the system hands them out.
fn free_port() -> Result<u16> {
    let context = "cannot find a free TCP port on 127.0.0.1";
    let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).map_err(io_failure(context))?;
    Ok(listener.local_addr().map_err(io_failure(context))?.port())
}

fn external_url() -> Option<String> {
    std::env::var(URL_VAR)
        .ok()
        .map(|url| url.trim().to_owned())
        .filter(|url| !url.is_empty())
}

/// `jqtest_{prefix}_{pid}_{counter}_{random}`, in `[a-z0-9_]`, at most 64 characters.
fn unique_database_name(prefix: &str) -> String {
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

/// `url` with its database part (if any) replaced by `database`, keeping any `?options`.
fn url_with_database(url: &str, database: &str) -> String {
    let (server, query) = split_database(url);
    format!("{server}/{database}{query}")
}

/// `url` without its database part (if any), keeping any `?options`: the server alone, for
/// statements on the server (`CREATE DATABASE`, `DROP DATABASE`), so that a database the
/// URL names need not exist.
fn url_without_database(url: &str) -> String {
    let (server, query) = split_database(url);
    format!("{server}{query}")
}

/// `url` as the part before its database (scheme and authority) and its `?options` (with
/// the `?`, or empty); the database part between them is left out.
fn split_database(url: &str) -> (&str, &str) {
    let (base, query) = match url.find('?') {
        Some(i) => url.split_at(i),
        None => (url, ""),
    };
    let authority = base.find("://").map_or(0, |i| i + 3);
    let server = match base[authority..].find('/') {
        Some(i) => &base[..authority + i],
        None => base,
    };
    (server, query)
}

fn concat_arg(flag: &str, path: &Path) -> OsString {
    let mut arg = OsString::from(flag);
    arg.push(path);
    arg
}

fn read_from(path: &Path, from: u64) -> String {
    let mut text = String::new();
    if let Ok(mut file) = File::open(path) {
        let mut bytes = Vec::new();
        if file.seek(SeekFrom::Start(from)).is_ok() && file.read_to_end(&mut bytes).is_ok() {
            text = String::from_utf8_lossy(&bytes).into_owned();
        }
    }
    text
}

fn last_lines(text: &str, n: usize) -> String {
    let lines: Vec<&str> = text.lines().collect();
    let mut out = String::new();
    for line in &lines[lines.len().saturating_sub(n)..] {
        let _ = writeln!(out, "  {line}");
    }
    out
}

/// The error for a server that could not be set up, run or stopped.
fn failure(message: String) -> Error {
    Error::Server(message)
}

fn io_failure(context: &'static str) -> impl FnOnce(std::io::Error) -> Error {
    move |e| failure(format!("{context}: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn database_names_are_unique_sanitized_and_short() {
        let a = unique_database_name("Enqueue-Twice!");
        let b = unique_database_name("Enqueue-Twice!");
        assert_ne!(a, b);
        assert!(a.starts_with("jqtest_enqueue_twice__"), "{a}");
        let long = unique_database_name(&"x".repeat(200));
        assert!(long.len() <= 64, "{long}");
        assert!(long.starts_with("jqtest_xxx"));
        for name in [&a, &b, &long, &unique_database_name("")] {
            assert!(
                name.chars()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_'),
                "{name}"
            );
        }
    }

    #[test]
    fn database_part_of_url_is_replaced() {
        assert_eq!(
            url_with_database("mysql://root@127.0.0.1:3306", "d"),
            "mysql://root@127.0.0.1:3306/d"
        );
        assert_eq!(
            url_with_database("mysql://u:p@h:1/", "d"),
            "mysql://u:p@h:1/d"
        );
        assert_eq!(
            url_with_database("mysql://u:p@h:1/old", "d"),
            "mysql://u:p@h:1/d"
        );
        assert_eq!(
            url_with_database("mysql://u:p@h/old?ssl-mode=disabled", "d"),
            "mysql://u:p@h/d?ssl-mode=disabled"
        );
        assert_eq!(
            url_with_database("mysql://h?ssl-mode=disabled", "d"),
            "mysql://h/d?ssl-mode=disabled"
        );
    }

    #[test]
    fn database_part_of_url_is_removed_for_server_statements() {
        for (url, server) in [
            ("mysql://root@127.0.0.1:3306", "mysql://root@127.0.0.1:3306"),
            (
                "mysql://root@127.0.0.1:3306/",
                "mysql://root@127.0.0.1:3306",
            ),
            (
                "mysql://root@127.0.0.1:3306/test",
                "mysql://root@127.0.0.1:3306",
            ),
            (
                "mysql://u:p@h:1/app_test?ssl-mode=disabled",
                "mysql://u:p@h:1?ssl-mode=disabled",
            ),
            ("mysql://h?ssl-mode=disabled", "mysql://h?ssl-mode=disabled"),
        ] {
            assert_eq!(url_without_database(url), server, "{url}");
            // And the databases made on it are named the same either way.
            assert_eq!(
                url_with_database(url, "d"),
                url_with_database(server, "d"),
                "{url}"
            );
        }
    }

    /// An external URL naming a database that does not exist (an application's test
    /// database, not made yet) still serves: databases are made and dropped on the server.
    #[test]
    fn a_url_naming_a_missing_database_makes_and_drops_databases() {
        let shared = TestServer::shared().unwrap_or_else(|e| panic!("{e}"));
        let server = TestServer {
            url: url_with_database(shared.url(), "jqtest_never_created"),
            local: None,
        };
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let name = runtime.block_on(async {
            let url = server.create_database("missing_in_url").await.unwrap();
            let mut conn = MySqlConnection::connect(&url).await.unwrap();
            let name: String = sqlx::query_scalar("SELECT CAST(DATABASE() AS CHAR)")
                .fetch_one(&mut conn)
                .await
                .unwrap();
            conn.close().await.unwrap();
            name
        });
        assert!(name.starts_with("jqtest_missing_in_url_"), "{name}");
        server.drop_database_blocking(&name).unwrap();

        let left: i64 = runtime.block_on(async {
            let mut conn = MySqlConnection::connect(&url_without_database(shared.url()))
                .await
                .unwrap();
            sqlx::query_scalar(
                "SELECT COUNT(*) FROM information_schema.SCHEMATA \
                 WHERE SCHEMA_NAME IN (?, 'jqtest_never_created')",
            )
            .bind(&name)
            .fetch_one(&mut conn)
            .await
            .unwrap()
        });
        assert_eq!(
            left, 0,
            "the database is dropped, and none is made for the URL's"
        );
    }

    #[test]
    fn missing_binary_gives_install_advice() {
        let err = find_server_binary(&[]).unwrap_err();
        assert!(matches!(err, Error::NotInstalled(_)), "{err:?}");
        let err = err.to_string();
        assert!(err.contains("apt-get install mariadb-server"), "{err}");
        assert!(err.contains("brew install mariadb"), "{err}");
        assert!(err.contains(URL_VAR), "{err}");
    }

    #[test]
    fn mariadbd_is_preferred() {
        let dir = tempfile::tempdir().unwrap();
        let (first, second) = (dir.path().join("a"), dir.path().join("b"));
        std::fs::create_dir_all(&first).unwrap();
        std::fs::create_dir_all(&second).unwrap();
        for path in [first.join("mysqld"), second.join("mariadbd")] {
            std::fs::write(&path, "#!/bin/sh\necho 'mysqld  Ver 8.0.40 for Linux'\n").unwrap();
            #[cfg(unix)]
            {
                use std::os::unix::fs::PermissionsExt as _;
                std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
            }
        }
        let found = find_server_binary(&[first.clone(), second.clone()]).unwrap();
        assert_eq!(found.path, second.join("mariadbd"));
        assert_eq!(found.flavor, Flavor::MariaDb);
        let found = find_server_binary(std::slice::from_ref(&first)).unwrap();
        assert_eq!(found.path, first.join("mysqld"));
        assert_eq!(found.flavor, Flavor::MySql);
    }
}
