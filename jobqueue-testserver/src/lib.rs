//! A throwaway MariaDB/MySQL or PostgreSQL server for tests and examples.
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
//! # PostgreSQL
//!
//! [`TestServer::shared_postgres`] and [`TestServer::start_postgres`] are the same for
//! PostgreSQL 13 or newer, and the same methods work on the servers they give
//! ([`TestServer::backend`] tells them apart):
//!
//! * `JOBQUEUE_TEST_POSTGRES_URL` (`postgres://postgres@127.0.0.1:5432/postgres`) names a
//!   server to use instead of starting one. Databases are created and dropped over a
//!   connection to its `postgres` database, whatever database the URL names;
//! * otherwise the server is started from the `initdb` and `postgres` binaries of one folder:
//!   the first on `PATH`, else in `/usr/lib/postgresql/<version>/bin` (the newest version
//!   first), else in `/usr/local/pgsql/bin`. Its cluster is made with
//!   `initdb -U postgres --auth=trust -E UTF8 --locale=C --no-sync` in a temporary folder that
//!   also holds its socket; it listens on a free port of 127.0.0.1 without `fsync`. When the
//!   tests run as root, PostgreSQL (which refuses root) runs as the account `postgres`, or
//!   `nobody` when there is none. It is stopped with `SIGINT`, PostgreSQL's fast shutdown, and
//!   cleaned up as the MariaDB/MySQL servers are (below).
//!
//! Without the binaries and the variable, both return [`Error::NotInstalled`], saying how to
//! install them (`apt-get install postgresql`, `brew install postgresql`) or to set the
//! variable.
//!
//! ```no_run
//! use jobqueue_testserver::{Backend, TestServer};
//!
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! let server = TestServer::shared_postgres()?;
//! assert_eq!(server.backend(), Backend::Postgres);
//! let url = server.create_database("enqueue_twice").await?;
//! let pool = sqlx::PgPool::connect(&url).await?;
//! // ...
//! pool.close().await;
//! let name = url.rsplit('/').next().unwrap_or_default();
//! server.drop_database_blocking(name)?;
//! # Ok(()) }
//! ```
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
//! * `JOBQUEUE_TEST_POSTGRES_URL`: use this PostgreSQL server instead of starting one.
//! * `JOBQUEUE_TEST_SERVER_BINARY`: the server binary to start (for example a `mysqld` when a
//!   `mariadbd` is installed as well), instead of searching for one.
//! * `JOBQUEUE_TEST_SERVER_ARGS`: more options for the servers this crate starts, separated
//!   by spaces (for example `--innodb-lock-wait-timeout=5`); they come last and so win over
//!   the defaults. They are not given to PostgreSQL servers.
//! * `JOBQUEUE_TEST_POSTGRES_ARGS`: the same for the PostgreSQL servers this crate starts, as
//!   `postgres` options (for example `-c ssl=on -c ssl_cert_file=/path/cert.pem`).

mod discovery;
mod error;
mod launch;
mod server;
mod url;

