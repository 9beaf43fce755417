//! The `jobqueue` binary against a real server: each test prepares jobs with the library in a
//! database of its own, runs the built binary as an operator would, and checks both what it
//! prints and what it did to the rows.

use std::collections::BTreeSet;
use std::time::Duration;

use jobqueue::testing::TestServer;
use jobqueue::{
    EnqueueOptions, Job, JobContext, JobError, JobOptions, JobStatus, Queue, Uniqueness,
};
use serde::{Deserialize, Serialize};
use serde_json::Value;

// ---------------------------------------------------------------------------------------
// Job kinds and the prepared set of jobs
// ---------------------------------------------------------------------------------------

#[derive(Debug, Serialize, Deserialize)]
struct ExportOrder {
    order_id: u64,
    format: String,
}

impl Job for ExportOrder {
    const KIND: &'static str = "export_order";
    const OPTIONS: JobOptions = JobOptions::DEFAULT.queue("exports").max_attempts(3);

    async fn run(self, _ctx: JobContext) -> Result<(), JobError> {
        Ok(())
    }
}

#[derive(Debug, Serialize, Deserialize)]
struct SendEmail {
    to: String,
    template: String,
}

impl Job for SendEmail {
    const KIND: &'static str = "send_email";
    const OPTIONS: JobOptions = JobOptions::DEFAULT.max_attempts(5);

    async fn run(self, _ctx: JobContext) -> Result<(), JobError> {
        Ok(())
    }
}

/// The ids of the prepared jobs, by what was done to them.
#[derive(Debug)]
struct Prepared {
    /// exports: ready.
    ready: [u64; 2],
    /// exports: used all 3 attempts, failed 10 minutes ago.
    failed_out_of_attempts: u64,
    /// exports: failed permanently on its first attempt.
    failed_permanently: u64,
    /// exports: running, lease valid for an hour more (a margin no stalled test exhausts).
    running: u64,
    /// exports: running, lease expired 5 seconds ago (waits for reclaim).
    expired: u64,
    /// default: done a second ago (counted in the last minute, however long the test takes
    /// to look).
    done_recently: u64,
    /// default: done 10 and 8 days ago.
    done_long_ago: [u64; 2],
    /// default: failed on attempt 2 of 5.
    failed_email: u64,
    /// default: due in an hour.
    scheduled: u64,
    /// default: cancelled before it ran.
    cancelled: u64,
}

impl Prepared {
    fn failed(&self) -> [u64; 3] {
        [
            self.failed_out_of_attempts,
            self.failed_permanently,
            self.failed_email,
        ]
    }
}

/// Enqueues twelve jobs over two queues and moves them into every status with SQL, as
/// workers would have.
async fn prepare(queue: &Queue) -> Prepared {
    let mut exports = Vec::new();
    for order_id in 7411..=7416 {
        let job = ExportOrder {
            order_id,
            format: "csv".into(),
        };
        exports.push(queue.enqueue(job).await.expect("enqueue").id());
    }
    let mut emails = Vec::new();
    for (i, to) in ["ada", "grace", "edsger", "barbara", "alan", "margaret"]
        .iter()
        .enumerate()
    {
        let job = SendEmail {
            to: format!("{to}@example.com"),
            template: "welcome".into(),
        };
        let options = if i == 4 {
            EnqueueOptions::default().delay(Duration::from_secs(3600))
        } else {
            EnqueueOptions::default()
        };
        emails.push(
            queue
                .enqueue_with(job, options)
                .await
                .expect("enqueue")
                .id(),
        );
    }
    let p = Prepared {
        ready: [exports[0], exports[1]],
        failed_out_of_attempts: exports[2],
        failed_permanently: exports[3],
        running: exports[4],
        expired: exports[5],
        done_recently: emails[0],
        done_long_ago: [emails[1], emails[2]],
        failed_email: emails[3],
        scheduled: emails[4],
        cancelled: emails[5],
    };
    let finished = |ago: &str, id: u64| {
        format!(
            "UPDATE job_queue SET status = 'done', attempts = 1, finished_at = UTC_TIMESTAMP(6) - INTERVAL {ago}, \
             updated_at = UTC_TIMESTAMP(6) - INTERVAL {ago} WHERE id = {id}"
        )
    };
    let statements = [
        format!(
            "UPDATE job_queue SET status = 'failed', attempts = 3, \
             last_error = 'smtp: connection refused\nwhile sending the export', \
             finished_at = UTC_TIMESTAMP(6) - INTERVAL 10 MINUTE, updated_at = UTC_TIMESTAMP(6) \
             WHERE id = {}",
            p.failed_out_of_attempts
        ),
        format!(
            "UPDATE job_queue SET status = 'failed', attempts = 1, \
             last_error = 'order 7414 does not exist', finished_at = UTC_TIMESTAMP(6), \
             updated_at = UTC_TIMESTAMP(6) WHERE id = {}",
            p.failed_permanently
        ),
        format!(
            "UPDATE job_queue SET status = 'running', attempts = 1, lease_owner = 'worker-a', \
             lease_until = UTC_TIMESTAMP(6) + INTERVAL 1 HOUR WHERE id = {}",
            p.running
        ),
        format!(
            "UPDATE job_queue SET status = 'running', attempts = 2, lease_owner = 'worker-b', \
             lease_until = UTC_TIMESTAMP(6) - INTERVAL 5 SECOND WHERE id = {}",
            p.expired
        ),
        finished("1 SECOND", p.done_recently),
        finished("10 DAY", p.done_long_ago[0]),
        finished("8 DAY", p.done_long_ago[1]),
        format!(
            "UPDATE job_queue SET status = 'failed', attempts = 2, last_error = 'mailbox full', \
             finished_at = UTC_TIMESTAMP(6), updated_at = UTC_TIMESTAMP(6) WHERE id = {}",
            p.failed_email
        ),
        format!(
            "UPDATE job_queue SET status = 'cancelled', finished_at = UTC_TIMESTAMP(6), \
             last_error = 'cancelled by an operator before it ran' WHERE id = {}",
            p.cancelled
        ),
    ];
    for sql in statements {
        let r = match queue.postgres_pool() {
            Some(pool) => sqlx::query(&postgres_sql(&sql))
                .execute(pool)
                .await
                .map(|r| r.rows_affected()),
            None => sqlx::query(&sql)
                .execute(queue.mysql_pool().unwrap())
                .await
                .map(|r| r.rows_affected()),
        };
        r.unwrap_or_else(|e| panic!("{sql}: {e}"));
    }
    p
}

/// The statements of [`prepare`] in PostgreSQL's words: its clock, and `INTERVAL '10
/// MINUTE'` for MySQL's `INTERVAL 10 MINUTE`.
fn postgres_sql(mysql: &str) -> String {
    let sql = mysql.replace("UTC_TIMESTAMP(6)", "job_queue_now()");
    let mut out = String::with_capacity(sql.len());
    let mut rest = sql.as_str();
    while let Some(at) = rest.find("INTERVAL ") {
        out.push_str(&rest[..at + "INTERVAL ".len()]);
        rest = &rest[at + "INTERVAL ".len()..];
        let words: Vec<&str> = rest.splitn(3, ' ').collect();
        let (n, unit) = (words[0], words[1].trim_end_matches(','));
        out.push_str(&format!("'{n} {unit}'"));
        rest = &rest[n.len() + 1 + unit.len()..];
    }
    out.push_str(rest);
    out
}

// ---------------------------------------------------------------------------------------
// Databases, rows and runs of the binary
// ---------------------------------------------------------------------------------------

fn server() -> &'static TestServer {
    TestServer::shared().unwrap_or_else(|e| panic!("{e}"))
}

/// A URL of a new, empty database (no tables).
async fn empty_database(prefix: &str) -> String {
    server()
        .create_database(prefix)
        .await
        .unwrap_or_else(|e| panic!("cannot create a test database: {e}"))
}

/// A migrated database with the prepared jobs: its URL, a queue on it, and the job ids.
async fn prepared_database(prefix: &str) -> (String, Queue, Prepared) {
    let url = empty_database(prefix).await;
    let queue = Queue::connect(&url).await.expect("connect");
    queue.migrate().await.expect("migrate");
    let prepared = prepare(&queue).await;
    (url, queue, prepared)
}

/// Every row of both tables as text, to show that a command changed nothing (or only what
/// it should).
async fn rows(queue: &Queue) -> Vec<String> {
    let mut rows: Vec<String> = sqlx::query_scalar(
        "SELECT CAST(CONCAT_WS('|', id, queue, kind, status, attempts, max_attempts, \
         IFNULL(lease_owner, '-'), IFNULL(lease_until, '-'), cancel_requested, \
         IFNULL(last_error, '-'), run_at, updated_at, IFNULL(finished_at, '-')) AS CHAR) \
         FROM job_queue ORDER BY id",
    )
    .fetch_all(queue.mysql_pool().unwrap())
    .await
    .expect("read rows");
    let paused: Vec<String> =
        sqlx::query_scalar("SELECT CAST(queue AS CHAR) FROM job_queue_pause ORDER BY queue")
            .fetch_all(queue.mysql_pool().unwrap())
            .await
            .expect("read pauses");
    rows.extend(paused.into_iter().map(|q| format!("paused|{q}")));
    rows
}

