//! The runtime's error type, and the error a job returns.

use std::fmt;

use crate::store::DbErrorKind;

/// A boxed error of any kind, as jobs may return.
pub type BoxError = Box<dyn std::error::Error + Send + Sync + 'static>;

/// `Result` with the runtime's [`Error`] as its default error type.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Everything that can go wrong in the queue itself (not in a job: see [`JobError`]).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The database returned an error or could not be reached.
    #[error("database error: {0}")]
    Database(#[from] sqlx::Error),

    /// Applying the embedded migrations failed.
    #[error("migration failed: {0}")]
    Migrate(#[from] sqlx::migrate::MigrateError),

    /// The database's jobqueue tables are missing, older than this library needs, or were
    /// changed by hand; the message says how to fix it.
    #[error("database schema: {0}")]
    Schema(String),

    /// The server is one the queue cannot run on safely; the message says what to change.
    #[error("unsupported database server: {0}")]
    UnsupportedServer(String),

    /// This operation has no version for the queue's database yet.
    #[error("this operation is not available on {backend} yet")]
    Unsupported {
        /// The queue's database.
        backend: crate::Backend,
    },

    /// A connection or transaction of one database was handed to a queue on another (a
    /// `PgConnection` to a queue on MySQL, say).
    #[error("a {given} connection was given to a queue on {queue}: pass a connection of the queue's own database")]
    WrongBackend {
        /// The database of the connection given.
        given: crate::Backend,
        /// The queue's database.
        queue: crate::Backend,
    },

    /// A task key is empty, too long or otherwise unusable.
    #[error("invalid task key {key:?}: {reason}")]
    InvalidKey {
        /// The key as given (cut to 80 characters).
        key: String,
        /// What is wrong with it and how to fix it.
        reason: String,
    },

    /// The task key is held by a job of another kind, so this job was not enqueued. Task keys
    /// are one namespace shared by every kind.
    #[error("task key {key:?} is held by job {id} of kind `{holder}`, so this `{kind}` job was not enqueued; task keys are shared by all kinds: begin the `key` template with text of this kind's own, such as \"{kind}:\"")]
    KeyTaken {
        /// The key (cut to 80 characters).
        key: String,
        /// The kind of the job that was not enqueued.
        kind: String,
        /// The kind of the job that holds the key.
        holder: String,
        /// The id of the job that holds the key.
        id: u64,
    },

    /// A queue name is empty, too long or uses characters outside `[A-Za-z0-9_.:-]`.
    #[error("invalid queue name {queue:?}: {reason}")]
    InvalidQueue {
        /// The queue name as given (cut to 80 characters).
        queue: String,
        /// What is wrong with it and how to fix it.
        reason: String,
    },

    /// A job's arguments could not be serialized to JSON.
    #[error("cannot serialize the arguments of job `{kind}`: {source}; every argument must be serializable to JSON (map keys must serialize as strings or numbers)")]
    Serialize {
        /// The job kind.
        kind: &'static str,
        /// The serializer's error.
        #[source]
        source: serde_json::Error,
    },

    /// A serialized payload is larger than the queue accepts.
    #[error("payload of job `{kind}` is {size} bytes, over the limit of {limit} bytes; store large data elsewhere and pass a reference to it")]
    PayloadTooLarge {
        /// The job kind.
        kind: String,
        /// The payload's size in bytes.
        size: usize,
        /// The configured limit in bytes.
        limit: usize,
    },

    /// A setting, job option or argument is out of range, or two settings contradict each
    /// other.
    #[error("invalid configuration: {reason}")]
    InvalidSetting {
        /// The setting, option or argument at fault, as the API names it (`concurrency`,
        /// `max_attempts`, `lease`, `status`...).
        setting: &'static str,
        /// What is wrong with it and how to fix it.
        reason: String,
    },

    /// A cron schedule does not parse: an unknown time zone, or fields that are not a cron
    /// expression.
    #[error("invalid cron schedule {expr:?}: {reason}")]
    InvalidCron {
        /// The schedule as written.
        expr: String,
        /// What is wrong with it and what to write instead.
        reason: String,
    },

    /// The database URL does not parse, or names no database this library runs on.
    #[error("cannot parse the database URL ({url}): {reason}; expected mysql://user:password@host:port/database or postgres://user:password@host:port/database")]
    InvalidUrl {
        /// The URL, its password hidden.
        url: String,
        /// What is wrong with it.
        reason: String,
    },

    /// The server requires TLS and the connection did not ask for it (MySQL's
    /// `require_secure_transport=ON`, a PostgreSQL `pg_hba.conf` with `hostssl` lines only).
    #[error("the server requires TLS and this connection did not use it ({url}): {source}; {fix}")]
    TlsRequired {
        /// The URL, its password hidden.
        url: String,
        /// The server's refusal.
        #[source]
        source: sqlx::Error,
        /// The URL options that fix it, in the words of the URL's database.
        fix: &'static str,
    },

    /// The TLS handshake failed: a certificate not trusted, a host name that does not match,
    /// or no TLS support compiled in.
    #[error(
        "the TLS connection to {url} failed: {source}; {fix}; \
             TLS needs the `tls-rustls` (default) or `tls-native-tls` feature of jobqueue"
    )]
    TlsFailed {
        /// The URL, its password hidden.
        url: String,
        /// The TLS error.
        #[source]
        source: sqlx::Error,
        /// What the URL's options must say, in the words of the URL's database.
        fix: &'static str,
    },

    /// The testing API (`jobqueue::testing`, feature `testing`) could not do what was asked:
    /// a drain that went past its bound, a job the test binary cannot run. The message says
    /// why and what to do.
    #[error("testing: {0}")]
    Testing(String),

    /// A job kind of the worker's queues takes a [`Data<T>`](crate::Data) the worker was not
    /// given.
    #[error("job `{kind}` needs `Data<{type_name}>`, which this worker (queues {queues:?}) was not given; call `.data(value)` with one on `Worker::builder`")]
    MissingData {
        /// The kind that needs it.
        kind: String,
        /// The type it needs.
        type_name: &'static str,
        /// The worker's queues.
        queues: Vec<String>,
    },

    /// `migrate` ran as a user without DDL rights.
    #[error("migrate needs DDL rights (CREATE, ALTER, INDEX, DROP) on the database, which this user lacks: {source}; run `migrate` as the migration user, and give workers only SELECT, INSERT, UPDATE, DELETE")]
    MigratePermission {
        /// The server's refusal.
        #[source]
        source: Box<Error>,
    },

    /// The database has no jobqueue schema: `migrate` was never run on it.
    #[error("database schema: the database has no jobqueue schema (nothing recorded in `job_queue_migrations`); {SCHEMA_FIX}")]
    SchemaMissing,

    /// The database's jobqueue schema is older than this library needs.
    #[error("database schema: the database's jobqueue schema is at version {version}, but this version of the library needs {needed}; {SCHEMA_FIX}")]
    SchemaTooOld {
        /// The latest migration applied to the database.
        version: i64,
        /// The latest migration this library embeds.
        needed: i64,
    },

    /// A status (stored, or given by name) is none of those a job can have
    /// ([`JobStatus::ALL`](crate::JobStatus::ALL)).
    #[error("unknown job status {0:?}; expected one of {statuses}", statuses = status_names())]
    UnknownStatus(String),

    /// The worker could not start its lease thread.
    #[error(
        "cannot start the worker's lease thread: {0}; the process is out of threads or memory"
    )]
    WorkerStart(#[source] std::io::Error),

    /// Two job kinds registered under the same name, or a kind that cannot run.
    #[error("job registry: {0}")]
    Registry(String),

    /// No job with that id or key exists.
    #[error("no job {0}")]
    JobNotFound(JobRef),

    /// [`JobContext::complete_in`](crate::JobContext::complete_in) matched no row: this
    /// attempt no longer holds the job (its lease ran out and it was taken back), or an
    /// operator asked to cancel it. Nothing of the caller's transaction may commit.
    #[error("job {id} was not completed by attempt {attempt}: {reason}; roll the transaction back (returning this error from the job does) so that none of its writes commit")]
    NotCompleted {
        /// The job.
        id: u64,
        /// The attempt that tried to complete it.
        attempt: u32,
        /// Why the completion matched no row.
        reason: String,
    },

    /// [`Queue::wait`](crate::Queue::wait) gave up: the job did not end in time.
    #[error("job {id} did not end within {waited:?}: it is {status}; wait longer, or look at it with `jobqueue show {id}`")]
    WaitTimedOut {
        /// The job waited for.
        id: u64,
        /// How long the call waited.
        waited: std::time::Duration,
        /// The job's status when the wait ended (`scheduled`, `ready` or `running`).
        status: &'static str,
    },

    /// A job's stored attempt history (`attempt_log`) cannot be read.
    #[error("cannot read the attempt history of job {id}: {reason}; the `attempt_log` column holds what this library cannot read (written by hand or by another program): set it to NULL to drop the history")]
    AttemptLog {
        /// The job.
        id: u64,
        /// What is wrong with the stored history.
        reason: String,
    },

    /// A listing's filter is not served by an index, and reading the table for it ran past
    /// the time limit: the server stopped the statement rather than read on. Narrow the
    /// filter with a status (and a queue), whose jobs are read through an index.
    #[error("the filter {filter} is not served by an index, and the server stopped reading after {limit:?} rather than scan the table; add a status (and a queue) to the filter, or narrow its time range")]
    FilterTooSlow {
        /// The filter, as `Debug` prints it.
        filter: String,
        /// The time limit the statement ran into.
        limit: std::time::Duration,
    },

    /// A job's stored output cannot be read as the type asked for.
    #[error("cannot read the output of job {id}: {reason}")]
    Output {
        /// The job.
        id: u64,
        /// What is wrong, and how to fix it.
        reason: String,
    },
}

