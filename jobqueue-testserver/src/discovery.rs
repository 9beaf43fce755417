//! Finding a server binary on this machine: `PATH`, the usual install folders,
//! `mariadb-install-db` beside a MariaDB server, and PostgreSQL's `initdb` and `postgres`.

use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use crate::server::*;
use crate::{failure, Error, Result};

/// Environment variable naming the server binary to start.
pub(crate) const BINARY_VAR: &str = "JOBQUEUE_TEST_SERVER_BINARY";

/// Folders searched for a server binary after those on `PATH`.
pub(crate) const SERVER_DIRS: &[&str] = &["/usr/sbin", "/usr/local/sbin", "/usr/local/mysql/bin"];

/// Folders searched for `mariadb-install-db` after the server's own and those on `PATH`.
pub(crate) const INSTALL_DB_DIRS: &[&str] =
    &["/usr/bin", "/usr/local/bin", "/usr/local/mysql/scripts"];

/// Folders searched for PostgreSQL's binaries after those on `PATH` and the versioned folders
/// of [`POSTGRES_VERSIONS_DIR`].
pub(crate) const POSTGRES_DIRS: &[&str] = &["/usr/local/pgsql/bin"];

/// Where Debian and Ubuntu install each PostgreSQL version: `<this>/<version>/bin`.
pub(crate) const POSTGRES_VERSIONS_DIR: &str = "/usr/lib/postgresql";

/// Which server a binary is: they are initialised, started and stopped differently.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Flavor {
    /// `mariadbd`, or a `mysqld` that says `MariaDB` in its `--version`.
    MariaDb,
    /// MySQL's `mysqld`.
    MySql,
    /// PostgreSQL's `postgres`, with `initdb` in the same folder.
    Postgres,
}

impl Flavor {
    /// The database a server of this flavor speaks to its clients.
    pub fn backend(self) -> Backend {
        match self {
            Flavor::MariaDb | Flavor::MySql => Backend::MySql,
            Flavor::Postgres => Backend::Postgres,
        }
    }

    /// The signal that shuts such a server down in order: PostgreSQL's `SIGTERM` waits for
    /// every client to disconnect, its `SIGINT` ends their sessions first.
    pub(crate) fn stop_signal(self) -> &'static str {
        match self {
            Flavor::MariaDb | Flavor::MySql => "TERM",
            Flavor::Postgres => "INT",
        }
    }

    /// The URL of such a server this process started on `port` of 127.0.0.1.
    pub(crate) fn local_url(self, port: u16) -> String {
        match self {
            Flavor::MariaDb | Flavor::MySql => format!("mysql://root@127.0.0.1:{port}"),
            Flavor::Postgres => format!("postgres://postgres@127.0.0.1:{port}/postgres"),
        }
    }
}

/// The database protocol and SQL dialect of a [`TestServer`]: which driver connects to its
/// URL and which statements create and drop its databases.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Backend {
    /// MariaDB or MySQL (`mysql://` URLs).
    MySql,
    /// PostgreSQL 13 or newer (`postgres://` URLs).
    Postgres,
}

/// A server binary found on this machine.
#[derive(Debug, Clone)]
pub struct ServerBinary {
    /// Its path (for PostgreSQL, that of `postgres`; `initdb` is beside it).
    pub path: PathBuf,
    /// Which server it is.
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

pub(crate) fn is_executable(path: &Path) -> bool {
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
pub(crate) fn flavor_of(path: &Path, name: &str) -> Flavor {
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

/// The folders searched for PostgreSQL's `initdb` and `postgres`: those on `PATH`, then the
/// `bin` folder of each version under `/usr/lib/postgresql` (Debian and Ubuntu), newest first,
/// then `/usr/local/pgsql/bin` (a build from source).
pub fn postgres_search_dirs() -> Vec<PathBuf> {
    let mut dirs: Vec<PathBuf> = std::env::var_os("PATH")
        .map(|path| std::env::split_paths(&path).collect())
        .unwrap_or_default();
    dirs.extend(versioned_bin_dirs(Path::new(POSTGRES_VERSIONS_DIR)));
    dirs.extend(POSTGRES_DIRS.iter().map(PathBuf::from));
    dirs
}

/// `root/<version>/bin` for each version folder in `root` (`15`, `9.6`), newest first.
pub(crate) fn versioned_bin_dirs(root: &Path) -> Vec<PathBuf> {
    let mut versions: Vec<(Vec<u32>, PathBuf)> = std::fs::read_dir(root)
        .into_iter()
        .flatten()
        .filter_map(|entry| {
            let entry = entry.ok()?;
            let name = entry.file_name();
            let version = name
                .to_str()?
                .split('.')
                .map(|part| part.parse::<u32>().ok())
                .collect::<Option<Vec<u32>>>()?;
            Some((version, entry.path().join("bin")))
        })
        .collect();
    versions.sort_by(|a, b| b.0.cmp(&a.0));
    versions.into_iter().map(|(_, dir)| dir).collect()
}

/// Finds PostgreSQL's binaries in `dirs`: the first folder holding both `initdb` and
/// `postgres` (`initdb` runs the `postgres` beside it). When there is none,
/// [`Error::NotInstalled`] says how to install them.
pub fn find_postgres_binary(dirs: &[PathBuf]) -> Result<ServerBinary> {
    if let Some(dir) = dirs
        .iter()
        .find(|dir| is_executable(&dir.join("initdb")) && is_executable(&dir.join("postgres")))
    {
        return Ok(ServerBinary {
            path: dir.join("postgres"),
            flavor: Flavor::Postgres,
        });
    }
    let searched = dirs
        .iter()
        .map(|d| d.display().to_string())
        .collect::<Vec<_>>()
        .join(":");
    Err(Error::NotInstalled(format!(
        "no PostgreSQL server binaries (`initdb` and `postgres` in one folder) found in \
         {searched}. The tests need them to start a throwaway server of their own. Install \
         them:\n\
         \x20 Debian/Ubuntu: sudo apt-get install postgresql\n\
         \x20 macOS:         brew install postgresql\n\
         or use an existing server, PostgreSQL 13 or newer (the tests create databases named \
         jqtest_* on it):\n\
         \x20 export {POSTGRES_URL_VAR}=postgres://user:pass@host:port/postgres"
    )))
}

/// `initdb`, beside a PostgreSQL server binary.
pub(crate) fn initdb_beside(server: &Path) -> PathBuf {
    server.with_file_name("initdb")
}

/// The server binary to start: `JOBQUEUE_TEST_SERVER_BINARY`, or the one found by searching.
pub(crate) fn locate_server_binary() -> Result<ServerBinary> {
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

/// `mariadb-install-db` (or its old name `mysql_install_db`): next to the server, in the
/// `bin` or `scripts` folder beside the server's, on `PATH`, or in the usual places.
pub(crate) fn find_install_db(server: &Path) -> Result<PathBuf> {
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
