//! The database a command works on: its URL, shown only with the password hidden, and the
//! connection to it.

use std::str::FromStr;
use std::time::Duration;

use jobqueue::{Backend, Queue, QueueConfig};
use sqlx::mysql::MySqlConnectOptions;
use sqlx::postgres::PgConnectOptions;

/// The database named on the command line, and what messages may say about it.
#[derive(Debug)]
pub(crate) struct Target {
    /// The URL as given: only ever passed to the driver.
    url: String,
    /// The URL with its password replaced by `***`: the only form ever printed.
    redacted: String,
    /// The password as written in the URL and percent-decoded, to scrub from any text that
    /// could have picked it up (a server or driver message quoting the URL).
    secrets: Vec<String>,
    /// The database part of the URL, if it parses and has one.
    database: Option<String>,
    /// The user part of the URL, if it parses.
    user: Option<String>,
    /// How long a connection attempt may take.
    connect_timeout: Duration,
    /// The database the URL's scheme names, if it names one the queue runs on.
    backend: Option<Backend>,
}

impl Target {
    /// The database at `url`; connections give up after `connect_timeout`.
    pub(crate) fn new(url: String, connect_timeout: Duration) -> Target {
        let backend = Backend::of_url(&url);
        let (database, user) = match backend {
            Some(Backend::Postgres) => match PgConnectOptions::from_str(&url) {
                // PostgreSQL connects to the database named after the user when the URL
                // names none; only a database the URL names is shown.
                Ok(o) if url_names_database(&url) => (
                    o.get_database().map(str::to_owned),
                    Some(o.get_username().to_owned()),
                ),
                Ok(o) => (None, Some(o.get_username().to_owned())),
                Err(_) => (None, None),
            },
            _ => {
                let options = MySqlConnectOptions::from_str(&url).ok();
                (
                    options
                        .as_ref()
                        .and_then(|o| o.get_database().map(str::to_owned)),
                    options.as_ref().map(|o| o.get_username().to_owned()),
                )
            }
        };
        let mut secrets = Vec::new();
        if let Some(raw) = password_of(&url) {
            let decoded = percent_decode(&raw);
            if decoded != raw {
                secrets.push(decoded);
            }
            secrets.push(raw);
        }
        // Longest first, so that a password containing another one is replaced whole.
        secrets.sort_by_key(|s| std::cmp::Reverse(s.len()));
        secrets.retain(|s| !s.is_empty());
        Target {
            redacted: jobqueue::admin::redact_url(&url),
            url,
            secrets,
            database,
            user,
            connect_timeout,
            backend,
        }
    }

    /// The database the URL names by its scheme (MySQL when it names none the queue knows:
    /// such a URL is refused before any connection).
    pub(crate) fn backend(&self) -> Backend {
        self.backend.unwrap_or(Backend::MySql)
    }

    /// The URL's form for this database, for messages that ask for a fix to it.
    pub(crate) fn url_form(&self) -> &'static str {
        match self.backend() {
            Backend::Postgres => "postgres://user:password@host:port/DATABASE",
            _ => "mysql://user:password@host:port/DATABASE",
        }
    }

    /// Connects. Read-only commands skip the server checks that protect workers (a read-only
    /// replica is fine to look at); commands that change jobs keep them.
    pub(crate) async fn connect(&self, changes_jobs: bool) -> jobqueue::Result<Queue> {
        // Only the schemes of the databases the queue runs on: an SQLite URL, say, given by
        // mistake would otherwise end in a confusing connection error.
        if self.backend.is_none() {
            return Err(jobqueue::Error::InvalidUrl {
                url: self.redacted.clone(),
                reason: "it is not a MySQL, MariaDB or PostgreSQL URL (mysql://, mariadb://, \
                         postgres:// or postgresql://)"
                    .into(),
            });
        }
        let config = QueueConfig::default()
            .max_connections(2)
            .acquire_timeout(self.connect_timeout)
            .check_server(changes_jobs);
        Queue::connect_with(&self.url, config).await
    }

    /// The URL as it may be shown.
    pub(crate) fn redacted(&self) -> &str {
        &self.redacted
    }

    /// The database's name, or a placeholder when the URL names none.
    pub(crate) fn database(&self) -> &str {
        self.database.as_deref().unwrap_or("(none)")
    }

    /// Whether the URL names a database.
    pub(crate) fn has_database(&self) -> bool {
        self.database.is_some()
    }

    /// The user the URL logs in as.
    pub(crate) fn user(&self) -> &str {
        self.user.as_deref().unwrap_or("?")
    }

    /// How long a connection attempt may take.
    pub(crate) fn connect_timeout(&self) -> Duration {
        self.connect_timeout
    }

    /// `text` with the URL and any trace of its password replaced, safe to print.
    pub(crate) fn scrub(&self, text: &str) -> String {
        let mut out = text.replace(&self.url, &self.redacted);
        for secret in &self.secrets {
            out = out.replace(secret.as_str(), "***");
        }
        out
    }
}