/// The statuses a job can have, in lifecycle order: `scheduled, ready, ...`.
fn status_names() -> String {
    crate::JobStatus::ALL.map(|s| s.as_str()).join(", ")
}

/// How to fix a missing or old schema.
const SCHEMA_FIX: &str =
    "run `jobqueue migrate` (or call `Queue::migrate`) with a user that has DDL rights, \
     or apply the SQL of `jobqueue migrate --print-sql` with your own migration tool";

/// A job named by id or by task key, as [`Error::JobNotFound`] reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum JobRef {
    /// By id.
    Id(u64),
    /// By task key.
    Key(String),
}

impl fmt::Display for JobRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            JobRef::Id(id) => write!(f, "with id {id}"),
            JobRef::Key(key) => write!(f, "with key {key:?}"),
        }
    }
}

impl Error {
    /// This error as a sqlx error, for code that returns `sqlx::Result`: a database error
    /// as it was, anything else carried inside `sqlx::Error::Configuration`.
    pub(crate) fn into_sqlx(self) -> sqlx::Error {
        match self {
            Error::Database(e) => e,
            other => sqlx::Error::Configuration(Box::new(other)),
        }
    }

    /// What the database server's error behind this error means ([`DbErrorKind`]): a
    /// deadlock, a duplicate key, a right the user lacks, a missing table... `None` when this
    /// is not a server error, or one of no class the library names.
    ///
    /// Answers for [`Error::Database`] and for the refusal inside
    /// [`Error::MigratePermission`].
    ///
    /// ```
    /// # use jobqueue_runtime::{DbErrorKind, Error};
    /// fn worth_running_again(e: &Error) -> bool {
    ///     e.database_class().is_some_and(DbErrorKind::is_conflict)
    /// }
    /// ```
    pub fn database_class(&self) -> Option<DbErrorKind> {
        match self {
            Error::Database(e) => crate::store::errors::classify(e),
            Error::MigratePermission { source } => source.database_class(),
            _ => None,
        }
    }

