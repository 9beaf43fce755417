//! The job kinds of the `test-worker` process. The tests that start it (`faults.rs`,
//! `periodic_processes.rs`, `transactional_completion.rs` in `tests/tests/`) include this
//! file too, so that they enqueue the very types the worker runs. It is not a module of the
//! helpers' library, whose job kinds every test binary would register: each binary's
//! workers would schedule its periodic `tick`, and `worker_outcomes.rs`' older `effect`
//! would clash with its `effect`.
//!
//! Every run leaves rows in an `effects` table of the job's own database (see
//! [`EFFECTS_TABLE`]), written through a pool of its own: a side effect that happens twice
//! shows up as two rows, which is what the suite counts.

use std::time::Duration;

use jobqueue::{job, DatabasePool, JobContext, JobError};

/// The table the jobs write their side effects to, per database (see the `tests` library).
#[allow(unused_imports)] // used by the suite, not by the worker
pub(crate) use tests::{
    WORKER_EFFECTS_TABLE as EFFECTS_TABLE, WORKER_EFFECTS_TABLE_POSTGRES as EFFECTS_TABLE_POSTGRES,
};

/// The MySQL statement that records an effect.
const INSERT_EFFECT: &str = "INSERT INTO effects (task_key, job_id, attempt, pid, phase, at) \
                             VALUES (?, ?, ?, ?, ?, UTC_TIMESTAMP(6))";

/// [`INSERT_EFFECT`] for PostgreSQL: numbered placeholders, the queue's clock.
const INSERT_EFFECT_POSTGRES: &str =
    "INSERT INTO effects (task_key, job_id, attempt, pid, phase, at) \
     VALUES ($1, $2, $3, $4, $5, job_queue_now())";

/// The effects pool `main` gives the worker (`.data(pool)`).
fn effects_pool(ctx: &JobContext) -> Result<&DatabasePool, JobError> {
    ctx.data::<DatabasePool>()
        .ok_or_else(|| "the effects pool is not set; jobs run only in test-worker".into())
}

/// Records one row of `phase` for this attempt through `conn` (a pool or a transaction of
/// either database), with the database's clock.
macro_rules! insert_effect {
    (postgres, $conn:expr, $ctx:expr, $phase:expr) => {{
        let ctx: &JobContext = $ctx;
        sqlx::query(INSERT_EFFECT_POSTGRES)
            .bind(ctx.task_key())
            .bind(ctx.id() as i64)
            .bind(ctx.attempt() as i32)
            .bind(std::process::id() as i32)
            .bind($phase)
            .execute($conn)
            .await?;
    }};
    (mysql, $conn:expr, $ctx:expr, $phase:expr) => {{
        let ctx: &JobContext = $ctx;
        sqlx::query(INSERT_EFFECT)
            .bind(ctx.task_key())
            .bind(ctx.id())
            .bind(ctx.attempt())
            .bind(std::process::id())
            .bind($phase)
            .execute($conn)
            .await?;
    }};
}

/// Records one row of `phase` for this attempt, with the database's clock, through the
/// effects pool `main` gives the worker (`.data(pool)`).
async fn record(ctx: &JobContext, phase: &str) -> Result<(), JobError> {
    match effects_pool(ctx)? {
        DatabasePool::Postgres(pool) => {
            insert_effect!(postgres, pool, ctx, phase)
        }
        DatabasePool::MySql(pool) => insert_effect!(mysql, pool, ctx, phase),
        _ => return Err("an effects pool of an unknown database".into()),
    }
    Ok(())
}

