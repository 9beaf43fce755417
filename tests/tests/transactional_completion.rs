//! Transactional completion: a job's writes and its `done` in one transaction
//! (`JobContext::complete_in`), fenced like every outcome write.
//!
//! The in-process tests hold a job inside its transaction (it waits for the test's go) and
//! look at the database from outside: the effect and the completion appear together; a
//! stale attempt, a job an operator asked to cancel, and a transaction rolled back after
//! `complete_in` commit nothing. The last test kills worker processes (`test-worker`) with
//! SIGKILL while their jobs hold such transactions open, and counts the effects: one per
//! job, from the attempt that completed it.
//!
//! ```text
//! cargo test -p tests --test transactional_completion -- --nocapture
//! ```

use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use jobqueue::admin::{AttemptOutcome, CancelOutcome};
use jobqueue::{job, Backend, Data, JobContext, JobError, JobStatus, Queue};
use serde_json::Value;
use sqlx::mysql::MySqlPool;
use tests::{
    count_status, effects_of, fresh_database, fresh_queue_with_effects_on, migrated_queue,
    on_every_backend, quick_worker, receive, row, sql_i64, start, stop, wait_for, wait_status,
    Effects, EffectsTx, Mailbox,
};
use tokio::io::{AsyncBufReadExt as _, BufReader};
use tokio::process::{Child, Command};
use tokio::sync::Notify;

#[allow(dead_code)] // the fault test enqueues these kinds; only the worker processes run them
#[path = "../src/bin/test-worker/jobs.rs"]
mod jobs;

const WAIT: Duration = Duration::from_secs(30);

// ---------------------------------------------------------------------------------------
// In-process jobs
// ---------------------------------------------------------------------------------------

/// How a held job and its test talk. Each test has its own, picked by the job's `n`, since
/// the tests of this file run at the same time.
struct Gate {
    /// The job is inside its transaction, with its effect written: (id, attempt).
    inside: Mailbox<(u64, u32)>,
    /// What `complete_in` returned, as text (`"ok"` or the error).
    completed: Mailbox<String>,
    /// Lets the job go on.
    go: Notify,
}

impl Gate {
    const fn new() -> Gate {
        Gate {
            inside: Mailbox::new(),
            completed: Mailbox::new(),
            go: Notify::const_new(),
        }
    }
}

/// Gates 0 (effect and done together), 1 (stale attempt), 2 (cancel requested), 3 (the last
/// progress value), 4 (a limited job's transaction held open), for each backend: a job's `n`
/// is its gate, plus 10 on PostgreSQL (see [`n_on`]), since the two backends' runs of a test
/// run at once.
static GATES: [[Gate; 5]; 2] = [
    [
        Gate::new(),
        Gate::new(),
        Gate::new(),
        Gate::new(),
        Gate::new(),
    ],
    [
        Gate::new(),
        Gate::new(),
        Gate::new(),
        Gate::new(),
        Gate::new(),
    ],
];

/// The `n` of a test's job on `backend`: `n` on MySQL, `n + 10` on PostgreSQL.
fn n_on(backend: Backend, n: u32) -> u32 {
    match backend {
        Backend::Postgres => n + 10,
        _ => n,
    }
}

/// The gate of job `n` (see [`n_on`]).
fn gate_of(n: u32) -> &'static Gate {
    &GATES[(n / 10) as usize][(n % 10) as usize]
}

/// The database's clock in SQL.
fn now_sql(queue: &Queue) -> &'static str {
    match queue.backend() {
        Backend::Postgres => "job_queue_now()",
        _ => "UTC_TIMESTAMP(6)",
    }
}

/// Completes itself first in its transaction, writes its effect, tells the test, and
/// commits when the test says go.
#[job(queue = "held_commit", key = "held:{n}")]
async fn held_commit(ctx: JobContext, pool: Data<Effects>, n: u32) -> Result<(), JobError> {
    let mut tx = pool.begin().await?;
    tx.complete(&ctx).await?;
    tx.effect(&ctx, "transfer").await?;
    let gate = gate_of(n);
    gate.inside.send((ctx.id(), ctx.attempt()));
    gate.go.notified().await;
    tx.commit().await?;
    Ok(())
}

/// Writes its effect, waits for the test's go, then completes itself last: the test makes
/// the attempt stale (or cancels the job) meanwhile.
#[job(queue = "held_late", key = "late:{n}")]
async fn held_late(ctx: JobContext, pool: Data<Effects>, n: u32) -> Result<(), JobError> {
    let mut tx = pool.begin().await?;
    tx.effect(&ctx, "transfer").await?;
    let gate = gate_of(n);
    gate.inside.send((ctx.id(), ctx.attempt()));
    gate.go.notified().await;
    let completed = tx.complete(&ctx).await;
    gate.completed.send(match &completed {
        Ok(()) => "ok".to_owned(),
        Err(e) => e.to_string(),
    });
    completed?;
    tx.commit().await?;
    Ok(())
}