    /// The MySQL/MariaDB error number behind an [`Error::Database`], if it is a server error.
    ///
    /// Specific to MySQL and MariaDB: prefer [`Error::database_class`], which names what the
    /// number means. This is for the server errors it has no class for.
    pub fn server_code(&self) -> Option<u16> {
        match self {
            Error::Database(e) => crate::store::errors::server_code(e),
            _ => None,
        }
    }

    /// The SQLSTATE behind an [`Error::Database`] from PostgreSQL (`"23505"` for a unique
    /// violation, say), if it is a server error. Prefer [`Error::database_class`]; this is for
    /// the server errors it has no class for.
    pub fn sqlstate(&self) -> Option<&str> {
        match self {
            Error::Database(e) => crate::store::errors::postgres_state(e),
            _ => None,
        }
    }
}

/// How an attempt that did not succeed asks to end.
///
/// Any error type converts into it with `?` (everything that converts into
/// `Box<dyn Error + Send + Sync>`: `std` errors, `anyhow::Error`, `String`, `&str`), and the
/// attempt is retried with the job's backoff while attempts remain. Besides:
/// - [`JobError::permanent`]: a failure that retrying cannot fix; the job fails at once.
/// - [`JobError::snooze`]: not a failure; run the job again after a delay, without spending
///   an attempt (at most the kind's `max_snoozes` times).
/// - [`JobError::cancel`]: stop for good; the job ends `cancelled`, the reason in
///   `last_error`.
///
/// `JobError` deliberately does not implement `std::error::Error`, so that the blanket
/// conversion from every error type can exist (the same choice `anyhow` makes).
pub struct JobError {
    error: BoxError,
    action: Action,
}

