//! What can go wrong finding, starting, stopping or reaching a test server.

/// `Result` with the launcher's [`Error`] as its default error type.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Why a test server could not be found, started, stopped or used. Every message says what
/// to do about it.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// No server binary (or no `mariadb-install-db` beside a MariaDB server, or no folder with
    /// PostgreSQL's `initdb` and `postgres`) is installed;
    /// the message says how to install one or how to use an existing server instead.
    #[error("test database server: {0}")]
    NotInstalled(String),

    /// The server could not be initialised, launched, stopped or restarted (its error log is
    /// quoted), or an operation does not apply to it (stopping an external server).
    #[error("test database server: {0}")]
    Server(String),

    /// A statement on the running server failed (such as `CREATE DATABASE`).
    #[error("test database server: {0}")]
    Database(#[from] sqlx::Error),
}

impl Error {
    /// The same failure again, for every caller of a shared server that could not start.
    pub(crate) fn repeat(&self, context: &str) -> Error {
        match self {
            Error::NotInstalled(m) => Error::NotInstalled(format!("{context}: {m}")),
            Error::Server(m) => Error::Server(format!("{context}: {m}")),
            Error::Database(e) => Error::Server(format!("{context}: {e}")),
        }
    }
}