/// The row of job `id` as [`rows`] shows it.
fn row_of(rows: &[String], id: u64) -> Option<&String> {
    rows.iter().find(|r| r.starts_with(&format!("{id}|")))
}

async fn status_of(queue: &Queue, id: u64) -> JobStatus {
    queue
        .job(id)
        .await
        .expect("read")
        .expect("job exists")
        .status
}

/// One run of the binary.
#[derive(Debug)]
struct Run {
    code: Option<i32>,
    stdout: String,
    stderr: String,
}

impl Run {
    /// Asserts exit status 0 and returns standard output.
    fn ok(&self) -> &str {
        assert_eq!(self.code, Some(0), "expected success: {self:#?}");
        &self.stdout
    }

    /// Parses standard output as JSON after asserting success.
    fn json(&self) -> Value {
        serde_json::from_str(self.ok())
            .unwrap_or_else(|e| panic!("not JSON ({e}): {}", self.stdout))
    }

    /// Asserts the shape of a user error: status 2, nothing on standard output, exactly one
    /// line on standard error starting with `error: `, no panic or backtrace. Returns it.
    fn user_error(&self) -> &str {
        assert_eq!(self.code, Some(2), "expected exit status 2: {self:#?}");
        assert_eq!(self.stdout, "", "{self:#?}");
        let lines: Vec<&str> = self.stderr.lines().collect();
        assert_eq!(lines.len(), 1, "expected one line on stderr: {self:#?}");
        assert!(lines[0].starts_with("error: "), "{self:#?}");
        for word in ["panicked", "backtrace", "RUST_BACKTRACE"] {
            assert!(!self.stderr.contains(word), "{self:#?}");
        }
        lines[0]
    }
}

/// Runs `jobqueue ARGS` with `DATABASE_URL=url` (none if `None`), as an operator would from
/// a script: no terminal, no inherited database or log settings.
async fn jobqueue(url: Option<&str>, args: &[&str]) -> Run {
    jobqueue_with_env(url, args, &[]).await
}

async fn jobqueue_with_env(url: Option<&str>, args: &[&str], env: &[(&str, &str)]) -> Run {
    let mut command = tokio::process::Command::new(env!("CARGO_BIN_EXE_jobqueue"));
    command
        .args(args)
        .env_remove("DATABASE_URL")
        .env_remove("RUST_LOG")
        .env_remove("NO_COLOR")
        .stdin(std::process::Stdio::null());
    if let Some(url) = url {
        command.env("DATABASE_URL", url);
    }
    for (k, v) in env {
        command.env(k, v);
    }
    let output = tokio::time::timeout(Duration::from_secs(60), command.output())
        .await
        .unwrap_or_else(|_| panic!("jobqueue {args:?} did not finish in 60 s"))
        .expect("run jobqueue");
    let run = Run {
        code: output.status.code(),
        stdout: String::from_utf8(output.stdout).expect("utf-8 stdout"),
        stderr: String::from_utf8(output.stderr).expect("utf-8 stderr"),
    };
    assert!(
        !run.stdout.contains('\x1b') && !run.stderr.contains('\x1b'),
        "colour codes without a terminal: {run:#?}"
    );
    run
}

fn ids(jobs: &Value) -> Vec<u64> {
    let mut ids: Vec<u64> = jobs
        .as_array()
        .expect("array of jobs")
        .iter()
        .map(|j| j["id"].as_u64().expect("id"))
        .collect();
    ids.sort_unstable();
    ids
}

// ---------------------------------------------------------------------------------------
// Reading: status, list, show
// ---------------------------------------------------------------------------------------

#[tokio::test]
async fn status_counts_match_the_table() {
    let (url, queue, p) = prepared_database("cli_status").await;

    let status = jobqueue(Some(&url), &["status", "--json"]).await.json();
    let counted: Vec<(String, String, i64)> = sqlx::query_as(
        "SELECT CAST(queue AS CHAR), CAST(status AS CHAR), COUNT(*) FROM job_queue GROUP BY queue, status",
    )
    .fetch_all(queue.mysql_pool().unwrap())
    .await
    .expect("count");
    let queues = status["queues"].as_array().expect("queues");
    assert_eq!(queues.len(), 2, "{status:#}");
    for (q, s, n) in &counted {
        let entry = queues
            .iter()
            .find(|e| e["queue"] == q.as_str())
            .unwrap_or_else(|| panic!("queue {q} missing: {status:#}"));
        assert_eq!(entry[s.as_str()], *n, "{q}/{s}: {status:#}");
    }
    let exports = queues.iter().find(|e| e["queue"] == "exports").unwrap();
    let default = queues.iter().find(|e| e["queue"] == "default").unwrap();
    assert_eq!(exports["ready"], 2);
    assert_eq!(exports["running"], 2);
    assert_eq!(exports["failed"], 2);
    assert_eq!(exports["expired_leases"], 1);
    assert_eq!(exports["failed_last_hour"], 2);
    assert!(exports["oldest_ready_secs"].as_f64().is_some());
    assert_eq!(default["done"], 3);
    assert_eq!(default["done_last_minute"], 1);
    assert_eq!(default["failed_last_hour"], 1);
    assert_eq!(default["scheduled"], 1);
    assert_eq!(default["cancelled"], 1);
    assert!(default["oldest_ready_secs"].is_null());
    assert_eq!(default["paused"], false);
    let running = status["running"].as_array().expect("running");
    assert_eq!(ids(&status["running"]), {
        let mut v = vec![p.running, p.expired];
        v.sort_unstable();
        v
    });
    let expired = running.iter().find(|r| r["id"] == p.expired).unwrap();
    assert_eq!(expired["lease_owner"], "worker-b");
    assert!(expired["lease_left_secs"].as_f64().unwrap() < 0.0);
    let valid = running.iter().find(|r| r["id"] == p.running).unwrap();
    let left = valid["lease_left_secs"].as_f64().unwrap();
    assert!(left > 0.0 && left <= 3600.0, "{left}");

    // The same figures, for people.
    let text = jobqueue(Some(&url), &["status"]).await.ok().to_owned();
    let line = |name: &str| -> Vec<String> {
        text.lines()
            .find(|l| l.starts_with(name))
            .unwrap_or_else(|| panic!("no line for {name}:\n{text}"))
            .split_whitespace()
            .map(str::to_owned)
            .collect()
    };
    // QUEUE STATE SCHEDULED READY BLOCKED RUNNING DONE FAILED CANCELLED ...
    assert_eq!(
        line("exports")[..9],
        ["exports", "active", "0", "2", "0", "2", "0", "2", "0"]
    );
    assert_eq!(
        line("default")[..9],
        ["default", "active", "1", "0", "0", "0", "3", "1", "1"]
    );
    assert!(text.contains("worker-a"), "{text}");
    assert!(text.contains("waits for reclaim"), "{text}");

    // One queue only.
    let one = jobqueue(Some(&url), &["status", "--queue", "default", "--json"])
        .await
        .json();
    assert_eq!(one["queues"].as_array().unwrap().len(), 1);
    assert_eq!(one["queues"][0]["queue"], "default");
    assert_eq!(one["running"].as_array().unwrap().len(), 0);
}