/// Sleeps `sleep_ms` (stopping early if cancelled), fails its first `fail_first` attempts on
/// purpose, then records one `done` effect. Its task key is `name`; its lease 10 s, so that a
/// claim orphaned by a restart of the server comes back within the suite's patience.
#[job(
    name = "effect",
    key = "{name}",
    lease = "10s",
    max_attempts = 5,
    backoff = "constant(200ms)"
)]
pub(crate) async fn effect(
    ctx: JobContext,
    name: String,
    sleep_ms: u64,
    fail_first: u32,
) -> Result<(), JobError> {
    if sleep_ms > 0 {
        tokio::select! {
            _ = ctx.cancelled() => {
                return Err(format!("{name}: stopped while sleeping ({:?})", ctx.cancel_reason()).into());
            }
            _ = tokio::time::sleep(Duration::from_millis(sleep_ms)) => {}
        }
    }
    if ctx.attempt() <= fail_first {
        return Err(format!(
            "{name}: failing attempt {} of the first {fail_first} on purpose",
            ctx.attempt()
        )
        .into());
    }
    record(&ctx, "done").await
}

/// Records a `start` effect, runs for `ms` (the worker renews its 2 s lease meanwhile) or
/// until cancelled, then records a `done` effect.
#[job(
    name = "slow",
    key = "{name}",
    lease = "2s",
    max_attempts = 3,
    backoff = "constant(200ms)"
)]
pub(crate) async fn slow(ctx: JobContext, name: String, ms: u64) -> Result<(), JobError> {
    record(&ctx, "start").await?;
    tokio::select! {
        _ = ctx.cancelled() => {
            return Err(format!("{name}: stopped ({:?})", ctx.cancel_reason()).into());
        }
        _ = tokio::time::sleep(Duration::from_millis(ms)) => {}
    }
    record(&ctx, "done").await
}

/// A periodic kind: every second, one `done` effect per tick. Enqueued only by workers
/// started with `--periodic`. Every tick is enqueued (`overlap = true`) even while the
/// previous one waits for a claim, so that the suite sees each tick of its window.
#[job(
    name = "tick",
    cron = "* * * * * *",
    overlap = true,
    lease = "5s",
    max_attempts = 1
)]
pub(crate) async fn tick(ctx: JobContext) -> Result<(), JobError> {
    record(&ctx, "done").await
}

/// A poison job: records a `start` effect, then aborts the whole process, as a job that
/// runs its worker out of memory would. Its lease is 1 s, so that each crash is noticed
/// quickly.
#[job(name = "crash", key = "{name}", lease = "1s", max_attempts = 25)]
pub(crate) async fn crash(ctx: JobContext, name: String) -> Result<(), JobError> {
    let _ = name;
    record(&ctx, "start").await?;
    std::process::abort()
}

/// A job whose database effect is exactly once: records a `start` effect (in autocommit, at
/// least once, like any side effect), then, in one transaction, completes itself
/// (`complete_in`), records a `done` effect and holds the transaction open for `ms` before
/// it commits. A worker killed meanwhile dies with the transaction open: the server rolls it
/// back, and the attempt leaves no `done` effect and no completion. Its lease is 2 s, so that
/// the job of a killed worker comes back quickly.
#[job(
    name = "ledger",
    key = "{name}",
    lease = "5s",
    max_attempts = 25,
    backoff = "constant(100ms)"
)]
pub(crate) async fn ledger(ctx: JobContext, name: String, ms: u64) -> Result<(), JobError> {
    let _ = name;
    record(&ctx, "start").await?;
    match effects_pool(&ctx)? {
        DatabasePool::Postgres(pool) => {
            let mut tx = pool.begin().await?;
            ctx.complete_in(&mut tx).await?;
            insert_effect!(postgres, &mut *tx, &ctx, "done");
            tokio::time::sleep(Duration::from_millis(ms)).await;
            tx.commit().await?;
        }
        DatabasePool::MySql(pool) => {
            let mut tx = pool.begin().await?;
            ctx.complete_in(&mut tx).await?;
            insert_effect!(mysql, &mut *tx, &ctx, "done");
            tokio::time::sleep(Duration::from_millis(ms)).await;
            tx.commit().await?;
        }
        _ => return Err("an effects pool of an unknown database".into()),
    }
    Ok(())
}
