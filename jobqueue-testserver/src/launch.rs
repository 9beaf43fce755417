//! Starting a server of this process's own: initialising its data directory, launching it
//! on a free port, the watchdog that cleans up after a killed test process, and stopping it.

use std::ffi::OsString;
use std::fmt::Write as _;
use std::fs::File;
use std::io::{Read as _, Seek as _, SeekFrom, Write as _};
use std::net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::{Mutex, MutexGuard, OnceLock, PoisonError};
use std::time::{Duration, Instant};

use crate::discovery::*;
use crate::server::*;
use crate::{failure, io_failure, Error, Result};

/// Environment variable with extra server options, separated by spaces.
pub(crate) const ARGS_VAR: &str = "JOBQUEUE_TEST_SERVER_ARGS";

/// Environment variable with extra options for the PostgreSQL servers this crate starts.
pub(crate) const POSTGRES_ARGS_VAR: &str = "JOBQUEUE_TEST_POSTGRES_ARGS";

/// How long a server may take to accept connections after it was launched.
pub(crate) const READY_TIMEOUT: Duration = Duration::from_secs(60);

/// How long a server may take to shut down after `SIGTERM` before it gets `SIGKILL`.
pub(crate) const STOP_TIMEOUT: Duration = Duration::from_secs(30);

/// How often readiness and shutdown are polled.
pub(crate) const POLL_INTERVAL: Duration = Duration::from_millis(25);

/// How many ports to try when the one picked was taken before the server could bind it.
pub(crate) const PORT_ATTEMPTS: usize = 5;

/// The watchdog. Its standard input is a pipe from the process that started the server;
/// that process writes `pid N` when a server runs as process N and `none` when it was
/// stopped. End of input means that process is gone: the watchdog stops the server it was
/// last told about with the signal `$2` (then `SIGKILL` after 30 seconds) and deletes the
/// folder (`$1`).
pub(crate) const WATCHDOG_SCRIPT: &str = r#"
trap '' INT HUP
dir=$1
signal=$2
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
  kill -"$signal" "$pid" 2>/dev/null
  n=0
  while running "$pid" && [ "$n" -lt 350 ]; do
    n=$((n + 1))
    if [ "$n" -eq 300 ]; then kill -KILL "$pid" 2>/dev/null; fi
    sleep 0.1
  done
fi
rm -rf "$dir"
"#;

/// A server process this process started, with everything it needs to stop and restart it.
#[derive(Debug)]
pub(crate) struct LocalServer {
    pub(crate) binary: ServerBinary,
    /// The port it listens on, on 127.0.0.1; the same across restarts.
    pub(crate) port: u16,
    /// Data directory, socket, pid file and logs; deleted on drop.
    pub(crate) dir: tempfile::TempDir,
    pub(crate) state: Mutex<ServerState>,
}

/// The processes of a [`LocalServer`] (behind its mutex, so that `stop` can take `&self`).
#[derive(Debug)]
pub(crate) struct ServerState {
    /// The server process, while it runs.
    pub(crate) server: Option<Child>,
    /// The signal that asks it to shut down in order ([`Flavor::stop_signal`]).
    pub(crate) stop_signal: &'static str,
    /// The watchdog that stops the server and deletes the folder when this process is gone.
    pub(crate) watchdog: Option<Watchdog>,
}

#[derive(Debug)]
pub(crate) struct Watchdog {
    pub(crate) child: Child,
    /// The writing end of the watchdog's input: closing it (even by dying) tells it to clean up.
    pub(crate) input: ChildStdin,
}