/// Completes itself and writes its effect, then rolls back on its first attempt and still
/// returns `Ok`; commits on the second.
#[job(
    queue = "rolls_back",
    key = "rollback:{n}",
    backoff = "constant(100ms)"
)]
async fn rolls_back(ctx: JobContext, pool: Data<Effects>, n: u32) -> Result<(), JobError> {
    let _ = n;
    let mut tx = pool.begin().await?;
    tx.complete(&ctx).await?;
    tx.effect(&ctx, "transfer").await?;
    if ctx.attempt() == 1 {
        tx.rollback().await?;
    } else {
        tx.commit().await?;
    }
    Ok(())
}

/// Commits its completion with its effect, then fails anyway.
#[job(queue = "fails_after", key = "after:{n}")]
async fn fails_after(ctx: JobContext, pool: Data<Effects>, n: u32) -> Result<(), JobError> {
    let _ = n;
    let mut tx = pool.begin().await?;
    tx.complete(&ctx).await?;
    tx.effect(&ctx, "transfer").await?;
    tx.commit().await?;
    Err("a step after the commit failed".into())
}

/// A worker on `queue` with the effects pool as its data.
fn worker(queue: &Queue, name: &str, effects: &Effects) -> jobqueue::Worker {
    quick_worker(queue)
        .queues([name])
        .concurrency(1)
        .data(effects.clone())
        .build()
        .expect("build the worker")
}

// ---------------------------------------------------------------------------------------
// 1. The effect and `done` commit together.
// ---------------------------------------------------------------------------------------

async fn the_effect_and_done_commit_together(backend: Backend) {
    let (queue, effects) = fresh_queue_with_effects_on(backend, "txdone_together").await;
    let n = n_on(backend, 0);
    let gate = gate_of(n);
    let mut inside = gate.inside.open();
    let id = queue.enqueue(HeldCommit { n }).await.unwrap().id();
    let (handle, task) = start(worker(&queue, "held_commit", &effects));

    let (job, attempt) = receive(&mut inside, "the job inside its transaction", WAIT).await;
    assert_eq!((job, attempt), (id, 1));
    // Completed and written, not committed: neither shows outside.
    let before = row(&queue, id).await;
    assert_eq!(before.status, JobStatus::Running);
    let key = format!("held:{n}");
    assert!(effects_of(&effects, &key).await.is_empty());

    gate.go.notify_one();
    let after = wait_status(&queue, id, JobStatus::Done, WAIT).await;
    assert_eq!(after.attempts, 1);
    assert_eq!(after.lease_owner, None);
    assert!(after.finished_at.is_some());
    assert_eq!(
        effects_of(&effects, &key).await,
        [(1, "transfer".to_owned())]
    );
    // Counted once, as a success; the worker wrote nothing more.
    wait_for("the success to be counted", WAIT, || async {
        (handle.metrics().succeeded == 1).then_some(())
    })
    .await;
    stop(&handle, task).await;
    let m = handle.metrics();
    assert_eq!(
        (m.succeeded, m.retried, m.failed, m.lease_lost),
        (1, 0, 0, 0),
        "{m:?}"
    );
    assert_eq!(row(&queue, id).await.updated_at, after.updated_at);
    // The attempt is in the job's history, as for a completion the worker writes.
    let history = queue.attempts(id).await.unwrap();
    assert_eq!(history.len(), 1, "{history:?}");
    assert_eq!(
        (
            history[0].attempt,
            history[0].outcome,
            history[0].error.as_deref()
        ),
        (1, AttemptOutcome::Done, None)
    );
    assert!(history[0].started_at.is_some() && history[0].worker.is_some());
}

// ---------------------------------------------------------------------------------------
// 2. A stale attempt: its lease ran out, the job was taken back and claimed by another
//    worker. Its completion matches nothing, and its effect is not committed.
// ---------------------------------------------------------------------------------------

