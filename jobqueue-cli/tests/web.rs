//! `jobqueue web` and `jobqueue workers`, run as an operator would: where the dashboard may
//! listen, that it serves the pages, and the workers' heartbeats as a table.

use std::process::Stdio;
use std::time::Duration;

use jobqueue::testing::TestServer;
use jobqueue::Queue;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::process::{Child, Command};

async fn database(prefix: &str) -> (String, Queue) {
    let server = TestServer::shared().unwrap_or_else(|e| panic!("{e}"));
    let url = server
        .create_database(prefix)
        .await
        .expect("create a database");
    let queue = Queue::connect(&url).await.expect("connect");
    queue.migrate().await.expect("migrate");
    (url, queue)
}

fn jobqueue(url: &str, args: &[&str]) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_jobqueue"));
    c.args(args)
        .env("DATABASE_URL", url)
        .env_remove("JOBQUEUE_WEB_TOKEN")
        .env_remove("JOBQUEUE_WEB_BASIC_AUTH")
        .env_remove("RUST_LOG")
        .stdin(Stdio::null());
    c
}

/// One plain HTTP/1.1 GET for `Host: localhost`; returns the status line and the body.
async fn http_get(port: u16, path: &str, auth: Option<&str>) -> (String, String) {
    http_get_as(port, "localhost", path, auth).await
}

/// One plain HTTP/1.1 GET naming `host`; returns the status line and the body.
async fn http_get_as(port: u16, host: &str, path: &str, auth: Option<&str>) -> (String, String) {
    let mut s = tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .expect("connect to the dashboard");
    let auth = auth
        .map(|a| format!("Authorization: {a}\r\n"))
        .unwrap_or_default();
    s.write_all(
        format!("GET {path} HTTP/1.1\r\nHost: {host}\r\n{auth}Connection: close\r\n\r\n")
            .as_bytes(),
    )
    .await
    .unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).await.unwrap();
    let (head, body) = out.split_once("\r\n\r\n").unwrap_or((&out, ""));
    (
        head.lines().next().unwrap_or("").to_owned(),
        body.to_owned(),
    )
}

/// The port a dashboard started with `--listen ...:0` (and its standard error piped) bound,
/// from the line it prints once it listens. The system picks the port at the bind, so no
/// other process can take it between a probe and the dashboard's bind, and a listener
/// found on it is the dashboard. The rest of its standard error is drained.
async fn listening_port(child: &mut Child) -> u16 {
    let mut lines = BufReader::new(child.stderr.take().expect("standard error piped")).lines();
    let port = tokio::time::timeout(Duration::from_secs(30), async {
        while let Some(line) = lines
            .next_line()
            .await
            .expect("read the dashboard's output")
        {
            if let Some(rest) = line.strip_prefix("jobqueue dashboard on http://") {
                let addr = rest.split('/').next().expect("an address");
                let port = addr.rsplit_once(':').expect("a port").1;
                return port.parse::<u16>().expect("a port number");
            }
        }
        panic!("the dashboard exited before it listened");
    })
    .await
    .expect("the dashboard to listen within 30 s");
    tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
    port
}

#[tokio::test]
async fn off_loopback_the_dashboard_needs_a_token_or_a_password() {
    // Refused before any connection: the database URL points nowhere.
    let out = jobqueue(
        "mysql://app@127.0.0.1:1/none",
        &["web", "--listen", "0.0.0.0:0"],
    )
    .output()
    .await
    .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("refusing to serve the dashboard on 0.0.0.0:0 without authentication"),
        "{stderr}"
    );
    assert!(
        stderr.contains("--token") && stderr.contains("--basic-auth"),
        "{stderr}"
    );
    let out = jobqueue(
        "mysql://app@127.0.0.1:1/none",
        &["web", "--listen", "0.0.0.0:0", "--basic-auth", "nocolon"],
    )
    .output()
    .await
    .unwrap();
    assert!(String::from_utf8_lossy(&out.stderr).contains("user:password"));
    // A token that could be guessed, and a host name without authentication, are refused.
    let out = jobqueue(
        "mysql://app@127.0.0.1:1/none",
        &["web", "--listen", "0.0.0.0:0", "--token", "t0ken"],
    )
    .output()
    .await
    .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("openssl rand -base64 24"), "{stderr}");
    let out = jobqueue(
        "mysql://app@127.0.0.1:1/none",
        &["web", "--allow-host", "ops.example.com"],
    )
    .output()
    .await
    .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("ops.example.com") && stderr.contains("--token"),
        "{stderr}"
    );
    let help = jobqueue("mysql://x@127.0.0.1:1/x", &["web", "--help"])
        .output()
        .await
        .unwrap();
    assert!(String::from_utf8_lossy(&help.stdout).contains("[default: 127.0.0.1:8080]"));
}