/// Whether `scheme://authority/DATABASE...` has a non-empty path, the database's name.
fn url_names_database(url: &str) -> bool {
    let Some((_, rest)) = url.split_once("://") else {
        return false;
    };
    let rest = rest.split(['?', '#']).next().unwrap_or("");
    rest.split_once('/')
        .is_some_and(|(_, path)| !path.is_empty())
}

/// The password of `scheme://user:password@host...`, as written. Broader than the URL
/// grammar on purpose (it takes the last `@`), so that a password with an unescaped `/` or
/// `@` is still found.
fn password_of(url: &str) -> Option<String> {
    let rest = &url[url.find("://")? + 3..];
    let userinfo = &rest[..rest.rfind('@')?];
    let (_, password) = userinfo.split_once(':')?;
    Some(password.to_owned())
}

/// `s` with `%XX` escapes decoded (invalid ones kept as they are).
fn percent_decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' && i + 2 < bytes.len() {
            let hex = std::str::from_utf8(&bytes[i + 1..i + 3]).ok();
            if let Some(b) = hex.and_then(|h| u8::from_str_radix(h, 16).ok()) {
                out.push(b);
                i += 3;
                continue;
            }
        }
        out.push(bytes[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn target(url: &str) -> Target {
        Target::new(url.to_owned(), Duration::from_secs(1))
    }

    #[test]
    fn passwords_never_survive_scrubbing() {
        let t = target("mysql://app:p%40ss%2Fw0rd@db:3306/shop");
        assert_eq!(t.redacted(), "mysql://app:***@db:3306/shop");
        assert_eq!(t.database(), "shop");
        assert_eq!(t.user(), "app");
        let msg = "login with p@ss/w0rd failed for mysql://app:p%40ss%2Fw0rd@db:3306/shop";
        assert_eq!(
            t.scrub(msg),
            "login with *** failed for mysql://app:***@db:3306/shop"
        );
    }

    #[test]
    fn urls_without_password_or_database() {
        let t = target("mysql://root@localhost");
        assert_eq!(t.redacted(), "mysql://root@localhost");
        assert!(!t.has_database());
        assert_eq!(t.scrub("root"), "root");
        let t = target("not a url");
        assert_eq!(t.database(), "(none)");
    }

    #[test]
    fn postgres_urls_name_their_user_and_database() {
        let t = target("postgres://app:s%40cret@db:5432/shop?sslmode=disable");
        assert_eq!(t.backend(), Backend::Postgres);
        assert_eq!(
            t.redacted(),
            "postgres://app:***@db:5432/shop?sslmode=disable"
        );
        assert_eq!(t.database(), "shop");
        assert_eq!(t.user(), "app");
        assert_eq!(t.scrub("s@cret"), "***");
        let t = target("postgresql://app@db");
        assert_eq!(t.backend(), Backend::Postgres);
        assert!(!t.has_database());
        assert_eq!(t.user(), "app");
        assert_eq!(target("mariadb://root@h/x").backend(), Backend::MySql);
    }

    #[test]
    fn percent_decoding() {
        assert_eq!(percent_decode("a%20b%2"), "a b%2");
        assert_eq!(percent_decode("%zz%41"), "%zzA");
    }
}