async fn a_stale_attempt_gets_an_error_and_commits_nothing(backend: Backend) {
    let (queue, effects) = fresh_queue_with_effects_on(backend, "txdone_stale").await;
    let n = n_on(backend, 1);
    let gate = gate_of(n);
    let (mut inside, mut completed) = (gate.inside.open(), gate.completed.open());
    let id = queue.enqueue(HeldLate { n }).await.unwrap().id();
    // No maintenance in this worker: the test takes the job back itself.
    let stale = quick_worker(&queue)
        .queues(["held_late"])
        .concurrency(1)
        .maintenance(false)
        .data(effects.clone())
        .build()
        .unwrap();
    let (handle, task) = start(stale);
    let (job, attempt) = receive(&mut inside, "the job inside its transaction", WAIT).await;
    assert_eq!((job, attempt), (id, 1));

    // As after a pause longer than the lease: expired, reclaimed, claimed by worker B.
    let store = queue.store();
    let now = now_sql(&queue);
    let second_ago = match backend {
        Backend::Postgres => format!("{now} - INTERVAL '1 second'"),
        _ => format!("{now} - INTERVAL 1 SECOND"),
    };
    tests::sql_exec(
        &queue,
        &format!("UPDATE job_queue SET lease_until = {second_ago} WHERE id = ?"),
        &[tests::Arg::Int(id as i64)],
    )
    .await;
    let reclaimed = store.reclaim(10).await.unwrap();
    assert_eq!(reclaimed.ready.len(), 1, "{reclaimed:?}");
    let b = store.claim("held_late", "worker-b", 1).await.unwrap();
    assert_eq!((b.len(), b[0].attempt), (1, 2));

    gate.go.notify_one();
    let error = receive(&mut completed, "what complete_in returned", WAIT).await;
    assert_eq!(
        error,
        format!(
            "job {id} was not completed by attempt 1: this attempt no longer holds the job's \
             lease: its lease ran out and the job was taken back (it is now running at attempt \
             2), so another attempt does its work; roll the transaction back (returning this \
             error from the job does) so that none of its writes commit"
        )
    );
    // The stale attempt's outcome is discarded (lease lost), and its effect never committed.
    wait_for("the lost lease to be counted", WAIT, || async {
        (handle.metrics().lease_lost == 1).then_some(())
    })
    .await;
    assert!(effects_of(&effects, &format!("late:{n}")).await.is_empty());
    let r = row(&queue, id).await;
    assert_eq!(r.status, JobStatus::Running);
    assert_eq!(r.lease_owner.as_deref(), Some("worker-b"));
    assert_eq!(r.attempts, 2);
    stop(&handle, task).await;
    let m = handle.metrics();
    assert_eq!((m.succeeded, m.retried, m.lease_lost), (0, 0, 1), "{m:?}");
}

// ---------------------------------------------------------------------------------------
// 3. An operator's cancel that lands before the completion: nothing commits, the job ends
//    cancelled.
// ---------------------------------------------------------------------------------------

async fn a_cancel_requested_before_the_completion_commits_nothing(backend: Backend) {
    let (queue, effects) = fresh_queue_with_effects_on(backend, "txdone_cancel").await;
    let n = n_on(backend, 2);
    let gate = gate_of(n);
    let (mut inside, mut completed) = (gate.inside.open(), gate.completed.open());
    let id = queue.enqueue(HeldLate { n }).await.unwrap().id();
    let (handle, task) = start(worker(&queue, "held_late", &effects));
    receive(&mut inside, "the job inside its transaction", WAIT).await;

    assert_eq!(queue.cancel(id).await.unwrap(), CancelOutcome::Requested);
    gate.go.notify_one();
    let error = receive(&mut completed, "what complete_in returned", WAIT).await;
    assert!(
        error.contains("an operator asked to cancel it, so none of its effects may commit"),
        "{error}"
    );
    let r = wait_status(&queue, id, JobStatus::Cancelled, WAIT).await;
    assert_eq!(r.attempts, 1);
    assert!(effects_of(&effects, &format!("late:{n}")).await.is_empty());
    stop(&handle, task).await;
    let m = handle.metrics();
    assert_eq!((m.succeeded, m.cancelled), (0, 1), "{m:?}");
}

// ---------------------------------------------------------------------------------------
// 4. A rollback after `complete_in`: the attempt counts as failed, the job is retried, and
//    the effect is there once, from the attempt that committed.
// ---------------------------------------------------------------------------------------

async fn a_rollback_after_complete_in_retries_the_job(backend: Backend) {
    let (queue, effects) = fresh_queue_with_effects_on(backend, "txdone_rollback").await;
    let id = queue.enqueue(RollsBack { n: 1 }).await.unwrap().id();
    let (handle, task) = start(worker(&queue, "rolls_back", &effects));

    let r = wait_status(&queue, id, JobStatus::Done, WAIT).await;
    assert_eq!(r.attempts, 2, "the rolled-back attempt counts");
    let error = r.last_error.unwrap_or_default();
    assert!(
        error.contains("the job returned Ok, but the transaction in which it called `complete_in` did not commit"),
        "{error}"
    );
    assert_eq!(
        effects_of(&effects, "rollback:1").await,
        [(2, "transfer".to_owned())]
    );
    wait_for("the success to be counted", WAIT, || async {
        (handle.metrics().succeeded == 1).then_some(())
    })
    .await;
    stop(&handle, task).await;
    let m = handle.metrics();
    assert_eq!((m.succeeded, m.retried, m.lease_lost), (1, 1, 0), "{m:?}");
}

