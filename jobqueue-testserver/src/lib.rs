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

mod discovery;
mod error;
mod launch;
mod server;
mod url;

pub use discovery::{find_server_binary, server_search_dirs, Flavor, ServerBinary};
pub use error::{Error, Result};
pub use server::TestServer;

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
    use sqlx::{Connection as _, MySqlConnection};

    use crate::discovery::*;
    use crate::server::*;
    use crate::url::*;

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