impl Watchdog {
    /// Starts the watchdog of the folder `dir`, whose server it will stop with `stop_signal`
    /// (`TERM`, `INT`).
    pub(crate) fn spawn(dir: &Path, stop_signal: &str) -> Result<Watchdog> {
        let mut command = Command::new("sh");
        command
            .arg("-c")
            .arg(WATCHDOG_SCRIPT)
            .arg("jobqueue-test-server-watchdog")
            .arg(dir)
            .arg(stop_signal)
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
    pub(crate) fn watch(&mut self, pid: Option<u32>) {
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
    pub(crate) fn finish(self) {
        let Watchdog { mut child, input } = self;
        drop(input);
        let _ = child.wait();
    }
}

/// Puts a child in a process group of its own, so that Ctrl-C in the terminal stops the
/// test process alone and the watchdog is left to clean up after it.
pub(crate) fn detach_from_terminal(command: &mut Command) {
    #[cfg(unix)]
    {
        use std::os::unix::process::CommandExt as _;
        command.process_group(0);
    }
    #[cfg(not(unix))]
    let _ = command;
}

/// Why launching the server failed: a port taken by someone else can be retried.
pub(crate) enum Launch {
    PortTaken(Error),
    Failed(Error),
}

impl Launch {
    pub(crate) fn into_error(self) -> Error {
        match self {
            Launch::PortTaken(e) | Launch::Failed(e) => e,
        }
    }
}

impl LocalServer {
    pub(crate) fn lock(&self) -> MutexGuard<'_, ServerState> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    pub(crate) fn lock_and<T>(&self, f: impl FnOnce(&mut ServerState) -> T) -> T {
        f(&mut self.lock())
    }

    pub(crate) fn data_dir(&self) -> PathBuf {
        self.dir.path().join("data")
    }

    pub(crate) fn error_log(&self) -> PathBuf {
        self.dir.path().join("error.log")
    }

    pub(crate) fn stderr_log(&self) -> PathBuf {
        self.dir.path().join("stderr.log")
    }

    /// The server's own temporary folder. With the shared `/tmp`, a starting server deletes
    /// the temporary tables of another one still initialising, and that one fails.
    pub(crate) fn tmp_dir(&self) -> Result<PathBuf> {
        let tmp = self.dir.path().join("tmp");
        std::fs::create_dir_all(&tmp)
            .map_err(|e| failure(format!("cannot create the test server's tmpdir: {e}")))?;
        Ok(tmp)
    }

    /// Where the server's standard error goes: PostgreSQL logs there, so for it that is the
    /// error log itself.
    pub(crate) fn server_stderr(&self) -> PathBuf {
        match self.binary.flavor {
            Flavor::MariaDb | Flavor::MySql => self.stderr_log(),
            Flavor::Postgres => self.error_log(),
        }
    }

    /// Creates the system tables in a new data directory.
    pub(crate) fn initialize(&self) -> Result<()> {
        let data_dir = self.data_dir();
        if self.binary.flavor == Flavor::Postgres {
            return self.initialize_postgres(&data_dir);
        }
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
            Flavor::Postgres => unreachable!("initialised above"),
        };
        if let Some(user) = user_if_root() {
            command.arg(format!("--user={user}"));
        }
        run_initialization(command)
    }

    /// `initdb`: a cluster whose superuser `postgres` needs no password, in UTF-8 with the `C`
    /// locale (byte order, the same on every machine). As root, the folder is handed to the
    /// unprivileged account the server will run as, since PostgreSQL refuses to run as root.
    pub(crate) fn initialize_postgres(&self, data_dir: &Path) -> Result<()> {
        let account = postgres_account_if_root()?;
        if let Some(account) = account {
            account.take_ownership(self.dir.path())?;
        }
        let mut command = Command::new(initdb_beside(&self.binary.path));
        command
            .arg("-D")
            .arg(data_dir)
            .args(["-U", "postgres", "--auth=trust", "-E", "UTF8", "--locale=C"])
            .arg("--no-sync")
            .current_dir(self.dir.path());
        if let Some(account) = account {
            account.run_as(&mut command);
        }
        run_initialization(command)
    }

    /// The server's command line, listening on `self.port` of 127.0.0.1.
    pub(crate) fn server_command(&self) -> std::result::Result<Command, Launch> {
        let dir = self.dir.path();
        let mut command = Command::new(&self.binary.path);
        if self.binary.flavor == Flavor::Postgres {
            command
                .arg("-D")
                .arg(self.data_dir())
                .arg("-p")
                .arg(self.port.to_string())
                .args(["-h", "127.0.0.1"])
                // Its socket (`.s.PGSQL.PORT`) and the socket's lock file.
                .arg("-k")
                .arg(dir)
                .current_dir(dir);
            for setting in [
                // Nothing a test writes needs to survive a crash of the machine.
                "fsync=off",
                "synchronous_commit=off",
                "full_page_writes=off",
                "max_connections=300",
            ] {
                command.arg("-c").arg(setting);
            }
            // As `-c name=value` pairs: `-c ssl=on -c ssl_cert_file=...`.
            if let Ok(extra) = std::env::var(POSTGRES_ARGS_VAR) {
                command.args(extra.split_whitespace());
            }
            if let Some(account) = postgres_account_if_root().map_err(Launch::Failed)? {
                account.run_as(&mut command);
            }
            return Ok(command);
        }
        let tmp_dir = self.tmp_dir().map_err(Launch::Failed)?;
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
        Ok(command)
    }