// ---------------------------------------------------------------------------------------
// 5. An error after the commit: the committed completion stands.
// ---------------------------------------------------------------------------------------

async fn an_error_after_the_commit_leaves_the_job_done(backend: Backend) {
    let (queue, effects) = fresh_queue_with_effects_on(backend, "txdone_after").await;
    let id = queue.enqueue(FailsAfter { n: 1 }).await.unwrap().id();
    let (handle, task) = start(worker(&queue, "fails_after", &effects));
    wait_for("the success to be counted", WAIT, || async {
        (handle.metrics().succeeded == 1).then_some(())
    })
    .await;
    stop(&handle, task).await;
    let r = row(&queue, id).await;
    assert_eq!(
        (r.status, r.attempts, r.last_error),
        (JobStatus::Done, 1, None)
    );
    assert_eq!(effects_of(&effects, "after:1").await.len(), 1);
    let m = handle.metrics();
    assert_eq!(
        (m.succeeded, m.retried, m.failed, m.lease_lost),
        (1, 0, 0, 0),
        "{m:?}"
    );
}

// ---------------------------------------------------------------------------------------
// 6. Worker processes killed mid-run, inside their jobs' transactions: every job done, its
//    effect exactly once.
// ---------------------------------------------------------------------------------------

/// A `test-worker` process, its standard output and error collected.
struct Proc {
    child: Child,
    pid: u32,
    stdout: Arc<Mutex<Vec<String>>>,
}

const WORKER_BIN: &str = env!("CARGO_BIN_EXE_test-worker");

impl Proc {
    fn worker(url: &str) -> Proc {
        let mut child = Command::new(WORKER_BIN)
            .args(["--database-url", url, "--concurrency", "8"])
            .args(["--poll-min-ms", "20", "--poll-max-ms", "200"])
            .args(["--maintenance-ms", "250"])
            .env("RUST_LOG", "warn")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {WORKER_BIN}: {e}"));
        let pid = child.id().expect("a running child has a pid");
        let stdout = Arc::new(Mutex::new(Vec::new()));
        let lines = stdout.clone();
        let out = child.stdout.take().expect("piped");
        tokio::spawn(async move {
            let mut reader = BufReader::new(out).lines();
            while let Ok(Some(line)) = reader.next_line().await {
                lines.lock().unwrap().push(line);
            }
        });
        Proc { child, pid, stdout }
    }

    async fn kill(&mut self) {
        self.child.start_kill().expect("send SIGKILL");
        self.child.wait().await.expect("wait for the killed worker");
    }

    /// SIGTERM; waits for the exit and returns the counters the worker printed.
    async fn terminate(&mut self) -> Value {
        let status = std::process::Command::new("kill")
            .args(["-TERM", &self.pid.to_string()])
            .status()
            .expect("run kill");
        assert!(status.success());
        let exit = tokio::time::timeout(WAIT, self.child.wait())
            .await
            .expect("the worker exits")
            .expect("wait for the worker");
        assert!(exit.success());
        wait_for("the worker's counters", WAIT, || async {
            self.stdout
                .lock()
                .unwrap()
                .iter()
                .find_map(|l| serde_json::from_str::<Value>(l).ok())
        })
        .await
    }
}