/// What the worker does after a [`JobError`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Action {
    Retry,
    Fail,
    Snooze(std::time::Duration),
    Cancel,
}

impl JobError {
    /// A failed attempt that may be retried (the default for `?`).
    pub fn retryable(error: impl Into<BoxError>) -> Self {
        JobError {
            error: error.into(),
            action: Action::Retry,
        }
    }

    /// A failure that retrying cannot fix: the job goes to `failed` at once, whatever attempts remain.
    pub fn permanent(error: impl Into<BoxError>) -> Self {
        JobError {
            error: error.into(),
            action: Action::Fail,
        }
    }

    /// Not a failure: the job runs again after `delay`, and this attempt is not counted
    /// against `max_attempts` (waiting for a rate limit, a resource still being prepared).
    /// `last_error` is left as it was. A kind snoozes at most `max_snoozes` times (default
    /// 100, `#[job(max_snoozes = ...)]`); the snooze after that fails the job, saying so.
    pub fn snooze(delay: std::time::Duration) -> Self {
        JobError {
            error: format!("snoozed for {delay:?}").into(),
            action: Action::Snooze(delay),
        }
    }

    /// Stops the job for good: it ends `cancelled`, not retried, `reason` kept in
    /// `last_error` and in its attempt history.
    pub fn cancel(reason: impl Into<BoxError>) -> Self {
        JobError {
            error: reason.into(),
            action: Action::Cancel,
        }
    }

    /// Whether the worker may retry the job after this error (false for a permanent error
    /// and a cancel; a snooze is not a retry either: see [`JobError::snoozed_for`]).
    pub fn is_retryable(&self) -> bool {
        self.action == Action::Retry
    }

    /// The delay of a [`JobError::snooze`].
    pub fn snoozed_for(&self) -> Option<std::time::Duration> {
        match self.action {
            Action::Snooze(d) => Some(d),
            _ => None,
        }
    }

    /// Whether this is a [`JobError::cancel`].
    pub fn is_cancel(&self) -> bool {
        self.action == Action::Cancel
    }

    /// The underlying error.
    pub fn error(&self) -> &(dyn std::error::Error + Send + Sync + 'static) {
        &*self.error
    }

    /// The underlying error, by value.
    pub fn into_inner(self) -> BoxError {
        self.error
    }
}

impl<E> From<E> for JobError
where
    E: Into<BoxError>,
{
    fn from(error: E) -> Self {
        JobError::retryable(error)
    }
}

impl fmt::Debug for JobError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("JobError")
            .field("error", &self.error)
            .field("action", &self.action)
            .finish()
    }
}

impl fmt::Display for JobError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // The whole chain: "export failed: connection reset" reads better in `last_error`
        // than the outermost message alone.
        write!(f, "{}", self.error)?;
        let mut source = self.error.source();
        while let Some(cause) = source {
            write!(f, ": {cause}")?;
            source = cause.source();
        }
        Ok(())
    }
}

#[cfg(test)]
mod typed_error_tests {
    use super::*;

    #[test]
    fn a_missing_job_is_named_by_id_or_key() {
        assert_eq!(
            Error::JobNotFound(JobRef::Id(5)).to_string(),
            "no job with id 5"
        );
        assert_eq!(
            Error::JobNotFound(JobRef::Key("a:1".into())).to_string(),
            "no job with key \"a:1\""
        );
    }

    #[test]
    fn an_unknown_status_lists_every_status() {
        let message = Error::UnknownStatus("paused".into()).to_string();
        assert_eq!(
            message,
            "unknown job status \"paused\"; expected one of scheduled, ready, blocked, running, done, failed, cancelled"
        );
    }

    #[test]
    fn schema_errors_say_how_to_fix_them() {
        for e in [
            Error::SchemaMissing,
            Error::SchemaTooOld {
                version: 1,
                needed: 2,
            },
        ] {
            let message = e.to_string();
            assert!(message.contains("jobqueue migrate"), "{message}");
            assert!(message.contains("--print-sql"), "{message}");
        }
    }
}