#[tokio::test]
async fn list_and_show() {
    let (url, _queue, p) = prepared_database("cli_list").await;

    let failed = jobqueue(Some(&url), &["list", "--status", "failed", "--json"])
        .await
        .json();
    assert_eq!(failed["total"], 3);
    let mut expected = p.failed().to_vec();
    expected.sort_unstable();
    assert_eq!(ids(&failed["jobs"]), expected);

    let text = jobqueue(Some(&url), &["list", "--status", "failed"]).await;
    let text = text.ok();
    assert!(text.starts_with("ID"), "{text}");
    assert_eq!(text.lines().count(), 4, "a heading and 3 jobs:\n{text}");
    assert!(
        // The last error on one line, cut to fit the table (`show` has it whole).
        text.contains("smtp: connection refused while sending …"),
        "{text}"
    );
    assert!(text.contains("mailbox full"), "{text}");
    assert!(text.contains("3/3"), "{text}");

    let some = jobqueue(
        Some(&url),
        &[
            "list",
            "--queue",
            "exports",
            "--kind",
            "export_order",
            "--limit",
            "2",
        ],
    )
    .await;
    let some = some.ok();
    assert!(some.contains("2 of 6 matching jobs shown"), "{some}");
    let some = jobqueue(Some(&url), &["list", "-q", "exports", "-n", "2", "--json"])
        .await
        .json();
    assert_eq!(some["total"], 6);
    assert_eq!(some["jobs"].as_array().unwrap().len(), 2);
    // Following each page's cursor shows the six once each, newest first, then stops.
    let mut pages = vec![ids(&some["jobs"])];
    let mut cursor = some["next_cursor"]
        .as_str()
        .expect("a next page")
        .to_owned();
    loop {
        let page = jobqueue(
            Some(&url),
            &[
                "list", "-q", "exports", "-n", "2", "--cursor", &cursor, "--json",
            ],
        )
        .await
        .json();
        pages.push(ids(&page["jobs"]));
        match page["next_cursor"].as_str() {
            Some(next) => cursor = next.to_owned(),
            None => break,
        }
    }
    assert!(
        pages
            .windows(2)
            .all(|w| w[1].iter().all(|b| w[0].iter().all(|a| b < a))),
        "each page older than the one before: {pages:?}"
    );
    let seen: BTreeSet<u64> = pages.iter().flatten().copied().collect();
    assert_eq!((seen.len(), pages.concat().len()), (6, 6), "{pages:?}");
    // The text output names the next page's cursor; a cursor of another status is refused.
    let text = jobqueue(Some(&url), &["list", "--status", "failed", "-n", "1"]).await;
    let text = text.ok();
    let failed_cursor = text
        .split("--cursor ")
        .nth(1)
        .and_then(|rest| rest.split(';').next())
        .expect("the next page's cursor")
        .to_owned();
    assert!(text.contains("newest finished first"), "{text}");
    let refused = jobqueue(
        Some(&url),
        &["list", "--status", "done", "--cursor", &failed_cursor],
    )
    .await;
    assert_ne!(refused.code, Some(0));
    assert!(
        refused
            .stderr
            .contains("continues a listing of failed jobs"),
        "{}",
        refused.stderr
    );
    let none = jobqueue(Some(&url), &["list", "--kind", "nothing"]).await;
    assert_eq!(none.ok(), "no jobs match\n");

    // One job in full.
    let id = p.failed_out_of_attempts.to_string();
    let show = jobqueue(Some(&url), &["show", &id]).await;
    let show = show.ok();
    assert!(show.starts_with(&format!("job {id}\n")), "{show}");
    for expected in [
        "status    failed",
        "attempts  3 of 3",
        "kind      export_order",
        "smtp: connection refused",
        "while sending the export",
        "\"order_id\": 7413",
        "\"format\": \"csv\"",
        "finished  ",
    ] {
        assert!(show.contains(expected), "{expected:?} missing:\n{show}");
    }

    let json = jobqueue(Some(&url), &["show", &id, "--json"]).await.json();
    assert_eq!(json["id"], p.failed_out_of_attempts);
    assert_eq!(json["status"], "failed");
    assert_eq!(json["attempts"], 3);
    assert_eq!(json["max_attempts"], 3);
    assert_eq!(json["payload"]["order_id"], 7413);
    assert!(json["finished_at"].as_str().unwrap().ends_with('Z'));
    let key = json["task_key"].as_str().unwrap().to_owned();

    let by_key = jobqueue(Some(&url), &["show", "--key", &key, "--json"])
        .await
        .json();
    assert_eq!(by_key["id"], p.failed_out_of_attempts);

    let running = jobqueue(Some(&url), &["show", &p.running.to_string()]).await;
    assert!(running.ok().contains("worker-a until"), "{running:#?}");

    let scheduled = jobqueue(Some(&url), &["show", &p.scheduled.to_string()]).await;
    let scheduled = scheduled.ok();
    assert!(scheduled.contains("status    scheduled"), "{scheduled}");
    assert!(scheduled.contains("runs at   "), "{scheduled}");
    assert!(scheduled.contains(" UTC (in "), "{scheduled}");

    let missing = jobqueue(Some(&url), &["show", "999999"]).await;
    assert!(
        missing.user_error().contains("no job with id 999999"),
        "{missing:#?}"
    );
}

/// `show` prints the attempts as a table (worker, outcome, error), the output and the
/// snoozes; `--json` has them too.
#[tokio::test]
async fn show_prints_the_attempt_history_the_output_and_the_snoozes() {
    let url = empty_database("cli_attempts").await;
    let queue = Queue::connect(&url).await.expect("connect");
    queue.migrate().await.expect("migrate");
    let id = queue
        .enqueue(ExportOrder {
            order_id: 7412,
            format: "csv".into(),
        })
        .await
        .expect("enqueue")
        .id();
    let store = queue.store();
    // worker-a claims it and dies: maintenance takes it back; worker-b runs it.
    assert_eq!(
        store.claim("exports", "worker-a", 1).await.unwrap().len(),
        1
    );
    sqlx::query(
        "UPDATE job_queue SET lease_until = UTC_TIMESTAMP(6) - INTERVAL 1 SECOND, snoozes = 2",
    )
    .execute(queue.mysql_pool().unwrap())
    .await
    .unwrap();
    store.reclaim(10).await.expect("reclaim");
    assert_eq!(
        store.claim("exports", "worker-b", 1).await.unwrap().len(),
        1
    );
    let output = r#"{"file":"orders-7412.csv","rows":3}"#;
    assert!(store
        .complete_with_output("worker-b", id, 2, output)
        .await
        .unwrap());

    let show = jobqueue(Some(&url), &["show", &id.to_string()]).await;
    let show = show.ok();
    let lines: Vec<&str> = show.lines().collect();
    let heading = lines
        .iter()
        .position(|l| *l == "attempts (the last 20)")
        .unwrap_or_else(|| panic!("no attempts section:\n{show}"));
    let table = &lines[heading + 1..heading + 4];
    assert!(table[0].trim_start().starts_with("#  started"), "{show}");
    let first: Vec<&str> = table[1].split_whitespace().collect();
    assert_eq!(first[0], "1", "{show}");
    assert!(
        table[1].contains("worker-a  lease_expired  the lease expired: its worker crashed"),
        "{show}"
    );
    assert!(table[2].trim_start().starts_with("2 "), "{show}");
    assert!(table[2].contains("worker-b  done"), "{show}");
    for expected in [
        "snoozes   2 (each ran it again later without spending an attempt)",
        "output\n  {\n    \"file\": \"orders-7412.csv\",\n    \"rows\": 3\n  }\n",
    ] {
        assert!(show.contains(expected), "{expected:?} missing:\n{show}");
    }

    let json = jobqueue(Some(&url), &["show", &id.to_string(), "--json"])
        .await
        .json();
    assert_eq!(json["snoozes"], 2);
    assert_eq!(json["output"]["file"], "orders-7412.csv");
    let history = json["attempt_history"].as_array().expect("attempt_history");
    assert_eq!(history.len(), 2);
    assert_eq!(history[0]["attempt"], 1);
    assert_eq!(history[0]["worker"], "worker-a");
    assert_eq!(history[0]["outcome"], "lease_expired");
    assert_eq!(history[1]["outcome"], "done");
    assert_eq!(history[1]["error"], Value::Null);
    assert!(history[1]["ended_at"].as_str().unwrap().ends_with('Z'));
}

// ---------------------------------------------------------------------------------------
// Changing: retry, cancel, pause, resume, purge
// ---------------------------------------------------------------------------------------