/// The single number `sql` selects.
async fn count_effects(pool: &MySqlPool, sql: &str) -> i64 {
    sqlx::query_scalar(sql).fetch_one(pool).await.unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn workers_killed_inside_their_transactions_leave_each_effect_exactly_once() {
    let url = fresh_database("txdone_killed").await;
    let queue = migrated_queue(&url).await;
    let pool = queue.mysql_pool().unwrap().clone();
    sqlx::query(jobs::EFFECTS_TABLE)
        .execute(&pool)
        .await
        .unwrap();
    const JOBS: i64 = 240;
    let outcomes = queue
        .enqueue_many((0..JOBS).map(|i| jobs::Ledger {
            name: format!("ledger-{i}"),
            ms: 250,
        }))
        .await
        .unwrap();
    assert!(outcomes.iter().all(|o| o.is_new()));

    let mut workers: Vec<Proc> = (0..3).map(|_| Proc::worker(&url)).collect();
    // Kill two of them while several of their jobs are inside their transactions: started
    // (a `start` effect commits first), not yet committed (no `done` effect).
    for victim in &mut workers[..2] {
        let pid = victim.pid;
        let open = format!(
            "SELECT COUNT(*) FROM effects s WHERE s.phase = 'start' AND s.pid = {pid} \
             AND NOT EXISTS (SELECT 1 FROM effects d WHERE d.phase = 'done' \
               AND d.job_id = s.job_id AND d.attempt = s.attempt)"
        );
        wait_for(
            "jobs inside their transactions",
            Duration::from_secs(60),
            || async { (count_effects(&pool, &open).await >= 4).then_some(()) },
        )
        .await;
        victim.kill().await;
    }
    workers.push(Proc::worker(&url));

    wait_for("every job done", Duration::from_secs(120), || async {
        (count_status(&queue, JobStatus::Done).await == JOBS).then_some(())
    })
    .await;

    // One effect per job, written by the attempt that completed it.
    let (done, keys): (i64, i64) = sqlx::query_as(
        "SELECT COUNT(*), COUNT(DISTINCT task_key) FROM effects WHERE phase = 'done'",
    )
    .fetch_one(&pool)
    .await
    .unwrap();
    assert_eq!((done, keys), (JOBS, JOBS), "each effect exactly once");
    let mismatched = count_effects(
        &pool,
        "SELECT COUNT(*) FROM effects e JOIN job_queue j ON j.id = e.job_id \
         WHERE e.phase = 'done' AND (e.attempt <> j.attempts OR j.status <> 'done')",
    )
    .await;
    assert_eq!(mismatched, 0, "every effect is from the completing attempt");
    // The kills hit open transactions: attempts that started, wrote, and left nothing.
    let dead: Vec<u32> = vec![workers[0].pid, workers[1].pid];
    let cut_short = count_effects(
        &pool,
        &format!(
            "SELECT COUNT(*) FROM effects s WHERE s.phase = 'start' AND s.pid IN ({}, {}) \
             AND NOT EXISTS (SELECT 1 FROM effects d WHERE d.phase = 'done' \
               AND d.job_id = s.job_id AND d.attempt = s.attempt)",
            dead[0], dead[1]
        ),
    )
    .await;
    assert!(
        cut_short >= 2,
        "the kills interrupted {cut_short} transactions"
    );
    let retried = count_effects(&pool, "SELECT COUNT(*) FROM job_queue WHERE attempts > 1").await;
    assert!(
        retried >= cut_short,
        "{retried} jobs ran again, {cut_short} were cut short"
    );
    println!(
        "killed 2 of 3 workers mid-run: {cut_short} attempts died inside their transactions, \
         {retried} jobs ran again, {JOBS} jobs done with {done} effects"
    );

    let mut succeeded = 0;
    for w in workers.iter_mut().skip(2) {
        let m = w.terminate().await;
        assert_eq!(m["lease_lost"], 0, "{m}");
        succeeded += m["succeeded"].as_i64().unwrap();
    }
    assert!(succeeded <= JOBS);
}

// ---------------------------------------------------------------------------------------
// 7. What the worker still writes after a completion in the job's transaction: the job's
//    output, and its last progress value.
// ---------------------------------------------------------------------------------------

/// Completes itself with its effect, commits, and returns a value (`len` bytes of it, with
/// a `len` over the output limit).
#[job(queue = "tx_output", key = "txout:{n}")]
async fn returns_after_commit(
    ctx: JobContext,
    pool: Data<Effects>,
    n: u32,
    len: usize,
) -> Result<String, JobError> {
    let mut tx = pool.begin().await?;
    tx.complete(&ctx).await?;
    tx.effect(&ctx, "transfer").await?;
    tx.commit().await?;
    Ok(format!("receipt {n} {}", "x".repeat(len)))
}

async fn the_output_of_a_job_that_completed_itself_is_stored(backend: Backend) {
    let (queue, effects) = fresh_queue_with_effects_on(backend, "txdone_output").await;
    let id = queue
        .enqueue(ReturnsAfterCommit { n: 1, len: 0 })
        .await
        .unwrap()
        .id();
    let big = queue
        .enqueue(ReturnsAfterCommit { n: 2, len: 70_000 })
        .await
        .unwrap()
        .id();
    let (handle, task) = start(worker(&queue, "tx_output", &effects));
    wait_status(&queue, id, JobStatus::Done, WAIT).await;
    let done = wait_status(&queue, big, JobStatus::Done, WAIT).await;
    // The worker stores the output once it has seen the commit, then counts the success.
    wait_for("both successes to be counted", WAIT, || async {
        (handle.metrics().succeeded == 2).then_some(())
    })
    .await;
    stop(&handle, task).await;
    assert_eq!(
        queue.output::<ReturnsAfterCommit>(id).await.unwrap(),
        Some("receipt 1 ".to_owned())
    );
    // Over the limit: the completion committed, so the job is done, with its one effect,
    // but its output is not stored.
    assert_eq!(done.attempts, 1);
    let stored = tests::sql_text(
        &queue,
        "SELECT output FROM job_queue WHERE id = ?",
        &[tests::Arg::Int(big as i64)],
    )
    .await;
    assert_eq!(stored, None, "an output over the limit is not stored");
    assert_eq!(
        effects_of(&effects, "txout:2").await,
        [(1, "transfer".to_owned())]
    );
    let m = handle.metrics();
    assert_eq!((m.succeeded, m.retried, m.failed), (2, 0, 0), "{m:?}");
}

/// Reports progress 1, waits for the test's go (once the test has seen 1 in the row), then
/// reports 2 and completes itself.
#[job(queue = "tx_progress", key = "txprogress:{n}")]
async fn progress_then_commit(
    ctx: JobContext,
    pool: Data<Effects>,
    n: u32,
) -> Result<(), JobError> {
    let gate = gate_of(n);
    ctx.set_progress(&1)?;
    gate.inside.send((ctx.id(), ctx.attempt()));
    gate.go.notified().await;
    ctx.set_progress(&2)?;
    let mut tx = pool.begin().await?;
    tx.complete(&ctx).await?;
    tx.effect(&ctx, "transfer").await?;
    tx.commit().await?;
    Ok(())
}

async fn the_last_progress_of_a_job_that_completed_itself_is_stored(backend: Backend) {
    let (queue, effects) = fresh_queue_with_effects_on(backend, "txdone_progress").await;
    let n = n_on(backend, 3);
    let gate = gate_of(n);
    let mut inside = gate.inside.open();
    let id = queue.enqueue(ProgressThenCommit { n }).await.unwrap().id();
    // Only the first value is written while the job runs: the next waits for the interval,
    // so it is written when the attempt ends.
    let w = quick_worker(&queue)
        .queues(["tx_progress"])
        .concurrency(1)
        .progress_interval(Duration::from_secs(3600))
        .data(effects.clone())
        .build()
        .expect("build the worker");
    let (handle, task) = start(w);
    receive(&mut inside, "the job's first progress", WAIT).await;
    wait_for("the first progress value in the row", WAIT, || async {
        (row(&queue, id).await.progress == Some(serde_json::json!(1))).then_some(())
    })
    .await;
    gate.go.notify_one();
    wait_status(&queue, id, JobStatus::Done, WAIT).await;
    // The worker writes the last value before it reports the outcome it counts.
    wait_for("the success to be counted", WAIT, || async {
        (handle.metrics().succeeded == 1).then_some(())
    })
    .await;
    stop(&handle, task).await;
    let done = row(&queue, id).await;
    assert_eq!(done.progress, Some(serde_json::json!(2)));
    assert_eq!(done.status, JobStatus::Done);
}

// ---------------------------------------------------------------------------------------
// 8. A limited job's completion in its transaction locks its row and its one slot row:
//    other keys' jobs are claimed while it is open, and its key's next job runs after.
// ---------------------------------------------------------------------------------------

/// A job of a key with one slot. `hold`: completes itself in a REPEATABLE READ transaction
/// and keeps it open until the test's go (gate 4).
#[job(
    queue = "tx_limited",
    concurrency = 1,
    concurrency_key = "account:{account}"
)]
async fn limited_in_tx(
    ctx: JobContext,
    pool: Data<Effects>,
    account: u32,
    hold: u32,
) -> Result<(), JobError> {
    // REPEATABLE READ, the level that would lock most: on MySQL set for the next transaction
    // of the connection, on PostgreSQL as the transaction's first statement.
    let mut mysql_conn = None;
    let mut tx = match &*pool {
        Effects::MySql(pool) => {
            let conn = mysql_conn.insert(pool.acquire().await?);
            sqlx::query("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
                .execute(&mut **conn)
                .await?;
            EffectsTx::MySql(sqlx::Connection::begin(&mut **conn).await?)
        }
        Effects::Postgres(pool) => {
            let mut tx = pool.begin().await?;
            sqlx::query("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
                .execute(&mut *tx)
                .await?;
            EffectsTx::Postgres(tx)
        }
    };
    tx.complete(&ctx).await?;
    tx.effect(&ctx, "transfer").await?;
    if hold > 0 {
        let gate = gate_of(hold);
        gate.inside.send((ctx.id(), ctx.attempt()));
        gate.go.notified().await;
    }
    tx.commit().await?;
    let _ = account;
    Ok(())
}

async fn a_limited_job_completing_in_its_transaction_holds_up_no_other_key(backend: Backend) {
    let (queue, effects) = fresh_queue_with_effects_on(backend, "txdone_limited").await;
    let n = n_on(backend, 4);
    let gate = gate_of(n);
    let mut inside = gate.inside.open();
    let held = queue
        .enqueue(LimitedInTx {
            account: 0,
            hold: n,
        })
        .await
        .unwrap()
        .id();
    // No maintenance pass: the key's next job is woken by the worker that saw the commit.
    let limited_worker = || {
        quick_worker(&queue)
            .queues(["tx_limited"])
            .concurrency(1)
            .maintenance_interval(Duration::from_secs(3600))
            .data(effects.clone())
            .build()
            .expect("build the worker")
    };
    let (first, first_task) = start(limited_worker());
    receive(&mut inside, "the limited job inside its transaction", WAIT).await;

    // Its key's next job, and a job of another key, for a second worker.
    let next = queue
        .enqueue(LimitedInTx {
            account: 0,
            hold: 0,
        })
        .await
        .unwrap()
        .id();
    let other = queue
        .enqueue(LimitedInTx {
            account: 1,
            hold: 0,
        })
        .await
        .unwrap()
        .id();
    let (second, second_task) = start(limited_worker());
    // The other key's job is claimed and done while the transaction is open: the claim
    // waits for no lock of it (held, it would wait for the server's lock timeout, 50 s by
    // default, or fail).
    let done = wait_status(&queue, other, JobStatus::Done, Duration::from_secs(10)).await;
    assert_eq!(done.attempts, 1);
    assert_eq!(row(&queue, held).await.status, JobStatus::Running);
    assert_eq!(
        row(&queue, next).await.attempts,
        0,
        "its key's slot is held"
    );

    gate.go.notify_one();
    wait_status(&queue, held, JobStatus::Done, WAIT).await;
    let next_done = wait_status(&queue, next, JobStatus::Done, WAIT).await;
    assert_eq!(next_done.attempts, 1);
    stop(&second, second_task).await;
    stop(&first, first_task).await;
    // Every slot is free, and each job's effect happened once.
    let held_slots = sql_i64(
        &queue,
        "SELECT COUNT(*) FROM job_queue_slot WHERE job_id IS NOT NULL",
        &[],
    )
    .await;
    assert_eq!(held_slots, 0);
    let effects_total = sql_i64(&queue, "SELECT COUNT(*) FROM effects", &[]).await;
    assert_eq!(effects_total, 3);
}

// ---------------------------------------------------------------------------------------
// A run dropped after its own commit
// ---------------------------------------------------------------------------------------

/// Per backend (the job's `n` / 10, see [`n_on`]).
static COMMITTED_THEN_STALLED: [Mailbox<u32>; 2] = [Mailbox::new(), Mailbox::new()];
static COMMIT_GO: [Notify; 2] = [Notify::const_new(), Notify::const_new()];

/// Job 1 waits for the test, completes itself and commits, then stalls without watching its
/// context; job 2 (same key, limit 1) just returns. The lease leaves a renewal round a second
/// of slack, so that job 1 keeps it until its commit on a busy machine.
#[job(
    name = "tx_commit_then_stall",
    lease = "3s",
    concurrency = 1,
    concurrency_key = "commit-then-stall"
)]
async fn commit_then_stall(ctx: JobContext, pool: Data<Effects>, n: u32) -> Result<u32, JobError> {
    let b = (n / 10) as usize;
    if n % 10 == 1 {
        COMMITTED_THEN_STALLED[b].send(0);
        COMMIT_GO[b].notified().await;
        let mut tx = pool.begin().await?;
        tx.complete(&ctx).await?;
        tx.commit().await?;
        COMMITTED_THEN_STALLED[b].send(1);
        // Its row is done, so its lease is no longer renewed: the worker stops it at three
        // quarters of the lease, after its completion committed.
        tokio::time::sleep(Duration::from_secs(60)).await;
    }
    Ok(n)
}

