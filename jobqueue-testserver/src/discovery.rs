//! Finding a server binary on this machine: `PATH`, the usual install folders, and
//! `mariadb-install-db` beside a MariaDB server.

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