#[tokio::test]
async fn the_cli_serves_the_dashboard_and_guards_it_off_loopback() {
    let (url, queue) = database("cli_web").await;
    queue.pause("mail").await.unwrap();

    let mut open = jobqueue(&url, &["web", "--listen", "127.0.0.1:0"])
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let port = listening_port(&mut open).await;
    let (status, body) = http_get(port, "/", None).await;
    assert!(status.contains("200"), "{status}");
    assert!(
        body.contains("mail") && body.contains("badge paused"),
        "{body}"
    );
    // A name rebound to this address is refused (DNS rebinding).
    let (status, body) = http_get_as(port, "evil.example", "/", None).await;
    assert!(status.contains("403"), "{status}");
    assert!(body.contains("--allow-host evil.example"), "{body}");
    open.kill().await.unwrap();

    // Every interface, with a token: nothing without it.
    let mut guarded = jobqueue(&url, &["web", "--listen", "0.0.0.0:0", "--read-only"])
        .env("JOBQUEUE_WEB_TOKEN", "t0ken-t0ken-t0ken-t0ken")
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let port = listening_port(&mut guarded).await;
    let (status, _) = http_get(port, "/", None).await;
    assert!(status.contains("401"), "{status}");
    let (status, body) = http_get(port, "/", Some("Bearer t0ken-t0ken-t0ken-t0ken")).await;
    assert!(status.contains("200"), "{status}");
    assert!(
        !body.contains("method=\"post\""),
        "read-only shows no action: {body}"
    );
    // Reached by another name, it names the flag that allows it.
    let (status, body) = http_get_as(
        port,
        "ops.example.com",
        "/",
        Some("Bearer t0ken-t0ken-t0ken-t0ken"),
    )
    .await;
    assert!(status.contains("403"), "{status}");
    assert!(body.contains("--allow-host ops.example.com"), "{body}");
    guarded.kill().await.unwrap();
}

#[tokio::test]
async fn workers_lists_heartbeats_with_their_leases() {
    let (url, queue) = database("cli_workers").await;
    let out = jobqueue(&url, &["workers"]).output().await.unwrap();
    assert!(String::from_utf8_lossy(&out.stdout).contains("No worker has written a heartbeat"));
    sqlx::query(
        "INSERT INTO job_queue_worker (owner, host, pid, version, queues, concurrency, running, started_at, last_seen) VALUES \
         ('app-1:42:aa', 'app-1', 42, '0.1.0', 'mail,exports', 8, 1, UTC_TIMESTAMP(6), UTC_TIMESTAMP(6))",
    )
    .execute(queue.mysql_pool().unwrap())
    .await
    .unwrap();
    sqlx::query(
        "INSERT INTO job_queue (queue, kind, task_key, payload, status, attempts, lease_owner, lease_until) \
         VALUES ('mail', 'send', 'k1', '{}', 'running', 1, 'app-1:42:aa', UTC_TIMESTAMP(6) + INTERVAL 20 SECOND)",
    )
    .execute(queue.mysql_pool().unwrap())
    .await
    .unwrap();
    let out = jobqueue(&url, &["workers"]).output().await.unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{text}");
    assert!(
        text.contains("live")
            && text.contains("app-1:42:aa")
            && text.contains("1/8")
            && text.contains("mail,exports"),
        "{text}"
    );
    assert!(text.contains("job 1 send (attempt 1), lease"), "{text}");
    let out = jobqueue(&url, &["workers", "--json"])
        .output()
        .await
        .unwrap();
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["owner"], "app-1:42:aa");
    assert_eq!(v["leases"][0]["id"], 1);
    assert_eq!(v["maintains"], false, "nobody holds the turn yet");

    // The maintenance turn's holder is shown; an expired hold is not.
    for (expires, shown) in [
        ("+ INTERVAL 10 SECOND", true),
        ("- INTERVAL 1 SECOND", false),
    ] {
        sqlx::query(&format!(
            "UPDATE job_queue_turn SET holder = 'app-1:42:aa', taken_at = UTC_TIMESTAMP(6), \
             expires_at = UTC_TIMESTAMP(6) {expires} WHERE name = 'maintenance'"
        ))
        .execute(queue.mysql_pool().unwrap())
        .await
        .unwrap();
        let out = jobqueue(&url, &["workers"]).output().await.unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        assert_eq!(text.contains("holds turn"), shown, "{text}");
        let out = jobqueue(&url, &["workers", "--json"])
            .output()
            .await
            .unwrap();
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(v["maintains"], shown, "{v}");
    }
}