#[tokio::test]
async fn metadata_progress_and_every_job_of_a_key() {
    let url = empty_database("cli_lifecycle").await;
    let queue = Queue::connect(&url).await.expect("connect");
    queue.migrate().await.expect("migrate");
    let export = |order_id| ExportOrder {
        order_id,
        format: "csv".into(),
    };
    let opts = || {
        EnqueueOptions::default()
            .key("export:1")
            .unique(Uniqueness::WhileActive)
            .meta("tenant", "acme")
    };
    let old = queue.enqueue_with(export(1), opts()).await.unwrap().id();
    queue.cancel(old).await.unwrap();
    let new = queue.enqueue_with(export(1), opts()).await.unwrap().id();
    assert_ne!(old, new);
    let other = queue
        .enqueue_with(
            export(2),
            EnqueueOptions::default().meta("tenant", "globex"),
        )
        .await
        .unwrap()
        .id();
    // What a worker writes when the job reports progress.
    sqlx::query(
        "UPDATE job_queue SET progress = '{\"rows\": 5, \"of\": 9}', progress_at = UTC_TIMESTAMP(6) WHERE id = ?",
    )
    .bind(new)
    .execute(queue.mysql_pool().unwrap())
    .await
    .unwrap();

    let acme = jobqueue(Some(&url), &["list", "--meta", "tenant=acme", "--json"])
        .await
        .json();
    assert_eq!(ids(&acme["jobs"]), vec![old, new]);
    let globex = jobqueue(Some(&url), &["list", "--meta", "tenant=globex", "--json"])
        .await
        .json();
    assert_eq!(ids(&globex["jobs"]), vec![other]);
    let bad = jobqueue(Some(&url), &["list", "--meta", "tenant"]).await;
    assert_eq!(bad.code, Some(2), "{bad:#?}");
    assert!(
        bad.stderr.contains("write e.g. `--meta tenant=acme`"),
        "{bad:#?}"
    );

    // Every job of the key, newest first; `show --key` finds the newest.
    let history = jobqueue(Some(&url), &["list", "--key", "export:1", "--json"])
        .await
        .json();
    let order: Vec<u64> = history["jobs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|j| j["id"].as_u64().unwrap())
        .collect();
    assert_eq!(order, vec![new, old]);
    assert_eq!(history["jobs"][1]["key_released"], true);
    let by_key = jobqueue(Some(&url), &["show", "--key", "export:1", "--json"])
        .await
        .json();
    assert_eq!(by_key["id"], new);
    assert_eq!(by_key["metadata"]["tenant"], "acme");
    assert_eq!(by_key["progress"]["rows"], 5);
    assert_eq!(by_key["unique"], "while_active");

    let show = jobqueue(Some(&url), &["show", &new.to_string()]).await;
    let show = show.ok();
    for expected in [
        "unique    blocks its key while waiting or running",
        "progress  ",
        "\"rows\": 5",
        "metadata",
        "\"tenant\": \"acme\"",
    ] {
        assert!(show.contains(expected), "{expected:?} missing:\n{show}");
    }
    let show_old = jobqueue(Some(&url), &["show", &old.to_string()]).await;
    assert!(
        show_old.ok().contains("given up to a newer job"),
        "{show_old:#?}"
    );
    let missing = jobqueue(Some(&url), &["list", "--key", "export:none"]).await;
    assert!(missing.user_error().contains("export:none"), "{missing:#?}");
}

#[tokio::test]
async fn retry_failed_moves_exactly_the_failed_jobs() {
    let (url, queue, p) = prepared_database("cli_retry").await;
    let before = rows(&queue).await;

    let dry = jobqueue(Some(&url), &["retry", "--failed", "--dry-run"]).await;
    let dry = dry.ok();
    assert!(dry.starts_with("would retry 3 failed jobs"), "{dry}");
    assert!(
        dry.contains("3 rows would change; nothing changed (dry run)"),
        "{dry}"
    );
    let narrow = jobqueue(
        Some(&url),
        &["retry", "--failed", "-q", "exports", "--dry-run"],
    )
    .await;
    assert!(narrow.ok().contains("2 rows would change"), "{narrow:#?}");
    assert_eq!(rows(&queue).await, before, "a dry run changed rows");

    let done = jobqueue(Some(&url), &["retry", "--failed", "--yes"]).await;
    let done = done.ok();
    assert!(done.starts_with("retried 3 failed jobs"), "{done}");
    assert!(done.trim_end().ends_with("3 rows changed"), "{done}");

    let after = rows(&queue).await;
    for id in before
        .iter()
        .map(|r| r.split('|').next().unwrap().parse::<u64>().unwrap())
    {
        if !p.failed().contains(&id) {
            assert_eq!(row_of(&after, id), row_of(&before, id), "job {id} changed");
        }
    }
    // Attempts are kept; max_attempts grows only where they were used up.
    for (id, attempts, max_attempts) in [
        (p.failed_out_of_attempts, 3, 4),
        (p.failed_permanently, 1, 3),
        (p.failed_email, 2, 5),
    ] {
        let job = queue.job(id).await.unwrap().unwrap();
        assert_eq!(job.status, JobStatus::Ready, "job {id}");
        assert_eq!(job.attempts, attempts, "job {id}");
        assert_eq!(job.max_attempts, max_attempts, "job {id}");
        assert!(job.finished_at.is_none(), "job {id}");
    }
    // Nothing left to retry: nothing to confirm either.
    let again = jobqueue(Some(&url), &["retry", "--failed"]).await;
    assert!(again.ok().contains("0 rows changed"), "{again:#?}");

    // One job: a cancelled one comes back; a ready one is left alone.
    let cancelled = p.cancelled.to_string();
    let dry = jobqueue(Some(&url), &["retry", &cancelled, "--dry-run"]).await;
    assert!(dry.ok().contains("1 row would change"), "{dry:#?}");
    assert_eq!(status_of(&queue, p.cancelled).await, JobStatus::Cancelled);
    let one = jobqueue(Some(&url), &["retry", &cancelled]).await;
    let one = one.ok();
    assert!(
        one.starts_with(&format!("retried job {cancelled}")),
        "{one}"
    );
    assert!(one.contains("cancelled -> ready"), "{one}");
    assert!(one.trim_end().ends_with("1 row changed"), "{one}");
    assert_eq!(status_of(&queue, p.cancelled).await, JobStatus::Ready);

    let ready = jobqueue(Some(&url), &["retry", &p.ready[0].to_string()]).await;
    let ready = ready.ok();
    assert!(ready.starts_with("not retried"), "{ready}");
    assert!(ready.contains("0 rows changed"), "{ready}");
}

#[tokio::test]
async fn purge_deletes_only_old_done_jobs_and_dry_run_nothing() {
    let (url, queue, p) = prepared_database("cli_purge").await;
    let before = rows(&queue).await;

    let dry = jobqueue(
        Some(&url),
        &[
            "purge",
            "--status",
            "done",
            "--older-than",
            "7d",
            "--dry-run",
        ],
    )
    .await;
    let dry = dry.ok();
    assert!(
        dry.starts_with("would delete 2 done jobs that finished more than 7d ago"),
        "{dry}"
    );
    assert!(
        dry.contains("2 rows would change; nothing changed"),
        "{dry}"
    );
    assert_eq!(rows(&queue).await, before, "a dry run changed rows");

    let done = jobqueue(Some(&url), &["purge", "--older-than", "7d", "--yes"]).await;
    let done = done.ok();
    assert!(done.starts_with("deleted 2 done jobs"), "{done}");
    assert!(done.trim_end().ends_with("2 rows changed"), "{done}");
    let after = rows(&queue).await;
    let mut expected = before.clone();
    expected.retain(|r| {
        p.done_long_ago
            .iter()
            .all(|id| !r.starts_with(&format!("{id}|")))
    });
    assert_eq!(after, expected);

    let again = jobqueue(Some(&url), &["purge", "--older-than", "7d"]).await;
    assert!(again.ok().contains("0 rows changed"), "{again:#?}");

    let bad = jobqueue(Some(&url), &["purge", "--older-than", "seven days"]).await;
    assert_eq!(bad.code, Some(2), "{bad:#?}");
    assert!(bad.stderr.contains("e.g. 30s"), "{bad:#?}");
    let bad = jobqueue(
        Some(&url),
        &["purge", "--status", "ready", "--older-than", "1d"],
    )
    .await;
    assert_eq!(bad.code, Some(2), "{bad:#?}");
}

#[tokio::test]
async fn cancel_ends_a_ready_job_cancelled() {
    let (url, queue, p) = prepared_database("cli_cancel").await;
    let id = p.ready[0].to_string();

    let before = rows(&queue).await;
    let dry = jobqueue(Some(&url), &["cancel", &id, "--dry-run"]).await;
    assert!(
        dry.ok()
            .starts_with(&format!("would cancel job {id}: ready -> cancelled")),
        "{dry:#?}"
    );
    assert_eq!(rows(&queue).await, before, "a dry run changed rows");

    let out = jobqueue(Some(&url), &["cancel", &id]).await;
    let out = out.ok();
    assert!(
        out.starts_with(&format!("cancelled job {id}: ready -> cancelled")),
        "{out}"
    );
    assert!(out.trim_end().ends_with("1 row changed"), "{out}");
    assert_eq!(status_of(&queue, p.ready[0]).await, JobStatus::Cancelled);
    let job = queue.job(p.ready[0]).await.unwrap().unwrap();
    assert!(job.finished_at.is_some());

    let done = jobqueue(Some(&url), &["cancel", &p.done_recently.to_string()]).await;
    let done = done.ok();
    assert!(
        done.contains("already ended (done)") && done.contains("0 rows changed"),
        "{done}"
    );

    let running = jobqueue(Some(&url), &["cancel", &p.running.to_string()]).await;
    let running = running.ok();
    assert!(
        running.contains("worker-a") && running.contains("1 row changed"),
        "{running}"
    );
    let job = queue.job(p.running).await.unwrap().unwrap();
    assert!(job.cancel_requested);
    assert_eq!(job.status, JobStatus::Running);

    let missing = jobqueue(Some(&url), &["cancel", "424242"]).await;
    assert!(
        missing.user_error().contains("no job with id 424242"),
        "{missing:#?}"
    );
}

#[tokio::test]
async fn pause_and_resume() {
    let (url, queue, _p) = prepared_database("cli_pause").await;

    let dry = jobqueue(Some(&url), &["pause", "exports", "--dry-run"]).await;
    assert!(dry.ok().contains("1 row would change"), "{dry:#?}");
    assert!(queue.paused_queues().await.unwrap().is_empty());

    let paused = jobqueue(Some(&url), &["pause", "exports"]).await;
    assert!(
        paused.ok().starts_with("paused queue exports"),
        "{paused:#?}"
    );
    assert_eq!(queue.paused_queues().await.unwrap(), ["exports"]);
    let again = jobqueue(Some(&url), &["pause", "exports"]).await;
    assert!(
        again.ok().contains("already paused; 0 rows changed"),
        "{again:#?}"
    );

    let status = jobqueue(Some(&url), &["status", "--json"]).await.json();
    let exports = status["queues"]
        .as_array()
        .unwrap()
        .iter()
        .find(|q| q["queue"] == "exports")
        .unwrap()
        .clone();
    assert_eq!(exports["paused"], true);
    let text = jobqueue(Some(&url), &["status"]).await;
    assert!(
        text.ok().lines().any(|l| l.starts_with("exports  paused")),
        "{text:#?}"
    );

    let dry = jobqueue(Some(&url), &["resume", "exports", "--dry-run"]).await;
    assert!(dry.ok().contains("1 row would change"), "{dry:#?}");
    assert_eq!(queue.paused_queues().await.unwrap(), ["exports"]);
    let resumed = jobqueue(Some(&url), &["resume", "exports"]).await;
    assert!(resumed.ok().contains("1 row changed"), "{resumed:#?}");
    assert!(queue.paused_queues().await.unwrap().is_empty());
    let again = jobqueue(Some(&url), &["resume", "exports"]).await;
    assert!(
        again.ok().contains("not paused; 0 rows changed"),
        "{again:#?}"
    );

    let bad = jobqueue(Some(&url), &["pause", "no spaces"]).await;
    assert!(bad.user_error().contains("invalid queue name"), "{bad:#?}");
}

// ---------------------------------------------------------------------------------------
// Migrations and errors
// ---------------------------------------------------------------------------------------

#[tokio::test]
async fn migrate_check_reports_pending_migrations_on_an_empty_database() {
    let url = empty_database("cli_migrate").await;

    let check = jobqueue(Some(&url), &["migrate", "--check"]).await;
    assert_eq!(check.code, Some(1), "{check:#?}");
    assert!(check.stdout.starts_with("pending: database "), "{check:#?}");
    assert!(check.stdout.contains("20261130000001"), "{check:#?}");

    let migrate = jobqueue(Some(&url), &["migrate"]).await;
    // As many as the library embeds, the first one among them.
    let applied = migrate.ok();
    assert!(applied.starts_with("applied "), "{migrate:#?}");
    assert!(applied.contains("20261130000001 job queue"), "{migrate:#?}");
    let check = jobqueue(Some(&url), &["migrate", "--check"]).await;
    assert!(check.ok().contains("up to date"), "{check:#?}");
    let migrate = jobqueue(Some(&url), &["migrate"]).await;
    assert!(migrate.ok().contains("up to date"), "{migrate:#?}");
}

/// A URL of a new, empty PostgreSQL database (no tables).
async fn empty_postgres_database(prefix: &str) -> String {
    TestServer::shared_postgres()
        .unwrap_or_else(|e| panic!("{e}"))
        .create_database(prefix)
        .await
        .unwrap_or_else(|e| panic!("cannot create a PostgreSQL test database: {e}"))
}

/// `migrate` on a postgres:// URL (and postgresql://) checks, applies and records the
/// PostgreSQL migrations, the ready-notification triggers among them.
#[tokio::test]
async fn migrate_on_a_postgres_url() {
    let url = empty_postgres_database("cli_pg_migrate").await;
    let check = jobqueue(Some(&url), &["migrate", "--check"]).await;
    assert_eq!(check.code, Some(1), "{check:#?}");
    assert!(check.stdout.starts_with("pending: database "), "{check:#?}");
    assert!(check.stdout.contains("20261203000001"), "{check:#?}");
    assert!(
        check.stdout.contains("20261203000002 ready notify"),
        "{check:#?}"
    );
    let migrate = jobqueue(Some(&url), &["migrate"]).await;
    let applied = migrate.ok();
    assert!(applied.starts_with("applied "), "{migrate:#?}");
    assert!(
        applied.contains("20261203000002 ready notify"),
        "{migrate:#?}"
    );
    let as_postgresql = url.replacen("postgres://", "postgresql://", 1);
    assert_ne!(as_postgresql, url);
    let check = jobqueue(Some(&as_postgresql), &["migrate", "--check", "--json"]).await;
    let check: Value = serde_json::from_str(check.ok()).expect("JSON");
    assert_eq!(check["matched"], 0, "{check}");
    let queue = Queue::connect(&url).await.expect("connect");
    let triggers: i64 = sqlx::query_scalar(
        "SELECT COUNT(*) FROM pg_trigger WHERE tgname LIKE 'job_queue_%' AND NOT tgisinternal",
    )
    .fetch_one(queue.postgres_pool().unwrap())
    .await
    .unwrap();
    assert_eq!(
        triggers, 3,
        "the ready triggers of job_queue and job_queue_pause"
    );
}

/// The operator's commands on PostgreSQL: status, list, show, retry, cancel, pause and
/// purge read and change the same jobs as on MySQL.
#[tokio::test]
async fn the_operators_commands_on_postgres() {
    let url = empty_postgres_database("cli_pg_ops").await;
    let queue = Queue::connect(&url).await.expect("connect");
    queue.migrate().await.expect("migrate");
    let p = prepare(&queue).await;

    let status = jobqueue(Some(&url), &["status", "--json"]).await.json();
    let queues = status["queues"].as_array().expect("queues");
    let exports = queues.iter().find(|e| e["queue"] == "exports").unwrap();
    let default = queues.iter().find(|e| e["queue"] == "default").unwrap();
    assert_eq!(
        [&exports["ready"], &exports["running"], &exports["failed"]],
        [2, 2, 2],
        "{status:#}"
    );
    assert_eq!(exports["expired_leases"], 1, "{status:#}");
    assert_eq!(
        [
            &default["done"],
            &default["scheduled"],
            &default["cancelled"]
        ],
        [3, 1, 1],
        "{status:#}"
    );
    assert_eq!(ids(&status["running"]), {
        let mut v = vec![p.running, p.expired];
        v.sort_unstable();
        v
    });

    let failed = jobqueue(Some(&url), &["list", "--status", "failed", "--json"])
        .await
        .json();
    assert_eq!(ids(&failed["jobs"]), {
        let mut v = vec![
            p.failed_out_of_attempts,
            p.failed_permanently,
            p.failed_email,
        ];
        v.sort_unstable();
        v
    });
    let show = jobqueue(Some(&url), &["show", &p.failed_permanently.to_string()]).await;
    assert!(show.ok().contains("order 7414 does not exist"), "{show:#?}");

    let retried = jobqueue(Some(&url), &["retry", "--failed", "--yes"]).await;
    assert!(retried.ok().contains('3'), "{retried:#?}");
    for id in [
        p.failed_out_of_attempts,
        p.failed_permanently,
        p.failed_email,
    ] {
        assert_eq!(status_of(&queue, id).await, JobStatus::Ready, "job {id}");
    }
    let cancel = jobqueue(Some(&url), &["cancel", &p.ready[0].to_string()]).await;
    cancel.ok();
    assert_eq!(status_of(&queue, p.ready[0]).await, JobStatus::Cancelled);

    jobqueue(Some(&url), &["pause", "exports"]).await.ok();
    assert_eq!(queue.paused_queues().await.unwrap(), ["exports"]);
    jobqueue(Some(&url), &["resume", "exports"]).await.ok();
    assert!(queue.paused_queues().await.unwrap().is_empty());

    let purge = jobqueue(Some(&url), &["purge", "--older-than", "7d", "--yes"]).await;
    purge.ok();
    for id in p.done_long_ago {
        assert!(queue.job(id).await.unwrap().is_none(), "job {id} purged");
    }
    assert_eq!(status_of(&queue, p.done_recently).await, JobStatus::Done);
}

/// Errors on PostgreSQL are explained by their class, with a fix in PostgreSQL's terms.
#[tokio::test]
async fn postgres_errors_are_one_line_with_the_fix() {
    let url = empty_postgres_database("cli_pg_errors").await;
    let database = url.rsplit('/').next().unwrap().to_owned();
    let missing = format!("{url}_missing");
    let run = jobqueue(Some(&missing), &["migrate", "--check"]).await;
    assert_eq!(
        run.user_error(),
        format!(
            "error: database {database}_missing does not exist on the server; create it (CREATE \
             DATABASE {database}_missing) and run `jobqueue migrate`, or fix the database name in \
             the URL"
        )
    );
    // A role the server does not know.
    let (scheme, rest) = url.split_once("://").unwrap();
    let host = &rest[rest.find('@').map_or(0, |at| at + 1)..];
    let stranger = format!("{scheme}://no_such_role_here@{host}");
    let run = jobqueue(Some(&stranger), &["migrate", "--check"]).await;
    let line = run.user_error();
    assert!(
        line.starts_with("error: the server refused the login of user no_such_role_here:"),
        "{line}"
    );
    assert!(
        line.contains("check the user and password in the URL"),
        "{line}"
    );
    let unparsable = jobqueue(Some("postgres://app:pw@localhost:port/shop"), &["status"]).await;
    assert!(
        unparsable
            .user_error()
            .contains("postgres://user:password@host:port/database"),
        "{unparsable:#?}"
    );
}

#[tokio::test]
async fn a_missing_table_is_one_line_with_the_fix() {
    let url = empty_database("cli_no_table").await;
    let database = url.rsplit('/').next().unwrap().to_owned();
    let expected = format!(
        "error: table job_queue does not exist in database {database}; run `jobqueue migrate` first"
    );
    for args in [
        &["status"][..],
        &["list", "--status", "failed"],
        &["show", "1"],
        &["retry", "--failed", "--dry-run"],
        &["purge", "--older-than", "7d"],
    ] {
        let run = jobqueue(Some(&url), args).await;
        assert_eq!(run.user_error(), expected, "jobqueue {args:?}");
    }
}

#[tokio::test]
async fn bad_urls_are_one_line_errors_with_the_fix() {
    let no_url = jobqueue(None, &["status"]).await;
    assert!(
        no_url
            .user_error()
            .contains("set DATABASE_URL or pass --database-url"),
        "{no_url:#?}"
    );

    let unparsable = jobqueue(Some("mysql://app:pw@localhost:port/shop"), &["status"]).await;
    assert!(
        unparsable
            .user_error()
            .contains("expected mysql://user:password@host:port/database"),
        "{unparsable:#?}"
    );

    let other_scheme = jobqueue(Some("sqlite://shop.db"), &["list"]).await;
    assert!(
        other_scheme
            .user_error()
            .contains("not a MySQL, MariaDB or PostgreSQL URL"),
        "{other_scheme:#?}"
    );

    // A port nothing listens on: bind one, then let it go.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let url = format!("mysql://root@127.0.0.1:{port}/shop");
    let unreachable = jobqueue(Some(&url), &["status", "--connect-timeout", "1s"]).await;
    let line = unreachable.user_error();
    assert!(line.contains("cannot connect to"), "{line}");
    assert!(line.contains("check the host and port"), "{line}");

    // A database that does not exist, on the real server.
    let url = empty_database("cli_bad_db").await;
    let missing = format!("{}_missing", url);
    let unknown = jobqueue(Some(&missing), &["status"]).await;
    let line = unknown.user_error();
    assert!(line.contains("does not exist"), "{line}");
    assert!(line.contains("CREATE DATABASE"), "{line}");

    // Usage errors also exit with 2.
    let usage = jobqueue(Some(&url), &["retry"]).await;
    assert_eq!(usage.code, Some(2), "{usage:#?}");
}

#[tokio::test]
async fn the_password_never_appears_in_output() {
    let (root_url, queue, p) = prepared_database("cli_password").await;
    let database = root_url.rsplit('/').next().unwrap().to_owned();
    let user = format!("jqcli_{}", &database[database.len().saturating_sub(20)..]);
    let password = "Pw-@-9f3k2x";
    let encoded = "Pw-%40-9f3k2x";
    for host in ["%", "localhost"] {
        for sql in [
            format!("CREATE USER '{user}'@'{host}' IDENTIFIED BY '{password}'"),
            format!("GRANT ALL ON `{database}`.* TO '{user}'@'{host}'"),
        ] {
            sqlx::query(&sql)
                .execute(queue.mysql_pool().unwrap())
                .await
                .expect(&sql);
        }
    }
    // mysql://root@host:port/db -> mysql://USER:PASSWORD@host:port/db
    let (scheme, rest) = root_url.split_once("://").unwrap();
    let (_, location) = rest.rsplit_once('@').unwrap();
    let url = format!("{scheme}://{user}:{encoded}@{location}");
    let elsewhere = format!(
        "{scheme}://{user}:{encoded}@{}",
        location.replace(&database, "elsewhere")
    );
    let bad_port = format!("{scheme}://{user}:{encoded}@127.0.0.1:notaport/{database}");
    let closed_port = format!("{scheme}://{user}:{encoded}@127.0.0.1:1/{database}");

    let id = p.failed_email.to_string();
    let runs = [
        jobqueue(Some(&url), &["status"]).await,
        jobqueue(Some(&url), &["status", "--json"]).await,
        jobqueue(Some(&url), &["list"]).await,
        jobqueue(Some(&url), &["show", &id]).await,
        jobqueue(Some(&url), &["retry", "--failed", "--dry-run"]).await,
        jobqueue(Some(&url), &["migrate", "--check"]).await,
        jobqueue(Some(&url), &["--help"]).await,
        jobqueue(Some(&url), &["status", "--help"]).await,
        jobqueue_with_env(Some(&url), &["list"], &[("RUST_LOG", "trace")]).await,
        jobqueue(Some(&elsewhere), &["status"]).await,
        jobqueue(Some(&bad_port), &["status"]).await,
        jobqueue(Some(&closed_port), &["status", "--connect-timeout", "1s"]).await,
        jobqueue(None, &["--database-url", &bad_port, "status"]).await,
    ];
    // The password worked: the successful runs read the prepared jobs.
    assert!(runs[2].ok().contains("send_email"), "{:#?}", runs[2]);
    assert!(runs[3].ok().contains("mailbox full"), "{:#?}", runs[3]);
    assert!(runs[8].ok().contains("export_order"), "{:#?}", runs[8]);
    // The failed ones named the URL, redacted.
    for run in &runs[10..] {
        assert!(
            run.user_error().contains(&format!("{user}:***@")),
            "{run:#?}"
        );
    }
    for run in &runs {
        for secret in [password, encoded] {
            assert!(
                !run.stdout.contains(secret) && !run.stderr.contains(secret),
                "the password leaked: {run:#?}"
            );
        }
    }
}

// ---------------------------------------------------------------------------------------
// Scripts: --json of the commands that change something, confirmations, exit statuses
// ---------------------------------------------------------------------------------------

/// Parses the one line of JSON a changing command prints, after asserting its exit status.
fn json_line(run: &Run, code: i32) -> Value {
    assert_eq!(run.code, Some(code), "{run:#?}");
    assert_eq!(run.stdout.lines().count(), 1, "one line: {run:#?}");
    serde_json::from_str(&run.stdout).unwrap_or_else(|e| panic!("not JSON ({e}): {run:#?}"))
}

/// The ids of the jobs of `queue` in `status`, as the table has them.
async fn ids_in(queue: &Queue, in_queue: &str, status: &str) -> Vec<u64> {
    sqlx::query_scalar("SELECT id FROM job_queue WHERE queue = ? AND status = ? ORDER BY id")
        .bind(in_queue)
        .bind(status)
        .fetch_all(queue.mysql_pool().unwrap())
        .await
        .expect("read ids")
}

#[tokio::test]
async fn every_changing_command_prints_one_json_object() {
    let (url, queue, p) = prepared_database("cli_json").await;

    // retry ID
    let id = p.failed_out_of_attempts;
    let dry = json_line(
        &jobqueue(
            Some(&url),
            &["retry", &id.to_string(), "--dry-run", "--json"],
        )
        .await,
        0,
    );
    assert_eq!(dry["command"], "retry");
    assert_eq!(dry["dry_run"], true);
    assert_eq!(dry["matched"], 1);
    assert_eq!(dry["changed"], 0);
    assert_eq!(status_of(&queue, id).await, JobStatus::Failed);
    let one = json_line(
        &jobqueue(Some(&url), &["retry", &id.to_string(), "--json"]).await,
        0,
    );
    assert_eq!(one["id"], id);
    assert_eq!(one["dry_run"], false);
    assert_eq!(one["changed"], 1);
    assert_eq!(one["status_before"], "failed");
    assert_eq!(one["status_after"], "ready");
    assert_eq!(one["attempts"], 3);
    assert_eq!(one["max_attempts"], 4);
    assert_eq!(one["queue"], "exports");
    assert_eq!(one["kind"], "export_order");
    assert!(one["message"].as_str().unwrap().starts_with("retried job"));
    assert_eq!(status_of(&queue, id).await, JobStatus::Ready);

    // cancel ID: a ready job, then a running one.
    let ready = p.ready[0];
    let cancelled = json_line(
        &jobqueue(Some(&url), &["cancel", &ready.to_string(), "--json"]).await,
        0,
    );
    assert_eq!(cancelled["command"], "cancel");
    assert_eq!(cancelled["changed"], 1);
    assert_eq!(cancelled["status_before"], "ready");
    assert_eq!(cancelled["status_after"], "cancelled");
    assert_eq!(cancelled["cancel_requested"], false);
    assert_eq!(status_of(&queue, ready).await, JobStatus::Cancelled);
    let asked = json_line(
        &jobqueue(Some(&url), &["cancel", &p.running.to_string(), "--json"]).await,
        0,
    );
    assert_eq!(asked["changed"], 1);
    assert_eq!(asked["status_after"], "running");
    assert_eq!(asked["cancel_requested"], true);
    let ended = json_line(
        &jobqueue(
            Some(&url),
            &["cancel", &p.done_recently.to_string(), "--json"],
        )
        .await,
        0,
    );
    assert_eq!(ended["matched"], 0);
    assert_eq!(ended["changed"], 0);
    assert_eq!(ended["status_after"], "done");

    // pause, resume
    let paused = json_line(
        &jobqueue(Some(&url), &["pause", "exports", "--json"]).await,
        0,
    );
    assert_eq!(paused["command"], "pause");
    assert_eq!(paused["queue"], "exports");
    assert_eq!(paused["paused"], true);
    assert_eq!(paused["known_queue"], true);
    assert_eq!(paused["changed"], 1);
    let again = json_line(
        &jobqueue(Some(&url), &["pause", "exports", "--json"]).await,
        0,
    );
    assert_eq!(again["changed"], 0);
    let resumed = json_line(
        &jobqueue(Some(&url), &["resume", "exports", "--json"]).await,
        0,
    );
    assert_eq!(resumed["command"], "resume");
    assert_eq!(resumed["paused"], false);
    assert_eq!(resumed["changed"], 1);
    assert!(queue.paused_queues().await.unwrap().is_empty());

    // purge
    let purged = json_line(
        &jobqueue(
            Some(&url),
            &[
                "purge",
                "--older-than",
                "7d",
                "--queue",
                "default",
                "--yes",
                "--json",
            ],
        )
        .await,
        0,
    );
    assert_eq!(purged["command"], "purge");
    assert_eq!(purged["dry_run"], false);
    assert_eq!(purged["matched"], 2);
    assert_eq!(purged["changed"], 2);
    assert_eq!(purged["filter"]["queue"], "default");
    assert_eq!(purged["filter"]["kind"], Value::Null);
    assert_eq!(purged["filter"]["status"], serde_json::json!(["done"]));
    assert_eq!(purged["older_than"], "7d");
    assert_eq!(purged["older_than_secs"], 7 * 86_400);
    for id in p.done_long_ago {
        assert!(queue.job(id).await.unwrap().is_none(), "job {id} is left");
    }

    // migrate, up to date
    let migrate = json_line(&jobqueue(Some(&url), &["migrate", "--json"]).await, 0);
    assert_eq!(migrate["command"], "migrate");
    assert_eq!(migrate["matched"], 0);
    assert_eq!(migrate["changed"], 0);
    assert_eq!(migrate["pending"], serde_json::json!([]));
    let check = json_line(
        &jobqueue(Some(&url), &["migrate", "--check", "--json"]).await,
        0,
    );
    assert_eq!(check["dry_run"], true);
}

#[tokio::test]
async fn migrate_json_lists_what_it_applies() {
    let url = empty_database("cli_migrate_json").await;
    let check = json_line(
        &jobqueue(Some(&url), &["migrate", "--check", "--json"]).await,
        1,
    );
    assert_eq!(check["dry_run"], true);
    let pending = check["pending"].as_array().expect("pending");
    assert!(!pending.is_empty());
    assert_eq!(pending[0]["version"], 20261130000001_i64);
    assert_eq!(check["matched"], pending.len());
    assert_eq!(check["changed"], 0);
    let applied = json_line(&jobqueue(Some(&url), &["migrate", "--json"]).await, 0);
    assert_eq!(applied["changed"], pending.len());
    assert_eq!(applied["pending"], check["pending"]);
    let check = json_line(
        &jobqueue(Some(&url), &["migrate", "--check", "--json"]).await,
        0,
    );
    assert_eq!(check["matched"], 0);
}

#[tokio::test]
async fn purge_off_a_terminal_needs_yes() {
    let (url, queue, p) = prepared_database("cli_purge_yes").await;
    let before = rows(&queue).await;

    let refused = jobqueue(Some(&url), &["purge", "--older-than", "7d"]).await;
    let line = refused.user_error();
    assert!(line.contains("refusing to delete 2 done jobs"), "{line}");
    assert!(line.contains("add --yes"), "{line}");
    assert_eq!(rows(&queue).await, before, "a refused purge changed rows");
    // --json changes nothing about it.
    let refused = jobqueue(Some(&url), &["purge", "--older-than", "7d", "--json"]).await;
    assert!(refused.user_error().contains("add --yes"), "{refused:#?}");
    assert_eq!(rows(&queue).await, before, "a refused purge changed rows");

    // A dry run never asks.
    let dry = json_line(
        &jobqueue(
            Some(&url),
            &["purge", "--older-than", "7d", "--dry-run", "--json"],
        )
        .await,
        0,
    );
    assert_eq!(dry["matched"], 2);
    assert_eq!(dry["changed"], 0);
    assert_eq!(rows(&queue).await, before, "a dry run changed rows");

    let done = json_line(
        &jobqueue(Some(&url), &["purge", "--older-than", "7d", "-y", "--json"]).await,
        0,
    );
    let after = rows(&queue).await;
    assert_eq!(done["changed"], (before.len() - after.len()) as u64);
    assert_eq!(done["changed"], 2);
    for id in p.done_long_ago {
        assert!(row_of(&after, id).is_none(), "job {id} is left");
    }

    // By kind: no failed job of kind export_order is older than a day.
    let none = json_line(
        &jobqueue(
            Some(&url),
            &[
                "purge",
                "--status",
                "failed",
                "--kind",
                "export_order",
                "--older-than",
                "1d",
                "--json",
            ],
        )
        .await,
        0,
    );
    assert_eq!(none["matched"], 0);
    assert_eq!(rows(&queue).await, after);
}

#[tokio::test]
async fn bulk_cancel_by_queue_changes_exactly_that_queue() {
    let (url, queue, p) = prepared_database("cli_cancel_queue").await;
    let before = rows(&queue).await;

    let refused = jobqueue(Some(&url), &["cancel", "--queue", "exports"]).await;
    assert!(
        refused
            .user_error()
            .contains("refusing to cancel 2 waiting jobs in queue exports"),
        "{refused:#?}"
    );
    assert_eq!(rows(&queue).await, before);

    let dry = json_line(
        &jobqueue(
            Some(&url),
            &["cancel", "--queue", "exports", "--dry-run", "--json"],
        )
        .await,
        0,
    );
    assert_eq!(dry["matched"], 2);
    assert_eq!(dry["changed"], 0);
    assert_eq!(dry["running_left"], 2);
    assert_eq!(rows(&queue).await, before);

    let done = json_line(
        &jobqueue(
            Some(&url),
            &["cancel", "--queue", "exports", "--yes", "--json"],
        )
        .await,
        0,
    );
    assert_eq!(done["command"], "cancel");
    assert_eq!(done["matched"], 2);
    assert_eq!(done["changed"], 2);
    assert_eq!(done["running_left"], 2);
    assert_eq!(done["filter"]["queue"], "exports");
    assert_eq!(
        done["filter"]["status"],
        serde_json::json!(["scheduled", "ready", "blocked"])
    );
    let message = done["message"].as_str().unwrap();
    assert!(message.contains("2 running jobs left alone"), "{message}");

    // Exactly the two ready jobs of exports changed; the default queue's scheduled job
    // and everything else did not.
    let after = rows(&queue).await;
    for r in &before {
        let id: u64 = r.split('|').next().unwrap().parse().unwrap();
        if p.ready.contains(&id) {
            assert_eq!(status_of(&queue, id).await, JobStatus::Cancelled);
        } else {
            assert_eq!(row_of(&after, id), Some(r), "job {id} changed");
        }
    }
    assert_eq!(ids_in(&queue, "default", "scheduled").await, [p.scheduled]);

    // --status narrows it: there is no ready job left in exports.
    let none = json_line(
        &jobqueue(
            Some(&url),
            &["cancel", "-q", "exports", "--status", "ready", "--json"],
        )
        .await,
        0,
    );
    assert_eq!(none["matched"], 0);
    assert_eq!(none["running_left"], 0);
}

#[tokio::test]
async fn retry_by_kind_and_by_key() {
    let (url, queue, p) = prepared_database("cli_retry_kind").await;
    let before = rows(&queue).await;

    // send_email has one failed and one cancelled job: both come back.
    let done = json_line(
        &jobqueue(
            Some(&url),
            &["retry", "--kind", "send_email", "--yes", "--json"],
        )
        .await,
        0,
    );
    assert_eq!(done["command"], "retry");
    assert_eq!(done["matched"], 2);
    assert_eq!(done["changed"], 2);
    assert_eq!(done["filter"]["kind"], "send_email");
    assert_eq!(
        done["filter"]["status"],
        serde_json::json!(["failed", "cancelled"])
    );
    assert_eq!(status_of(&queue, p.failed_email).await, JobStatus::Ready);
    assert_eq!(status_of(&queue, p.cancelled).await, JobStatus::Ready);
    let after = rows(&queue).await;
    for r in &before {
        let id: u64 = r.split('|').next().unwrap().parse().unwrap();
        if id != p.failed_email && id != p.cancelled {
            assert_eq!(row_of(&after, id), Some(r), "job {id} changed");
        }
    }

    // --status cancelled over a kind with no cancelled job left.
    let none = json_line(
        &jobqueue(
            Some(&url),
            &["retry", "-k", "export_order", "-s", "cancelled", "--json"],
        )
        .await,
        0,
    );
    assert_eq!(none["matched"], 0);

    // One job by its exact key, and a prefix over several.
    let key = queue
        .job(p.failed_permanently)
        .await
        .unwrap()
        .unwrap()
        .task_key;
    let one = json_line(
        &jobqueue(Some(&url), &["retry", "--key", &key, "--json"]).await,
        0,
    );
    assert_eq!(one["id"], p.failed_permanently);
    assert_eq!(one["changed"], 1);
    let prefix: String = key.chars().take(1).collect();
    let some = json_line(
        &jobqueue(
            Some(&url),
            &["retry", "--key-prefix", &prefix, "--dry-run", "--json"],
        )
        .await,
        0,
    );
    assert_eq!(some["filter"]["key_prefix"], prefix.as_str());
    assert_eq!(
        some["matched"],
        queue
            .count(
                &jobqueue::admin::JobFilter::default()
                    .key_prefix(prefix.clone())
                    .status(JobStatus::Failed)
            )
            .await
            .unwrap()
            + queue
                .count(
                    &jobqueue::admin::JobFilter::default()
                        .key_prefix(prefix.clone())
                        .status(JobStatus::Cancelled)
                )
                .await
                .unwrap()
    );
}

#[tokio::test]
async fn exit_statuses() {
    let (url, queue, p) = prepared_database("cli_exit").await;
    let ready = p.ready[0].to_string();

    // Nothing to change: 0, or 1 with --strict (also for a dry run).
    assert_eq!(jobqueue(Some(&url), &["retry", &ready]).await.code, Some(0));
    let strict = jobqueue(Some(&url), &["retry", &ready, "--strict"]).await;
    assert_eq!(strict.code, Some(1), "{strict:#?}");
    assert!(strict.stdout.starts_with("not retried"), "{strict:#?}");
    let strict = jobqueue(Some(&url), &["retry", &ready, "--strict", "--dry-run"]).await;
    assert_eq!(strict.code, Some(1), "{strict:#?}");
    let done = p.done_recently.to_string();
    let strict = jobqueue(Some(&url), &["cancel", &done, "--strict", "--json"]).await;
    assert_eq!(json_line(&strict, 1)["changed"], 0);
    let strict = jobqueue(Some(&url), &["resume", "exports", "--strict"]).await;
    assert_eq!(strict.code, Some(1), "{strict:#?}");
    let strict = jobqueue(
        Some(&url),
        &["purge", "--older-than", "30d", "--strict", "--dry-run"],
    )
    .await;
    assert_eq!(strict.code, Some(1), "{strict:#?}");
    // Something to change, with --strict: 0.
    let changed = jobqueue(
        Some(&url),
        &["retry", &p.failed_email.to_string(), "--strict"],
    )
    .await;
    assert_eq!(changed.code, Some(0), "{changed:#?}");
    assert_eq!(status_of(&queue, p.failed_email).await, JobStatus::Ready);

    // Usage errors: 2, one line.
    let bare = jobqueue(Some(&url), &["retry"]).await;
    assert!(bare.user_error().contains("give a job id"), "{bare:#?}");
    let bare = jobqueue(Some(&url), &["cancel"]).await;
    assert!(bare.user_error().contains("--status"), "{bare:#?}");
    // Found before connecting: a database that does not exist is not the error.
    let bare = jobqueue(Some(&format!("{url}_missing")), &["retry"]).await;
    assert!(bare.user_error().contains("give a job id"), "{bare:#?}");
    let both = jobqueue(Some(&url), &["cancel", &ready, "--queue", "exports"]).await;
    assert_eq!(both.code, Some(2), "{both:#?}");
    let wrong = jobqueue(Some(&url), &["cancel", "--status", "running"]).await;
    assert_eq!(wrong.code, Some(2), "{wrong:#?}");
    let refused = jobqueue(Some(&url), &["retry", "--failed"]).await;
    assert!(refused.user_error().contains("add --yes"), "{refused:#?}");
    let print = jobqueue(None, &["migrate", "--print-sql", "--json"]).await;
    assert!(
        print.user_error().contains("leave out --json"),
        "{print:#?}"
    );
}

#[tokio::test]
async fn pausing_an_unknown_queue_warns_and_pauses() {
    let (url, queue, _p) = prepared_database("cli_pause_typo").await;

    let typo = jobqueue(Some(&url), &["pause", "exprots"]).await;
    assert!(typo.ok().starts_with("paused queue exprots"), "{typo:#?}");
    assert!(
        typo.stderr
            .starts_with("warning: queue exprots has no job and no worker claims from it"),
        "{typo:#?}"
    );
    assert_eq!(queue.paused_queues().await.unwrap(), ["exprots"]);
    let json = json_line(
        &jobqueue(Some(&url), &["pause", "other", "--json", "--dry-run"]).await,
        0,
    );
    assert_eq!(json["known_queue"], false);

    let known = jobqueue(Some(&url), &["pause", "exports"]).await;
    assert!(known.ok().starts_with("paused queue exports"), "{known:#?}");
    assert_eq!(known.stderr, "", "{known:#?}");
}

#[tokio::test]
async fn show_hide_payload_prints_neither_payload_nor_output() {
    let (url, _queue, p) = prepared_database("cli_hide").await;
    let id = p.failed_out_of_attempts.to_string();

    let text = jobqueue(Some(&url), &["show", &id, "--hide-payload"]).await;
    let text = text.ok();
    assert!(
        !text.contains("order_id") && !text.contains("7413"),
        "{text}"
    );
    assert!(text.contains("payload\n  hidden ("), "{text}");
    assert!(text.contains("status    failed"), "{text}");

    let json = jobqueue(Some(&url), &["show", &id, "--hide-payload", "--json"])
        .await
        .json();
    assert_eq!(json["payload"], Value::Null);
    assert_eq!(json["output"], Value::Null);
    assert_eq!(json["payload_hidden"], true);
    assert_eq!(json["status"], "failed");
    let shown = jobqueue(Some(&url), &["show", &id, "--json"]).await.json();
    assert_eq!(shown["payload_hidden"], false);
    assert_eq!(shown["payload"]["order_id"], 7413);

    let list = jobqueue(Some(&url), &["list", "--hide-payload", "--json"])
        .await
        .json();
    for job in list["jobs"].as_array().unwrap() {
        assert_eq!(job["payload"], Value::Null, "{job}");
    }
}

/// The headers of the `status` sample in the README and in the operations guide are those
/// `status` prints.
#[tokio::test]
async fn the_documented_status_sample_has_the_printed_columns() {
    let (url, _queue, _p) = prepared_database("cli_readme").await;
    let text = jobqueue(Some(&url), &["status"]).await.ok().to_owned();
    let header = |text: &str, first: &str| -> Vec<String> {
        text.lines()
            .find(|l| l.trim_start().starts_with(first))
            .unwrap_or_else(|| panic!("no line starting with {first}:\n{text}"))
            .split_whitespace()
            .map(str::to_owned)
            .collect()
    };
    for (name, doc) in [
        ("jobqueue-cli/README.md", include_str!("../README.md")),
        ("docs/guide/cli.md", include_str!("../../docs/guide/cli.md")),
    ] {
        for first in ["QUEUE ", "ID  QUEUE "] {
            assert_eq!(
                header(doc, first),
                header(&text, first),
                "the sample of {name} has other columns than `jobqueue status` prints:\n{text}"
            );
        }
    }
}

/// Runs `jobqueue ARGS` on a terminal (util-linux `script` gives it one), typing `answer`;
/// returns its exit status and what the terminal showed (standard output and error).
async fn jobqueue_on_a_terminal(url: &str, args: &[&str], answer: &str) -> (Option<i32>, String) {
    use tokio::io::AsyncWriteExt;
    let line = format!("exec {} {}", env!("CARGO_BIN_EXE_jobqueue"), args.join(" "));
    let mut child = tokio::process::Command::new("script")
        .args(["--quiet", "--return", "--command", &line, "/dev/null"])
        .env("DATABASE_URL", url)
        .env("NO_COLOR", "1")
        .env_remove("RUST_LOG")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("this test needs util-linux `script` to give the command a terminal");
    let mut stdin = child.stdin.take().unwrap();
    stdin.write_all(answer.as_bytes()).await.unwrap();
    drop(stdin);
    let output = tokio::time::timeout(Duration::from_secs(60), child.wait_with_output())
        .await
        .expect("jobqueue on a terminal did not finish in 60 s")
        .expect("run script");
    (
        output.status.code(),
        String::from_utf8_lossy(&output.stdout).replace("\r\n", "\n"),
    )
}

#[tokio::test]
async fn on_a_terminal_a_purge_asks_first() {
    let (url, queue, p) = prepared_database("cli_purge_tty").await;
    let before = rows(&queue).await;
    let args = ["purge", "--older-than", "7d"];

    let (code, screen) = jobqueue_on_a_terminal(&url, &args, "n\n").await;
    assert!(
        screen.contains(
            "confirm: delete 2 done jobs that finished more than 7d ago. Go ahead? [y/N]"
        ),
        "{screen}"
    );
    assert!(
        screen.contains("not confirmed: nothing changed"),
        "{screen}"
    );
    assert_eq!(code, Some(1), "{screen}");
    assert_eq!(rows(&queue).await, before, "a declined purge changed rows");

    let (code, screen) = jobqueue_on_a_terminal(&url, &args, "y\n").await;
    assert_eq!(code, Some(0), "{screen}");
    assert!(
        screen.contains("deleted 2 done jobs that finished more than 7d ago; 2 rows changed"),
        "{screen}"
    );
    let after = rows(&queue).await;
    assert_eq!(after.len(), before.len() - 2);
    for id in p.done_long_ago {
        assert!(row_of(&after, id).is_none(), "job {id} is left");
    }
}

#[test]
fn mysql_intervals_become_postgres_ones() {
    assert_eq!(
        postgres_sql("SET a = UTC_TIMESTAMP(6) - INTERVAL 10 MINUTE, b = 1 WHERE x"),
        "SET a = job_queue_now() - INTERVAL '10 MINUTE', b = 1 WHERE x"
    );
    assert_eq!(
        postgres_sql("x - INTERVAL 10 DAY WHERE id = 3"),
        "x - INTERVAL '10 DAY' WHERE id = 3"
    );
}
