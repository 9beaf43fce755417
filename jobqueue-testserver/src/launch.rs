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
/// last told about and deletes the folder (`$1`).
pub(crate) const WATCHDOG_SCRIPT: &str = r#"
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
    pub(crate) fn spawn(dir: &Path) -> Result<Watchdog> {
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

    /// Creates the system tables in a new data directory.
    pub(crate) fn initialize(&self) -> Result<()> {
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
    pub(crate) fn launch(&self) -> std::result::Result<(), Launch> {
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
    pub(crate) fn log_tail(&self, from: u64) -> String {
        let mut text = read_from(&self.error_log(), from);
        text.push_str(&read_from(&self.stderr_log(), 0));
        last_lines(&text, 30)
    }
}

/// Stops the server of `state` if it runs: `SIGTERM`, then `SIGKILL` after [`STOP_TIMEOUT`].
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

/// The user to pass as `--user` when running as root (the server refuses root without it).
pub(crate) fn user_if_root() -> Option<&'static str> {
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
