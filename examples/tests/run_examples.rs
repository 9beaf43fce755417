//! Runs every example as a newcomer would, each against a new database of the test server,
//! and checks what it prints and leaves in the tables.

use std::path::PathBuf;
use std::process::Output;

use jobqueue::testing::TestServer;
use jobqueue::Backend;

/// The example binaries `cargo test` builds next to this test's own binary.
fn example(name: &str) -> PathBuf {
    let exe = std::env::current_exe().expect("current exe");
    let dir = exe
        .parent()
        .and_then(|deps| deps.parent())
        .expect("target dir");
    let path = dir.join("examples").join(name);
    assert!(
        path.exists(),
        "{} is missing; build the examples first: cargo build -p examples --examples",
        path.display()
    );
    path
}

async fn run(name: &str, args: &[&str]) -> (String, String) {
    run_on(Backend::MySql, name, args).await
}

/// Runs example `name` with `DATABASE_URL` on a new database of `backend`'s test server.
async fn run_on(backend: Backend, name: &str, args: &[&str]) -> (String, String) {
    let server = match backend {
        Backend::Postgres => TestServer::shared_postgres(),
        _ => TestServer::shared(),
    }
    .unwrap_or_else(|e| panic!("{e}"));
    let url = server.create_database(name).await.expect("database");
    let out: Output = tokio::process::Command::new(example(name))
        .args(args)
        .env("DATABASE_URL", &url)
        .env("RUST_LOG", "warn")
        .kill_on_drop(true)
        .output()
        .await
        .expect("run example");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(
        out.status.success(),
        "{name} failed: {}\nstdout:\n{stdout}\nstderr:\n{stderr}",
        out.status
    );
    (stdout, url)
}

async fn statuses(url: &str) -> Vec<(String, i64)> {
    if url.starts_with("postgres") {
        let pool = sqlx::PgPool::connect(url).await.expect("connect");
        return sqlx::query_as(
            "SELECT status::text, COUNT(*) FROM job_queue GROUP BY status ORDER BY 1",
        )
        .fetch_all(&pool)
        .await
        .expect("statuses");
    }
    let pool = sqlx::MySqlPool::connect(url).await.expect("connect");
    sqlx::query_as(
        "SELECT CAST(status AS CHAR), COUNT(*) FROM job_queue GROUP BY status ORDER BY 1",
    )
    .fetch_all(&pool)
    .await
    .expect("statuses")
}

#[tokio::test(flavor = "multi_thread")]
async fn quickstart_runs_every_job_once() {
    quickstart_on(Backend::MySql).await
}

#[tokio::test(flavor = "multi_thread")]
async fn quickstart_runs_every_job_once_on_postgres() {
    quickstart_on(Backend::Postgres).await
}

async fn quickstart_on(backend: Backend) {
    let (out, url) = run_on(backend, "quickstart", &[]).await;
    assert!(
        out.contains("is a duplicate of job 1 (") && out.contains("): it will not run twice"),
        "{out}"
    );
    assert_eq!(
        out.matches("[email]").count(),
        5,
        "five e-mails, the duplicate not run:\n{out}"
    );
    assert_eq!(
        out.matches("storage timeout (attempt 1, will retry)")
            .count(),
        3,
        "{out}"
    );
    assert!(out.contains("monthly-sales: 5/5"), "{out}");
    assert!(
        out.contains("succeeded 16, retried 3, failed 0, leases lost 0, reclaimed 0"),
        "{out}"
    );
    assert_eq!(statuses(&url).await, vec![("done".to_owned(), 16)]);
}

#[tokio::test(flavor = "multi_thread")]
async fn outbox_service_keeps_orders_and_jobs_together() {
    let (out, url) = run("outbox_service", &["--demo"]).await;
    assert!(out.contains("POST order 1 -> 201 Created"), "{out}");
    assert!(out.contains("POST order 1 again -> 409 Conflict"), "{out}");
    assert!(out.contains("POST order 2 (rejected) -> 422"), "{out}");
    assert!(out.contains("stopped cleanly"), "{out}");
    assert_eq!(statuses(&url).await, vec![("done".to_owned(), 2)]);
}