pub use discovery::{
    find_postgres_binary, find_server_binary, postgres_search_dirs, server_search_dirs, Backend,
    Flavor, ServerBinary,
};
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
    use sqlx::{Connection as _, MySqlConnection, PgConnection};

    use crate::discovery::*;
    use crate::server::*;
    use crate::url::*;

    #[test]
    fn database_names_are_unique_sanitized_and_short() {
        let a = unique_database_name(Backend::MySql, "Enqueue-Twice!");
        let b = unique_database_name(Backend::MySql, "Enqueue-Twice!");
        assert_ne!(a, b);
        assert!(a.starts_with("jqtest_enqueue_twice__"), "{a}");
        let long = unique_database_name(Backend::MySql, &"x".repeat(200));
        assert!(long.len() <= 64, "{long}");
        assert!(long.starts_with("jqtest_xxx"));
        for name in [&a, &b, &long, &unique_database_name(Backend::MySql, "")] {
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
            backend: Backend::MySql,
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
    fn postgres_database_names_fit_63_bytes() {
        let long = unique_database_name(Backend::Postgres, &"x".repeat(200));
        assert_eq!(long.len(), 63, "{long}");
        assert!(long.starts_with("jqtest_xxx"), "{long}");
        let short = unique_database_name(Backend::Postgres, "Enqueue-Twice!");
        assert!(short.starts_with("jqtest_enqueue_twice__"), "{short}");
    }

    #[test]
    fn postgres_urls_get_their_database_replaced() {
        for (url, with_d, maintenance) in [
            (
                "postgres://postgres@127.0.0.1:5432/postgres",
                "postgres://postgres@127.0.0.1:5432/d",
                "postgres://postgres@127.0.0.1:5432/postgres",
            ),
            (
                "postgres://postgres@127.0.0.1:5432",
                "postgres://postgres@127.0.0.1:5432/d",
                "postgres://postgres@127.0.0.1:5432/postgres",
            ),
            (
                "postgresql://u:p@h:1/app_test?sslmode=disable",
                "postgresql://u:p@h:1/d?sslmode=disable",
                "postgresql://u:p@h:1/postgres?sslmode=disable",
            ),
            (
                "postgres://u@h/?application_name=t",
                "postgres://u@h/d?application_name=t",
                "postgres://u@h/postgres?application_name=t",
            ),
        ] {
            assert_eq!(url_with_database(url, "d"), with_d, "{url}");
            assert_eq!(server_url(Backend::Postgres, url), maintenance, "{url}");
        }
        // MySQL's server statements still run without a database.
        assert_eq!(
            server_url(Backend::MySql, "mysql://root@127.0.0.1:3306/test"),
            "mysql://root@127.0.0.1:3306"
        );
        assert_eq!(
            Flavor::Postgres.local_url(5433),
            "postgres://postgres@127.0.0.1:5433/postgres"
        );
    }

    #[test]
    fn a_postgres_url_variable_must_hold_a_postgres_url() {
        let err = TestServer::external_postgres("mysql://root@127.0.0.1:3306".to_owned())
            .unwrap_err()
            .to_string();
        assert!(err.contains(POSTGRES_URL_VAR), "{err}");
        for url in ["postgres://h/postgres", "postgresql://h/postgres"] {
            let server = TestServer::external_postgres(url.to_owned()).unwrap();
            assert_eq!(server.backend(), Backend::Postgres);
            assert_eq!(
                (server.url(), server.port(), server.dir()),
                (url, None, None)
            );
            let err = server.stop().unwrap_err().to_string();
            assert!(err.contains(POSTGRES_URL_VAR), "{err}");
            assert!(err.contains("TestServer::start_postgres"), "{err}");
        }
    }

    /// Runs `f` on a runtime of its own.
    fn run<T>(f: impl std::future::Future<Output = T>) -> T {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap()
            .block_on(f)
    }

    /// How many databases named `name` the PostgreSQL server at `url` has.
    async fn postgres_databases_named(url: &str, name: &str) -> i64 {
        let mut conn = PgConnection::connect(&server_url(Backend::Postgres, url))
            .await
            .unwrap();
        let count = sqlx::query_scalar("SELECT COUNT(*) FROM pg_database WHERE datname = $1")
            .bind(name)
            .fetch_one(&mut conn)
            .await
            .unwrap();
        conn.close().await.unwrap();
        count
    }

    /// A database made on the shared PostgreSQL server holds tables, and is dropped even while
    /// a session is still connected to it.
    #[test]
    fn a_postgres_database_is_created_and_dropped_on_the_shared_server() {
        let server = TestServer::shared_postgres().unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(server.backend(), Backend::Postgres);
        run(async {
            let url = server.create_database("pg_create").await.unwrap();
            let mut conn = PgConnection::connect(&url).await.unwrap();
            let (name, encoding): (String, String) =
                sqlx::query_as("SELECT current_database()::text, pg_client_encoding()::text")
                    .fetch_one(&mut conn)
                    .await
                    .unwrap();
            assert!(name.starts_with("jqtest_pg_create_"), "{name}");
            assert_eq!(encoding, "UTF8");
            sqlx::raw_sql("CREATE TABLE t (x INTEGER); INSERT INTO t VALUES (42)")
                .execute(&mut conn)
                .await
                .unwrap();
            let x: i32 = sqlx::query_scalar("SELECT x FROM t")
                .fetch_one(&mut conn)
                .await
                .unwrap();
            assert_eq!(x, 42);
            assert_eq!(postgres_databases_named(server.url(), &name).await, 1);

            // `conn` still uses the database.
            server.drop_database_blocking(&name).unwrap();
            assert_eq!(postgres_databases_named(server.url(), &name).await, 0);
            assert!(
                sqlx::query("SELECT 1").execute(&mut conn).await.is_err(),
                "the dropped database's session was ended"
            );
            let err = server.drop_database_blocking("postgres").unwrap_err();
            assert!(err.to_string().contains("refusing"), "{err}");
        });
    }

    /// A URL naming a database that does not exist still serves: server statements go to the
    /// `postgres` database.
    #[test]
    fn a_postgres_url_naming_a_missing_database_makes_and_drops_databases() {
        let shared = TestServer::shared_postgres().unwrap_or_else(|e| panic!("{e}"));
        let server = TestServer {
            url: url_with_database(shared.url(), "jqtest_never_created"),
            backend: Backend::Postgres,
            local: None,
        };
        let url = run(server.create_database("missing_in_url")).unwrap();
        let name = url.rsplit('/').next().unwrap().to_owned();
        assert!(name.starts_with("jqtest_missing_in_url_"), "{name}");
        run(async {
            let mut conn = PgConnection::connect(&url).await.unwrap();
            sqlx::query("SELECT 1").execute(&mut conn).await.unwrap();
            conn.close().await.unwrap();
        });
        server.drop_database_blocking(&name).unwrap();
        run(async {
            assert_eq!(postgres_databases_named(shared.url(), &name).await, 0);
            assert_eq!(
                postgres_databases_named(shared.url(), "jqtest_never_created").await,
                0
            );
        });
    }

    /// Whether process `pid` still exists; a zombie counts as gone (it runs nothing).
    fn process_alive(pid: u32) -> bool {
        match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
            Ok(stat) => !stat[stat.rfind(')').expect("a stat line") + 1..]
                .trim_start()
                .starts_with('Z'),
            Err(_) if std::path::Path::new("/proc/self/stat").exists() => false,
            // No /proc: ask `kill`.
            Err(_) => std::process::Command::new("kill")
                .args(["-0", &pid.to_string()])
                .stderr(std::process::Stdio::null())
                .status()
                .is_ok_and(|s| s.success()),
        }
    }

    /// Set for the helper process of [`a_killed_test_process_leaves_no_postgres_server`].
    const HOLD_VAR: &str = "JOBQUEUE_TEST_HOLD_POSTGRES";

    /// Not a test: the process that
    /// [`a_killed_test_process_leaves_no_postgres_server`] starts and kills. It holds a private
    /// PostgreSQL server until it is killed.
    #[test]
    #[ignore = "a helper process of a_killed_test_process_leaves_no_postgres_server"]
    fn hold_a_private_postgres_server() {
        if std::env::var_os(HOLD_VAR).is_none() {
            return; // Run by hand (`--include-ignored`): nothing to hold for.
        }
        let server = TestServer::start_postgres().unwrap_or_else(|e| panic!("{e}"));
        println!(
            "READY {} {}",
            server.server_pid().unwrap(),
            server.dir().unwrap().display()
        );
        // Killed long before this; the bound keeps a stray helper from lingering.
        std::thread::sleep(std::time::Duration::from_secs(120));
    }

    /// A test process killed with SIGKILL runs no destructor: its PostgreSQL server (stopped
    /// by the watchdog) and its folder go away all the same.
    #[test]
    fn a_killed_test_process_leaves_no_postgres_server() {
        use std::io::BufRead as _;
        let mut child = std::process::Command::new(std::env::current_exe().unwrap())
            .args([
                "--exact",
                "tests::hold_a_private_postgres_server",
                "--ignored",
                "--nocapture",
            ])
            .env(HOLD_VAR, "1")
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let ready = std::io::BufReader::new(child.stdout.take().unwrap())
            .lines()
            .map_while(std::result::Result::ok)
            .find_map(|line| line.strip_prefix("READY ").map(str::to_owned))
            .unwrap_or_else(|| panic!("the helper exited: {:?}", child.wait()));
        let (pid, dir) = ready.split_once(' ').expect("a pid and a folder");
        let (pid, dir): (u32, std::path::PathBuf) = (pid.parse().unwrap(), dir.into());
        assert!(dir.join("data").is_dir());
        assert!(process_alive(pid), "the server {pid} runs");

        child.kill().unwrap(); // SIGKILL
        child.wait().unwrap();
        let began = std::time::Instant::now();
        while dir.exists() || process_alive(pid) {
            assert!(
                began.elapsed() < std::time::Duration::from_secs(60),
                "server process {pid} or {} still there 60s after its holder was killed",
                dir.display()
            );
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
    }

    /// A private PostgreSQL server keeps its data across a stop and a restart on the same
    /// port, refuses connections while stopped, and leaves neither process nor folder behind
    /// when dropped.
    #[test]
    fn a_private_postgres_server_stops_restarts_and_goes_away() {
        let server = TestServer::start_postgres().unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(server.backend(), Backend::Postgres);
        let port = server.port().unwrap();
        assert_eq!(
            server.url(),
            format!("postgres://postgres@127.0.0.1:{port}/postgres")
        );
        let dir = server.dir().unwrap().to_owned();
        assert!(dir.join("data").join("PG_VERSION").is_file());
        assert!(dir.join(format!(".s.PGSQL.{port}")).exists(), "its socket");
        let url = run(server.create_database("private")).unwrap();
        run(async {
            let mut conn = PgConnection::connect(&url).await.unwrap();
            let settings: Vec<String> = sqlx::query_scalar(
                "SELECT name || '=' || setting FROM pg_settings WHERE name IN \
                 ('fsync', 'synchronous_commit', 'full_page_writes', 'max_connections', \
                  'listen_addresses') ORDER BY name",
            )
            .fetch_all(&mut conn)
            .await
            .unwrap();
            assert_eq!(
                settings,
                [
                    "fsync=off",
                    "full_page_writes=off",
                    "listen_addresses=127.0.0.1",
                    "max_connections=300",
                    "synchronous_commit=off"
                ]
            );
            sqlx::raw_sql("CREATE TABLE t (x INTEGER); INSERT INTO t VALUES (7)")
                .execute(&mut conn)
                .await
                .unwrap();
            // Kept open: a fast shutdown ends it rather than waiting for it.
            let first_pid = server.server_pid().unwrap();
            server.stop().unwrap();
            assert!(server.server_pid().is_none());
            assert!(!process_alive(first_pid), "{first_pid} runs after stop");
            assert!(PgConnection::connect(&url).await.is_err());
            server.stop().unwrap();

            server.restart().unwrap();
            assert_eq!(server.port(), Some(port));
            let mut conn = PgConnection::connect(&url).await.unwrap();
            let x: i32 = sqlx::query_scalar("SELECT x FROM t")
                .fetch_one(&mut conn)
                .await
                .unwrap();
            assert_eq!(x, 7);
        });
        let pid = server.server_pid().expect("a running server has a process");
        drop(server);
        assert!(!dir.exists(), "{} is left after drop", dir.display());
        assert!(!process_alive(pid), "server process {pid} runs after drop");
    }

    #[test]
    fn missing_postgres_binaries_give_install_advice() {
        let only_server = tempfile::tempdir().unwrap();
        write_executable(&only_server.path().join("postgres"));
        for dirs in [
            vec![],
            vec![std::path::PathBuf::from("/nonexistent/jobqueue/bin")],
            // `initdb` is missing beside it.
            vec![only_server.path().to_owned()],
        ] {
            let err = find_postgres_binary(&dirs).unwrap_err();
            assert!(matches!(err, Error::NotInstalled(_)), "{err:?}");
            let err = err.to_string();
            for advice in [
                "apt-get install postgresql",
                "brew install postgresql",
                "JOBQUEUE_TEST_POSTGRES_URL=postgres://",
            ] {
                assert!(err.contains(advice), "{advice:?} missing from: {err}");
            }
        }
    }

    #[test]
    fn postgres_binaries_come_from_one_folder_and_the_newest_version() {
        let root = tempfile::tempdir().unwrap();
        for version in ["9.6", "13", "15", "not-a-version"] {
            let bin = root.path().join(version).join("bin");
            std::fs::create_dir_all(&bin).unwrap();
            write_executable(&bin.join("postgres"));
            write_executable(&bin.join("initdb"));
        }
        let dirs = versioned_bin_dirs(root.path());
        assert_eq!(
            dirs,
            ["15", "13", "9.6"].map(|v| root.path().join(v).join("bin"))
        );
        // A folder with `postgres` alone is passed over for one with both.
        let lone = tempfile::tempdir().unwrap();
        write_executable(&lone.path().join("postgres"));
        let found = find_postgres_binary(&[lone.path().to_owned(), dirs[1].clone()]).unwrap();
        assert_eq!(found.path, dirs[1].join("postgres"));
        assert_eq!(found.flavor, Flavor::Postgres);
        assert_eq!(found.flavor.backend(), Backend::Postgres);
        assert_eq!(Flavor::MariaDb.backend(), Backend::MySql);
    }

    fn write_executable(path: &std::path::Path) {
        std::fs::write(path, "#!/bin/sh\nexit 1\n").unwrap();
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt as _;
            std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755)).unwrap();
        }
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
