//! The throwaway server the tests run on (`jobqueue::testing::TestServer`).

use std::io::{BufRead as _, BufReader};
use std::net::TcpStream;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use jobqueue::testing::TestServer;
use jobqueue_testserver::find_server_binary;
use sqlx::{Connection as _, MySqlConnection, Row as _};

/// Set in the environment of the child process that `killed_process_leaves_no_server` starts.
const HELPER_VAR: &str = "JOBQUEUE_TEST_SERVER_HELPER";

#[tokio::test]
async fn shared_server_answers_queries() {
    let server = TestServer::shared().unwrap_or_else(|e| panic!("{e}"));
    let mut conn = MySqlConnection::connect(server.url()).await.unwrap();
    let version: String = sqlx::query("SELECT VERSION()")
        .fetch_one(&mut conn)
        .await
        .unwrap()
        .get(0);
    assert!(
        version.starts_with(|c: char| c.is_ascii_digit()),
        "{version}"
    );
    // The same server for every caller in the process.
    assert!(std::ptr::eq(server, TestServer::shared().unwrap()));
}

#[tokio::test]
async fn each_created_database_is_new_and_separate() {
    let server = TestServer::shared().unwrap_or_else(|e| panic!("{e}"));
    let first = server.create_database("separate").await.unwrap();
    let second = server.create_database("separate").await.unwrap();
    assert_ne!(first, second);

    let mut a = MySqlConnection::connect(&first).await.unwrap();
    let mut b = MySqlConnection::connect(&second).await.unwrap();
    sqlx::raw_sql("CREATE TABLE t (x INT)")
        .execute(&mut a)
        .await
        .unwrap();
    let tables: Vec<String> = sqlx::query_scalar(
        "SELECT CAST(table_name AS CHAR) FROM information_schema.tables WHERE table_schema = DATABASE()",
    )
    .fetch_all(&mut b)
    .await
    .unwrap();
    assert!(tables.is_empty(), "{tables:?}");

    let (name, charset): (String, String) =
        sqlx::query_as("SELECT CAST(DATABASE() AS CHAR), CAST(@@character_set_database AS CHAR)")
            .fetch_one(&mut a)
            .await
            .unwrap();
    assert!(name.starts_with("jqtest_separate_"), "{name}");
    assert!(first.ends_with(&format!("/{name}")), "{first}");
    assert_eq!(charset, "utf8mb4");
}

#[tokio::test]
async fn private_server_keeps_its_data_across_a_restart() {
    let server = TestServer::start().unwrap_or_else(|e| panic!("{e}"));
    let port = server.port().expect("a server of our own has a port");
    assert_eq!(server.url(), format!("mysql://root@127.0.0.1:{port}"));
    assert_ne!(Some(port), TestServer::shared().ok().and_then(|s| s.port()));

    let url = server.create_database("restart").await.unwrap();
    let mut conn = MySqlConnection::connect(&url).await.unwrap();
    sqlx::raw_sql("CREATE TABLE t (x INT); INSERT INTO t VALUES (42)")
        .execute(&mut conn)
        .await
        .unwrap();
    drop(conn);

    server.stop().unwrap();
    assert_eq!(server.server_pid(), None);
    let refused = MySqlConnection::connect(&url).await;
    assert!(refused.is_err(), "connected to a stopped server");
    server.stop().unwrap(); // stopping a stopped server does nothing

    let began = Instant::now();
    server.restart().unwrap();
    eprintln!("restart took {:?}", began.elapsed());
    assert_eq!(server.port(), Some(port));
    let mut conn = MySqlConnection::connect(&url).await.unwrap();
    let x: i32 = sqlx::query_scalar("SELECT x FROM t")
        .fetch_one(&mut conn)
        .await
        .unwrap();
    assert_eq!(x, 42);
    drop(conn);

    // Restarting a running server stops it first.
    server.restart().unwrap();
    let mut conn = MySqlConnection::connect(&url).await.unwrap();
    sqlx::query("SELECT 1").execute(&mut conn).await.unwrap();
    drop(conn);

    let dir = server.dir().unwrap().to_owned();
    assert!(dir.join("data").is_dir());
    drop(server);
    assert!(!dir.exists(), "{} is left after drop", dir.display());
    assert!(TcpStream::connect(("127.0.0.1", port)).is_err());
}

#[test]
fn missing_server_binary_says_how_to_install_one() {
    for dirs in [vec![], vec![PathBuf::from("/nonexistent/jobqueue/bin")]] {
        let message = find_server_binary(&dirs).unwrap_err().to_string();
        for advice in [
            "apt-get install mariadb-server",
            "brew install mariadb",
            "JOBQUEUE_TEST_DATABASE_URL=mysql://user:pass@host:port",
        ] {
            assert!(
                message.contains(advice),
                "{advice:?} missing from: {message}"
            );
        }
    }
}

/// A test process killed with SIGKILL runs no destructor: its server and data directory must
/// go away all the same.
#[test]
fn killed_process_leaves_no_server() {
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "hold_a_server_until_killed",
            "--ignored",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(HELPER_VAR, "1")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut ready = None;
    for line in BufReader::new(child.stdout.take().unwrap()).lines() {
        let line = line.unwrap();
        // libtest prints the test's name on the same line first.
        if let Some((_, rest)) = line.split_once("READY ") {
            ready = Some(rest.to_owned());
            break;
        }
    }
    let ready = ready.unwrap_or_else(|| panic!("the helper exited: {:?}", child.wait()));
    let (port, dir) = ready.split_once(' ').unwrap();
    let (port, dir): (u16, PathBuf) = (port.parse().unwrap(), dir.into());
    assert!(dir.is_dir());
    assert!(TcpStream::connect(("127.0.0.1", port)).is_ok());

    child.kill().unwrap(); // SIGKILL
    child.wait().unwrap();
    let began = Instant::now();
    while dir.exists() || TcpStream::connect(("127.0.0.1", port)).is_ok() {
        assert!(
            began.elapsed() < Duration::from_secs(60),
            "server on port {port} or {} still there 60s after its process was killed",
            dir.display()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    eprintln!("cleaned up {:?} after the kill", began.elapsed());
}

/// Run by `killed_process_leaves_no_server` in a child process; does nothing otherwise.
#[test]
#[ignore = "helper of killed_process_leaves_no_server"]
fn hold_a_server_until_killed() {
    if std::env::var_os(HELPER_VAR).is_none() {
        return;
    }
    let server = TestServer::start().unwrap_or_else(|e| panic!("{e}"));
    println!(
        "READY {} {}",
        server.port().unwrap(),
        server.dir().unwrap().display()
    );
    // Killed long before this; the bound keeps a stray helper from lingering.
    std::thread::sleep(Duration::from_secs(120));
}