#[tokio::test(flavor = "multi_thread")]
async fn axum_service_runs_a_requests_job_through_its_middleware_and_stops_once() {
    let (out, url) = run("axum_service", &["--demo"]).await;
    assert!(
        out.contains(r#"POST /signups -> 201 Created {"user":1,"welcome_job":1}"#),
        "{out}"
    );
    // The middleware reported the failed first attempt and timed the second.
    assert!(
        out.contains("[middleware] reporting: send_welcome #1 attempt 1 of 5 failed in "),
        "{out}"
    );
    assert!(
        out.contains(": mail server busy, try again later\n"),
        "{out}"
    );
    assert!(
        out.contains("[job] welcome e-mail sent to ada@example.com (user 1, attempt 2)\n[middleware] send_welcome #1 attempt 2 of 5 succeeded in "),
        "{out}"
    );
    assert!(out.contains("job 1: done after 2 attempts"), "{out}");
    // One signal stopped both, and the process returned from both.
    assert!(
        out.ends_with(
            "SIGTERM received: stopping the HTTP server and the worker\nstopped cleanly\n"
        ),
        "{out}"
    );
    assert_eq!(statuses(&url).await, vec![("done".to_owned(), 1)]);
}

#[tokio::test(flavor = "multi_thread")]
async fn ledger_transfer_commits_each_transfer_once() {
    let (out, url) = run("ledger_transfer", &[]).await;
    assert!(
        out.contains("transfer 3: attempt 1 lost its transaction before the commit"),
        "{out}"
    );
    assert!(
        out.contains("transfer 3: its ledger entry was written by attempt 2"),
        "{out}"
    );
    assert!(out.contains("account 3 cannot pay 1000000 cents"), "{out}");
    assert!(
        out.contains("ledger: 20 entries for 20 transfers, 20 jobs done"),
        "{out}"
    );
    assert!(
        out.contains("total balance 30000 before and 30000 after"),
        "{out}"
    );
    assert!(
        out.contains("worker: succeeded 20, retried 1, failed 1, leases lost 0"),
        "{out}"
    );
    assert_eq!(
        statuses(&url).await,
        vec![("done".to_owned(), 20), ("failed".to_owned(), 1)]
    );
    let pool = sqlx::MySqlPool::connect(&url).await.expect("connect");
    let balances: Vec<(u64, i64)> =
        sqlx::query_as("SELECT id, balance_cents FROM accounts ORDER BY id")
            .fetch_all(&pool)
            .await
            .expect("balances");
    let ledger: Vec<(u64, u64, i64)> = sqlx::query_as(
        "SELECT from_account, to_account, CAST(SUM(cents) AS SIGNED) FROM ledger \
         GROUP BY from_account, to_account ORDER BY 1, 2",
    )
    .fetch_all(&pool)
    .await
    .expect("ledger");
    // Each account's balance is its start plus what the ledger says it received, minus
    // what it paid: no transfer is missing from it or in it twice.
    for (id, balance) in &balances {
        let paid: i64 = ledger.iter().filter(|l| l.0 == *id).map(|l| l.2).sum();
        let got: i64 = ledger.iter().filter(|l| l.1 == *id).map(|l| l.2).sum();
        assert_eq!(*balance, 10_000 - paid + got, "account {id}: {ledger:?}");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn long_job_keeps_its_lease_and_stops_on_cancel() {
    let (out, url) = run("long_job", &[]).await;
    assert!(
        out.contains("-> done after 1 attempt(s); leases lost 0, reclaimed 0"),
        "{out}"
    );
    assert!(out.contains("(Some(Shutdown))"), "{out}");
    assert!(
        out.contains("is ready with attempts 1 (handed back: 1)"),
        "{out}"
    );
    assert!(out.contains("-> done after 2 attempts"), "{out}");
    assert_eq!(statuses(&url).await, vec![("done".to_owned(), 2)]);
}

#[tokio::test(flavor = "multi_thread")]
async fn many_workers_share_the_jobs() {
    let (out, url) = run("many_workers", &[]).await;
    assert!(
        out.contains("300 runs of 300 distinct jobs: none ran twice"),
        "{out}"
    );
    assert_eq!(
        out.matches("worker exited: exit status: 0").count(),
        3,
        "{out}"
    );
    assert_eq!(statuses(&url).await, vec![("done".to_owned(), 300)]);
}

/// One HTTP/1.1 request with `Connection: close`; returns the response body.
async fn http(addr: &str, method: &str, path: &str) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut stream = tokio::net::TcpStream::connect(addr).await.expect("connect");
    let request =
        format!("{method} {path} HTTP/1.1\r\nHost: {addr}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n");
    stream.write_all(request.as_bytes()).await.expect("send");
    let mut response = String::new();
    stream.read_to_string(&mut response).await.expect("read");
    assert!(
        response.starts_with("HTTP/1.1 200"),
        "{method} {path}: {response}"
    );
    response
        .split_once("\r\n\r\n")
        .map(|(_, body)| body.to_owned())
        .unwrap_or_default()
}

/// The value of the sample `series` (name and labels exactly as exported) in a scrape.
fn sample(scrape: &str, series: &str) -> Option<f64> {
    scrape.lines().find_map(|line| {
        let value = line.strip_prefix(series)?.strip_prefix(' ')?;
        value.trim().parse().ok()
    })
}

#[tokio::test(flavor = "multi_thread")]
async fn metrics_service_exposes_labelled_counters_and_queue_gauges() {
    metrics_service_on(Backend::MySql).await
}

#[tokio::test(flavor = "multi_thread")]
async fn metrics_service_exposes_labelled_counters_and_queue_gauges_on_postgres() {
    metrics_service_on(Backend::Postgres).await
}

async fn metrics_service_on(backend: Backend) {
    use tokio::io::AsyncBufReadExt;
    let server = match backend {
        Backend::Postgres => TestServer::shared_postgres(),
        _ => TestServer::shared(),
    }
    .unwrap_or_else(|e| panic!("{e}"));
    let url = server
        .create_database("metrics_service")
        .await
        .expect("database");
    let mut child = tokio::process::Command::new(example("metrics_service"))
        .env("DATABASE_URL", &url)
        .env("PORT", "0")
        .env("RUST_LOG", "error")
        .stdout(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("start metrics_service");
    let mut stdout = tokio::io::BufReader::new(child.stdout.take().expect("stdout")).lines();
    let first = stdout.next_line().await.expect("read").expect("a line");
    let addr = first
        .strip_prefix("listening on http://")
        .unwrap_or_else(|| panic!("unexpected first line: {first}"))
        .to_owned();

    // 100 jobs of 200 ms on two slots: about ten seconds of work, two gauge refreshes at least.
    http(&addr, "POST", "/images/100").await;
    let labels = r#"{queue="images",kind="make_thumbnail"}"#;
    let succeeded = format!("jobqueue_jobs_succeeded_total{labels}");
    let failed = format!("jobqueue_jobs_failed_total{labels}");
    let enqueued = format!("jobqueue_enqueued_total{labels}");
    let running = r#"jobqueue_queue_jobs{queue="images",status="running"}"#;
    let waiting = r#"jobqueue_queue_jobs{queue="images",status="waiting"}"#;
    let lag = r#"jobqueue_queue_oldest_ready_age_seconds{queue="images"}"#;
    let duration = format!("jobqueue_job_duration_seconds_count{labels}");
    let (mut seen_running, mut seen_waiting, mut seen_lag) = (0.0f64, 0.0f64, 0.0f64);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    let scrape = loop {
        let scrape = http(&addr, "GET", "/metrics").await;
        seen_running = seen_running.max(sample(&scrape, running).unwrap_or(0.0));
        seen_waiting = seen_waiting.max(sample(&scrape, waiting).unwrap_or(0.0));
        seen_lag = seen_lag.max(sample(&scrape, lag).unwrap_or(0.0));
        let moving = sample(&scrape, &succeeded).unwrap_or(0.0) >= 1.0
            && sample(&scrape, &failed).unwrap_or(0.0) >= 1.0;
        if moving && seen_running >= 1.0 && seen_waiting >= 1.0 && seen_lag > 0.0 {
            break scrape;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the scrape never showed jobs succeeding, failing, running and waiting \
             (max running {seen_running}, waiting {seen_waiting}, lag {seen_lag}):\n{scrape}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    };
    assert_eq!(sample(&scrape, &enqueued), Some(100.0), "{scrape}");
    assert!(sample(&scrape, &duration).unwrap_or(0.0) >= 2.0, "{scrape}");
    assert!(
        scrape.contains("# TYPE jobqueue_queue_jobs gauge"),
        "{scrape}"
    );
    child.kill().await.expect("stop metrics_service");
}

/// The testing guide (`docs/guide/testing.md`, "A complete test") shows
/// `testing_your_jobs.rs` as it is (from the line after its header on), so that the example
/// a reader copies is one that compiles and passes.
#[test]
fn the_testing_guide_shows_the_testing_example_as_it_is() {
    let guide = include_str!("../../docs/guide/testing.md");
    let file = include_str!("testing_your_jobs.rs");
    let body = file
        .lines()
        .skip_while(|l| l.starts_with("//!"))
        .skip(1)
        .collect::<Vec<_>>()
        .join("\n");
    let section = guide
        .split("## A complete test")
        .nth(1)
        .expect("the testing guide has an \"A complete test\" section");
    let block = section
        .split("```rust,ignore\n")
        .nth(1)
        .and_then(|rest| rest.split("\n```").next())
        .expect("the section has a rust,ignore block");
    assert!(
        block == body,
        "docs/guide/testing.md's \"A complete test\" block differs from \
         examples/tests/testing_your_jobs.rs; copy the file (after its header) into the block"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn postgres_service_enqueues_in_the_apps_transaction_and_the_listener_starts_the_job() {
    let (out, url) = run_on(Backend::Postgres, "postgres_service", &["--demo"]).await;
    assert!(
        out.contains(r#"POST /signups -> 201 Created {"user":1,"welcome_job":1}"#),
        "{out}"
    );
    assert!(
        out.contains("[job] welcome e-mail sent to ada@example.com (user 1, attempt 1)"),
        "{out}"
    );
    assert!(out.contains("job 1: done after 1 attempt(s)"), "{out}");
    assert!(
        out.ends_with(
            "SIGTERM received: stopping the HTTP server and the worker\nstopped cleanly\n"
        ),
        "{out}"
    );
    assert_eq!(statuses(&url).await, vec![("done".to_owned(), 1)]);
    let pool = sqlx::PgPool::connect(&url).await.expect("connect");
    let users: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM users")
        .fetch_one(&pool)
        .await
        .expect("users");
    assert_eq!(users, 1, "the user committed with its job");
}
