//! The throwaway server the tests run on (`jobqueue::testing::TestServer`).

use std::io::{BufRead as _, BufReader};
use std::net::TcpStream;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use jobqueue::testing::TestServer;
use jobqueue_testserver::find_server_binary;
use sqlx::{Connection as _, MySqlConnection, Row as _};

/// The program that holds a private server until it is killed (`src/bin/hold-test-server.rs`).
const HOLDER_BIN: &str = env!("CARGO_BIN_EXE_hold-test-server");

/// Whether process `pid` still exists (a zombie counts as gone: it runs nothing). By pid,
/// not by port: another test's private server may listen on a port this one gave up.
fn process_alive(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .map(|stat| {
            let state = stat[stat.rfind(')').expect("a stat line") + 1..].trim_start();
            !state.starts_with('Z')
        })
        .unwrap_or(false)
}

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
    let pid = server.server_pid().expect("a running server has a process");
    drop(server);
    assert!(!dir.exists(), "{} is left after drop", dir.display());
    assert!(!process_alive(pid), "server process {pid} runs after drop");
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
    let mut child = Command::new(HOLDER_BIN)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut ready = None;
    for line in BufReader::new(child.stdout.take().unwrap()).lines() {
        let line = line.unwrap();
        if let Some(rest) = line.strip_prefix("READY ") {
            ready = Some(rest.to_owned());
            break;
        }
    }
    let ready = ready.unwrap_or_else(|| panic!("the helper exited: {:?}", child.wait()));
    let fields: Vec<&str> = ready.splitn(3, ' ').collect();
    let [port, pid, dir] = fields[..] else {
        panic!("READY {ready}: not a port, a pid and a folder");
    };
    let (port, dir, pid): (u16, PathBuf, u32) =
        (port.parse().unwrap(), dir.into(), pid.parse().unwrap());
    assert!(dir.is_dir());
    assert!(process_alive(pid));
    assert!(TcpStream::connect(("127.0.0.1", port)).is_ok());

    child.kill().unwrap(); // SIGKILL
    child.wait().unwrap();
    let began = Instant::now();
    while dir.exists() || process_alive(pid) {
        assert!(
            began.elapsed() < Duration::from_secs(60),
            "server process {pid} or {} still there 60s after its holder was killed",
            dir.display()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    eprintln!("cleaned up {:?} after the kill", began.elapsed());
}