/// A job whose own transaction committed its completion is dropped afterwards, as one whose
/// lease can no longer be renewed. It is done, and the worker must still count it done and
/// wake the key's next job, which its transaction left blocked; here no maintenance runs,
/// so nothing else would.
async fn a_job_dropped_after_its_own_commit_is_counted_and_wakes_its_key(backend: Backend) {
    let (queue, effects) = fresh_queue_with_effects_on(backend, "tx_commit_stall").await;
    let b = (n_on(backend, 0) / 10) as usize;
    let mut said = COMMITTED_THEN_STALLED[b].open();
    let first = queue
        .enqueue(CommitThenStall {
            n: n_on(backend, 1),
        })
        .await
        .unwrap()
        .id();
    let (handle, task) = start(
        quick_worker(&queue)
            .data(effects.clone())
            .maintenance(false)
            .concurrency(2)
            .build()
            .unwrap(),
    );
    receive(&mut said, "job 1 to start", WAIT).await;
    let second = queue
        .enqueue(CommitThenStall {
            n: n_on(backend, 2),
        })
        .await
        .unwrap()
        .id();
    wait_status(&queue, second, JobStatus::Blocked, WAIT).await;
    COMMIT_GO[b].notify_one();
    assert_eq!(receive(&mut said, "job 1 to commit", WAIT).await, 1);

    let r = wait_status(&queue, second, JobStatus::Done, WAIT).await;
    assert_eq!(r.attempts, 1);
    assert_eq!(row(&queue, first).await.status, JobStatus::Done);
    wait_for("both successes to be counted", WAIT, || async {
        (handle.metrics().succeeded == 2).then_some(())
    })
    .await;
    stop(&handle, task).await;
}

