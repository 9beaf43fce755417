//! What can stop a command, and the one line that tells the operator what to do about it.

use std::io;

use crate::target::Target;

/// Why a command stopped.
#[derive(Debug)]
pub(crate) enum Failure {
    /// The queue or the database said no.
    Queue(jobqueue::Error),
    /// Writing the output failed (a closed pipe is not an error: see [`Failure::explain`]).
    Io(io::Error),
    /// The command itself refuses, with a message that says what to do instead.
    Usage(String),
}

impl From<jobqueue::Error> for Failure {
    fn from(e: jobqueue::Error) -> Failure {
        Failure::Queue(e)
    }
}

impl From<io::Error> for Failure {
    fn from(e: io::Error) -> Failure {
        Failure::Io(e)
    }
}

impl Failure {
    /// The message to print after `error: `, on one line and without the URL's password;
    /// `None` when there is nothing to say (the reader of our output went away, as with
    /// `jobqueue list | head`).
    pub(crate) fn explain(&self, target: Option<&Target>) -> Option<String> {
        let text = match self {
            Failure::Io(e) if e.kind() == io::ErrorKind::BrokenPipe => return None,
            Failure::Io(e) => format!("cannot write the output: {e}"),
            Failure::Usage(msg) => msg.clone(),
            Failure::Queue(e) => match target {
                Some(t) => explain_queue_error(e, t),
                None => e.to_string(),
            },
        };
        let one_line = text.split_whitespace().collect::<Vec<_>>().join(" ");
        Some(match target {
            Some(t) => t.scrub(&one_line),
            None => one_line,
        })
    }
}

/// The message for a queue error, with the fix, naming the database and never the password.
/// The server's error is read by its class ([`jobqueue::DbErrorKind`]), the same for MySQL's
/// error numbers and PostgreSQL's SQLSTATEs; the fix is written for the URL's database.
fn explain_queue_error(e: &jobqueue::Error, t: &Target) -> String {
    use jobqueue::{Backend, DbErrorKind as Db, Error};
    let db = t.database();
    let postgres = t.backend() == Backend::Postgres;
    // The grants a user of the job tables needs, in the URL's database's words.
    let grant_dml = if postgres {
        format!("SELECT, INSERT, UPDATE and DELETE on the job_queue tables of {db} (and CONNECT on the database)")
    } else {
        format!("SELECT, INSERT, UPDATE and DELETE on {db}.*")
    };
    match e {
        Error::Database(sqlx::Error::PoolTimedOut) => format!(
            "cannot connect to {} within {}: no server answered; check the host and port in the \
             URL and that the server is running (or wait longer with --connect-timeout)",
            t.redacted(),
            humantime::format_duration(t.connect_timeout())
        ),
        Error::Database(sqlx::Error::Io(io)) => format!(
            "cannot connect to {}: {io}; check the host and port in the URL and that the server is running",
            t.redacted()
        ),
        Error::Database(sqlx::Error::Tls(tls)) => format!(
            "TLS to {} failed: {tls}; check the {} options in the URL",
            t.redacted(),
            if postgres { "sslmode and sslrootcert" } else { "ssl-mode and ssl-ca" }
        ),
        Error::Database(sqlx::Error::Configuration(c)) => format!(
            "bad database URL {}: {c}; expected {}",
            t.redacted(),
            t.url_form()
        ),
        Error::Database(sqlx::Error::Database(server)) => {
            let msg = server.message();
            match e.database_class() {
                Some(Db::LoginDenied) => format!(
                    "the server refused the login of user {}: {msg}; check the user and password in \
                     the URL (--database-url or DATABASE_URL)",
                    t.user()
                ),
                Some(Db::DatabaseDenied) => format!(
                    "user {} may not use database {db}: {msg}; grant it {grant_dml} (and {} to run \
                     `jobqueue migrate`)",
                    t.user(),
                    if postgres { "CREATE on the schema" } else { "CREATE, ALTER, INDEX, DROP" }
                ),
                Some(Db::UnknownDatabase) => format!(
                    "database {db} does not exist on the server; create it (CREATE DATABASE {db}) \
                     and run `jobqueue migrate`, or fix the database name in the URL"
                ),
                Some(Db::NoDatabaseSelected) => format!(
                    "the database URL names no database; add one: {}",
                    t.url_form()
                ),
                Some(Db::MissingTable) => format!(
                    "table {} does not exist in database {db}; run `jobqueue migrate` first",
                    missing_table(msg).unwrap_or("job_queue")
                ),
                Some(Db::UnknownColumn) => format!(
                    "the job tables of database {db} are older than this jobqueue ({msg}); run \
                     `jobqueue migrate`"
                ),
                Some(Db::TableDenied | Db::ColumnDenied) => format!(
                    "user {} lacks a privilege: {msg}; grant it {grant_dml}",
                    t.user()
                ),
                _ => format!("the database said: {msg}"),
            }
        }
        // The runtime's configuration messages already say what to do.
        Error::InvalidSetting { reason: msg, .. } => msg.clone(),
        Error::JobNotFound(what) => {
            format!("no job {what} in database {db}; `jobqueue list` shows the jobs there are")
        }
        other => other.to_string(),
    }
}

/// `job_queue` out of MySQL's "Table 'shop.job_queue' doesn't exist" or PostgreSQL's
/// `relation "job_queue" does not exist`.
fn missing_table(msg: &str) -> Option<&str> {
    let quote = if msg.contains('\'') { '\'' } else { '"' };
    let quoted = msg.split(quote).nth(1)?;
    Some(quoted.rsplit('.').next().unwrap_or(quoted))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn missing_table_names() {
        assert_eq!(
            missing_table("Table 'shop.job_queue' doesn't exist"),
            Some("job_queue")
        );
        assert_eq!(
            missing_table("Table 'job_queue_pause' doesn't exist"),
            Some("job_queue_pause")
        );
        assert_eq!(
            missing_table("relation \"job_queue_pause\" does not exist"),
            Some("job_queue_pause")
        );
        assert_eq!(missing_table("no quotes"), None);
    }

    #[test]
    fn messages_are_one_line_and_scrubbed() {
        let t = Target::new(
            "mysql://app:hunter22@db/shop".into(),
            std::time::Duration::from_secs(1),
        );
        let f = Failure::Usage("bad\nthing with hunter22".into());
        assert_eq!(f.explain(Some(&t)).unwrap(), "bad thing with ***");
        let pipe = Failure::Io(io::Error::from(io::ErrorKind::BrokenPipe));
        assert_eq!(pipe.explain(Some(&t)), None);
    }
}
