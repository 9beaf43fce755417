//! Runs every example as a newcomer would, each against a new database of the test server,
//! and checks what it prints and leaves in the tables.

use std::path::PathBuf;
use std::process::Output;

use jobqueue::testing::TestServer;

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
    let server = TestServer::shared().unwrap_or_else(|e| panic!("{e}"));
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
    let (out, url) = run("quickstart", &[]).await;
    assert!(
        out.contains("gives Duplicate(1): it will not run twice"),
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