// ---------------------------------------------------------------------------------------
// A late call under MariaDB's snapshot isolation
// ---------------------------------------------------------------------------------------

static SNAPSHOT: Mailbox<String> = Mailbox::new();

/// Reads in its transaction (taking its snapshot), waits until its lease has been renewed,
/// then calls `complete_in` last, on a session with `innodb_snapshot_isolation` on.
#[job(name = "tx_snapshot_late", lease = "3s")]
async fn snapshot_late(ctx: JobContext, pool: Data<Effects>) -> Result<(), JobError> {
    // MariaDB's setting: the test runs on MySQL/MariaDB only.
    let Effects::MySql(pool) = &*pool else {
        return Err(JobError::permanent("a MySQL/MariaDB test"));
    };
    let mut conn = pool.acquire().await?;
    if let Err(e) = sqlx::query("SET SESSION innodb_snapshot_isolation = ON")
        .execute(&mut *conn)
        .await
    {
        SNAPSHOT.send(format!("unsupported: {e}"));
        return Ok(());
    }
    sqlx::query("SET SESSION TRANSACTION ISOLATION LEVEL REPEATABLE READ")
        .execute(&mut *conn)
        .await?;
    let mut tx = sqlx::Connection::begin(&mut *conn).await?;
    let lease = "SELECT lease_until FROM job_queue WHERE id = ?";
    let before: sqlx::types::chrono::NaiveDateTime = sqlx::query_scalar(lease)
        .bind(ctx.id())
        .fetch_one(&mut *tx)
        .await?;
    // A renewal comes a quarter of the way through the lease: wait for it (outside `tx`).
    loop {
        let now: sqlx::types::chrono::NaiveDateTime = sqlx::query_scalar(lease)
            .bind(ctx.id())
            .fetch_one(pool)
            .await?;
        if now != before {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let said = match ctx.complete_in(&mut tx).await {
        Ok(()) => "ok".to_owned(),
        Err(e) => e.to_string(),
    };
    SNAPSHOT.send(said);
    Err(JobError::permanent("the test is over"))
}

/// The call fails, every time, and says why and what to do instead of passing on the
/// server's "record has changed since last read".
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_late_completion_under_snapshot_isolation_says_what_to_do() {
    let (queue, effects) = fresh_queue_with_effects_on(Backend::MySql, "tx_snapshot").await;
    let mut said = SNAPSHOT.open();
    let id = queue.enqueue(SnapshotLate {}).await.unwrap().id();
    let (handle, task) = start(quick_worker(&queue).data(effects.clone()).build().unwrap());
    let message = receive(&mut said, "the job's call", WAIT).await;
    if message.starts_with("unsupported") {
        // MySQL, or a MariaDB before 10.6.18/10.11.8: no such variable, nothing to check.
        eprintln!("skipped: {message}");
    } else {
        assert!(message.contains("innodb_snapshot_isolation"), "{message}");
        assert!(message.contains("Call `complete_in` first"), "{message}");
    }
    wait_status(&queue, id, JobStatus::Failed, WAIT).await;
    stop(&handle, task).await;
}

on_every_backend!(
    the_effect_and_done_commit_together,
    a_stale_attempt_gets_an_error_and_commits_nothing,
    a_cancel_requested_before_the_completion_commits_nothing,
    a_rollback_after_complete_in_retries_the_job,
    an_error_after_the_commit_leaves_the_job_done,
    the_output_of_a_job_that_completed_itself_is_stored,
    the_last_progress_of_a_job_that_completed_itself_is_stored,
    a_limited_job_completing_in_its_transaction_holds_up_no_other_key,
    a_job_dropped_after_its_own_commit_is_counted_and_wakes_its_key,
);