    /// Runs the server on `self.port` and waits until it answers a query.
    pub(crate) fn launch(&self) -> std::result::Result<(), Launch> {
        let began = Instant::now();
        let log_start = std::fs::metadata(self.error_log())
            .map(|m| m.len())
            .unwrap_or(0);
        let stderr = File::options()
            .create(true)
            .append(true)
            .open(self.server_stderr())
            .map_err(|e| {
                Launch::Failed(failure(format!("cannot create the test server's log: {e}")))
            })?;

        let mut command = self.server_command()?;
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

        let url = self.binary.flavor.local_url(self.port);
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
                match block_on(probe(self.binary.flavor.backend(), &url)) {
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
    pub(crate) fn log_tail(&self, from: u64) -> String {
        let mut text = read_from(&self.error_log(), from);
        if self.server_stderr() != self.error_log() {
            text.push_str(&read_from(&self.stderr_log(), 0));
        }
        last_lines(&text, 30)
    }
}

/// Stops the server of `state` if it runs: its stop signal (`SIGTERM`; `SIGINT` for
/// PostgreSQL), then `SIGKILL` after [`STOP_TIMEOUT`].
pub(crate) fn stop_server(state: &mut ServerState) -> Result<()> {
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
    // `Child::kill` sends SIGKILL only; an orderly shutdown wants SIGTERM (SIGINT for
    // PostgreSQL, whose SIGTERM waits for every client to disconnect).
    let _ = Command::new("sh")
        .args(["-c", "kill -\"$1\" \"$2\"", "sh", state.stop_signal])
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
                signal = state.stop_signal,
                "test server ignored its stop signal for 30s; killing it"
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

/// Runs `id` with `args`: its output, or `None` when it fails (no such user).
fn id(args: &[&str]) -> Option<String> {
    Command::new("id")
        .args(args)
        .stdin(Stdio::null())
        .stderr(Stdio::null())
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned())
}

/// Whether this process runs as root.
pub(crate) fn is_root() -> bool {
    static ROOT: OnceLock<bool> = OnceLock::new();
    *ROOT.get_or_init(|| id(&["-u"]).as_deref() == Some("0"))
}

/// The user to pass as `--user` when running as root (the server refuses root without it).
pub(crate) fn user_if_root() -> Option<&'static str> {
    static USER: OnceLock<Option<String>> = OnceLock::new();
    USER.get_or_init(|| {
        is_root().then(|| {
            id(&["-un"])
                .filter(|n| !n.is_empty())
                .unwrap_or_else(|| "root".to_owned())
        })
    })
    .as_deref()
}

/// The accounts PostgreSQL's programs may run as when this process is root, best first:
/// the one a distribution's package makes, then the one every system has.
pub(crate) const POSTGRES_ACCOUNTS: &[&str] = &["postgres", "nobody"];

/// An unprivileged account to run a program as.
#[derive(Debug)]
pub(crate) struct Account {
    pub(crate) name: String,
    pub(crate) uid: u32,
    pub(crate) gid: u32,
}

impl Account {
    /// The account `name`, if it exists.
    pub(crate) fn lookup(name: &str) -> Option<Account> {
        let number = |flag: &str| id(&[flag, name])?.parse::<u32>().ok();
        Some(Account {
            name: name.to_owned(),
            uid: number("-u")?,
            gid: number("-g")?,
        })
    }

    /// Makes `command` run as this account.
    pub(crate) fn run_as(&self, command: &mut Command) {
        #[cfg(unix)]
        {
            use std::os::unix::process::CommandExt as _;
            command.uid(self.uid).gid(self.gid);
        }
        #[cfg(not(unix))]
        let _ = command;
    }

    /// Gives this account the folder `dir` (only the folder: it is new and empty).
    pub(crate) fn take_ownership(&self, dir: &Path) -> Result<()> {
        #[cfg(unix)]
        std::os::unix::fs::chown(dir, Some(self.uid), Some(self.gid)).map_err(|e| {
            failure(format!(
                "cannot hand the test server's folder {} to the account {}: {e}",
                dir.display(),
                self.name
            ))
        })?;
        #[cfg(not(unix))]
        let _ = dir;
        Ok(())
    }
}

/// The account PostgreSQL runs as when this process is root (`initdb` and `postgres` refuse
/// to run as root): `postgres` if it exists, else `nobody`. `None` when not root.
pub(crate) fn postgres_account_if_root() -> Result<Option<&'static Account>> {
    static ACCOUNT: OnceLock<Option<Account>> = OnceLock::new();
    if !is_root() {
        return Ok(None);
    }
    match ACCOUNT.get_or_init(|| {
        POSTGRES_ACCOUNTS
            .iter()
            .find_map(|name| Account::lookup(name))
    }) {
        Some(account) => Ok(Some(account)),
        None => Err(failure(format!(
            "this process runs as root, which PostgreSQL refuses, and none of the accounts \
             {POSTGRES_ACCOUNTS:?} exists to run it as; create one (useradd --system postgres) \
             or run the tests as another user"
        ))),
    }
}

/// Runs a command that initialises a data directory, failing with its output.
pub(crate) fn run_initialization(mut command: Command) -> Result<()> {
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

/// A free TCP port on 127.0.0.1, as the system hands them out.
pub(crate) fn free_port() -> Result<u16> {
    let context = "cannot find a free TCP port on 127.0.0.1";
    let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).map_err(io_failure(context))?;
    Ok(listener.local_addr().map_err(io_failure(context))?.port())
}

pub(crate) fn concat_arg(flag: &str, path: &Path) -> OsString {
    let mut arg = OsString::from(flag);
    arg.push(path);
    arg
}

pub(crate) fn read_from(path: &Path, from: u64) -> String {
    let mut text = String::new();
    if let Ok(mut file) = File::open(path) {
        let mut bytes = Vec::new();
        if file.seek(SeekFrom::Start(from)).is_ok() && file.read_to_end(&mut bytes).is_ok() {
            text = String::from_utf8_lossy(&bytes).into_owned();
        }
    }
    text
}

pub(crate) fn last_lines(text: &str, n: usize) -> String {
    let lines: Vec<&str> = text.lines().collect();
    let mut out = String::new();
    for line in &lines[lines.len().saturating_sub(n)..] {
        let _ = writeln!(out, "  {line}");
    }
    out
}
