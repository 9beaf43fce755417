//! `jobqueue list` and `show` say why a job waits: a job no worker of this release can run
//! (left `scheduled` by a worker that does not know its kind), and a job whose lease kept
//! expiring.

use std::time::Duration;

use jobqueue::testing::TestServer;
use jobqueue::{JobStatus, Queue, Worker};

/// Runs `jobqueue ARGS` against `url`; returns standard output after asserting success.
async fn jobqueue(url: &str, args: &[&str]) -> String {
    let output = tokio::process::Command::new(env!("CARGO_BIN_EXE_jobqueue"))
        .args(args)
        .env("DATABASE_URL", url)
        .env_remove("RUST_LOG")
        .env_remove("NO_COLOR")
        .stdin(std::process::Stdio::null())
        .output()
        .await
        .expect("run jobqueue");
    let stdout = String::from_utf8(output.stdout).expect("utf-8 stdout");
    assert!(
        output.status.success(),
        "jobqueue {args:?} failed: {stdout}{}",
        String::from_utf8_lossy(&output.stderr)
    );
    stdout
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn list_and_show_say_why_a_job_waits() {
    let server = TestServer::shared().unwrap_or_else(|e| panic!("{e}"));
    let url = server
        .create_database("cli_waiting")
        .await
        .unwrap_or_else(|e| panic!("cannot create a test database: {e}"));
    let queue = Queue::connect(&url).await.expect("connect");
    queue.migrate().await.expect("migrate");
    let insert = "INSERT INTO job_queue (queue, kind, task_key, payload, status, run_at, \
           max_attempts, lease_ms, created_at, updated_at) \
         VALUES ('default', ?, ?, '{}', 'ready', UTC_TIMESTAMP(6), 3, 30000, \
           UTC_TIMESTAMP(6), UTC_TIMESTAMP(6))";
    let waiting = sqlx::query(insert)
        .bind("added_in_the_next_release")
        .bind("next:1")
        .execute(queue.mysql_pool().unwrap())
        .await
        .expect("insert")
        .last_insert_id();

    // This binary registers no kind at all: its worker leaves the job for another.
    let worker = Worker::builder(queue.clone())
        .poll_interval(Duration::from_millis(20), Duration::from_millis(200))
        .build()
        .expect("build");
    let handle = worker.handle();
    let task = tokio::spawn(worker.run());
    let started = std::time::Instant::now();
    while queue.job(waiting).await.expect("read").expect("job").status != JobStatus::Scheduled {
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "never put back"
        );
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    handle.shutdown();
    task.await.expect("join").expect("the worker stops");

    // A job whose lease expired twice, as reclaim leaves it.
    let crashed = sqlx::query(insert)
        .bind("heavy")
        .bind("heavy:1")
        .execute(queue.mysql_pool().unwrap())
        .await
        .expect("insert")
        .last_insert_id();
    sqlx::query("UPDATE job_queue SET lease_expiries = 2, attempts = 2 WHERE id = ?")
        .bind(crashed)
        .execute(queue.mysql_pool().unwrap())
        .await
        .expect("update");

    let list = jobqueue(&url, &["list"]).await;
    let line = list
        .lines()
        .find(|l| l.contains("added_in_the_next_release"))
        .unwrap_or_else(|| panic!("{list}"));
    assert!(
        line.contains("scheduled") && line.contains("waiting for a worker"),
        "{list}"
    );

    let show = jobqueue(&url, &["show", &waiting.to_string()]).await;
    assert!(
        show.contains("waiting   for a worker that can run it, since "),
        "{show}"
    );
    assert!(
        show.contains("job kind `added_in_the_next_release` is not registered"),
        "{show}"
    );
    let show = jobqueue(&url, &["show", &crashed.to_string()]).await;
    assert!(
        show.contains("expiries  its lease expired 2 times"),
        "{show}"
    );

    let status: serde_json::Value =
        serde_json::from_str(&jobqueue(&url, &["status", "--json"]).await).expect("JSON");
    assert_eq!(status["queues"][0]["unrunnable"], 1, "{status}");
    let table = jobqueue(&url, &["status"]).await;
    assert!(table.contains("NO WORKER"), "{table}");

    let json: serde_json::Value =
        serde_json::from_str(&jobqueue(&url, &["show", &waiting.to_string(), "--json"]).await)
            .expect("JSON");
    assert!(json["unrunnable_since"].is_string(), "{json}");
    assert_eq!(json["lease_expiries"], 0);
}
