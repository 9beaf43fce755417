//! The job kinds of the soak, and the tables their bodies write.
//!
//! Every body records one row in `soak_effect` as it starts (the job's id and attempt from
//! its `JobContext`, this process's pid, the server's clock) and sets the row's `ended_at`
//! only when its work has really finished. A body that stops early (cancelled, its lease
//! lost, its process killed or frozen) leaves `ended_at` NULL: the checks then bound the
//! body by the end its attempt has in the job's history, which is the moment the runtime
//! says it was stopped (see `checks.rs`, "Why a body's interval ends where it does").
//!
//! All kinds have a 4 s lease, so that a frozen or killed worker's jobs come back within a
//! few seconds, and a constant backoff, so that the drain at the end is short.

use std::time::Duration;

use jobqueue::{job, Data, JobContext, JobError};
use serde::{Deserialize, Serialize};
use sqlx::MySqlPool;

/// The queue of the ordinary kinds.
pub(crate) const QUEUE: &str = "soak";
/// The queue of the transfers.
pub(crate) const LEDGER_QUEUE: &str = "soak_ledger";
/// The queue of the periodic kinds.
pub(crate) const CRON_QUEUE: &str = "soak_cron";
/// Every queue a soak worker serves.
pub(crate) const QUEUES: [&str; 3] = [QUEUE, LEDGER_QUEUE, CRON_QUEUE];

/// Accounts `1..=ACCOUNTS` of the transfers.
pub(crate) const ACCOUNTS: u64 = 10;
/// Each account's balance before the first transfer.
pub(crate) const INITIAL_BALANCE: i64 = 1_000_000;

/// The tables of the soak, next to the queue's. None has a unique index on what it
/// records: a body that ran twice, or a transfer applied twice, must show, not be refused.
pub(crate) const TABLES: &[&str] = &[
    "CREATE TABLE soak_effect (
        id         BIGINT UNSIGNED NOT NULL AUTO_INCREMENT PRIMARY KEY,
        job_id     BIGINT UNSIGNED NOT NULL,
        attempt    INT UNSIGNED NOT NULL,
        kind       VARCHAR(64) NOT NULL,
        pid        INT UNSIGNED NOT NULL,
        started_at DATETIME(6) NOT NULL,
        ended_at   DATETIME(6) NULL,
        KEY soak_effect_job (job_id, attempt)
    ) ENGINE = InnoDB",
    "CREATE TABLE soak_account (
        id      BIGINT UNSIGNED NOT NULL PRIMARY KEY,
        balance BIGINT NOT NULL
    ) ENGINE = InnoDB",
    "CREATE TABLE soak_transfer (
        seq          BIGINT UNSIGNED NOT NULL AUTO_INCREMENT PRIMARY KEY,
        transfer_id  BIGINT UNSIGNED NOT NULL,
        job_id       BIGINT UNSIGNED NOT NULL,
        attempt      INT UNSIGNED NOT NULL,
        from_account BIGINT UNSIGNED NOT NULL,
        to_account   BIGINT UNSIGNED NOT NULL,
        amount       BIGINT NOT NULL,
        KEY soak_transfer_id (transfer_id)
    ) ENGINE = InnoDB",
    "CREATE TABLE soak_tick (
        seq      BIGINT UNSIGNED NOT NULL AUTO_INCREMENT PRIMARY KEY,
        kind     VARCHAR(64) NOT NULL,
        tick_key VARCHAR(255) NOT NULL,
        job_id   BIGINT UNSIGNED NOT NULL,
        attempt  INT UNSIGNED NOT NULL,
        KEY soak_tick_key (tick_key)
    ) ENGINE = InnoDB",
];

/// Records the start of this body; returns the effect row's id.
async fn begin(ctx: &JobContext, db: &MySqlPool) -> Result<u64, JobError> {
    let done = sqlx::query(
        "INSERT INTO soak_effect (job_id, attempt, kind, pid, started_at) \
         VALUES (?, ?, ?, ?, UTC_TIMESTAMP(6))",
    )
    .bind(ctx.id())
    .bind(ctx.attempt())
    .bind(ctx.kind())
    .bind(std::process::id())
    .execute(db)
    .await?;
    Ok(done.last_insert_id())
}

/// Records that the body's work has finished, on `db` (the pool, or the job's own
/// transaction).
async fn end<'e>(db: impl sqlx::MySqlExecutor<'e>, effect: u64) -> Result<(), JobError> {
    sqlx::query("UPDATE soak_effect SET ended_at = UTC_TIMESTAMP(6) WHERE id = ?")
        .bind(effect)
        .execute(db)
        .await?;
    Ok(())
}

/// The body's work: `ms` of waiting. A `stubborn` body ignores cancellation, so only the
/// runtime can stop it (by dropping it when its lease is lost); the others return at once
/// when told to stop, without recording an end, since their work did not finish.
async fn work(ctx: &JobContext, ms: u64, stubborn: bool) -> Result<(), JobError> {
    let wait = tokio::time::sleep(Duration::from_millis(ms));
    if stubborn {
        wait.await;
        return Ok(());
    }
    tokio::select! {
        _ = ctx.cancelled() => Err(JobError::retryable(format!(
            "stopped before the end of its work ({:?})",
            ctx.cancel_reason()
        ))),
        _ = wait => Ok(()),
    }
}

/// The output of [`plain`]: its argument and the attempt that produced it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Echo {
    pub(crate) n: u64,
    pub(crate) attempt: u32,
}

/// Works `ms`, then returns an output.
#[job(
    queue = "soak",
    name = "soak_plain",
    key = "plain:{n}",
    lease = "4s",
    max_attempts = 6,
    backoff = "constant(300ms)"
)]
pub(crate) async fn plain(
    ctx: JobContext,
    db: Data<MySqlPool>,
    n: u64,
    ms: u64,
    stubborn: bool,
) -> Result<Echo, JobError> {
    let effect = begin(&ctx, &db).await?;
    work(&ctx, ms, stubborn).await?;
    end(&*db, effect).await?;
    Ok(Echo {
        n,
        attempt: ctx.attempt(),
    })
}

/// Fails its first `fail_first` attempts (4 or more: it runs out of attempts), or every
/// attempt for good if `permanent`.
#[job(
    queue = "soak",
    name = "soak_flaky",
    key = "flaky:{n}",
    lease = "4s",
    max_attempts = 4,
    backoff = "constant(300ms)"
)]
pub(crate) async fn flaky(
    ctx: JobContext,
    db: Data<MySqlPool>,
    n: u64,
    fail_first: u32,
    permanent: bool,
    ms: u64,
) -> Result<(), JobError> {
    let effect = begin(&ctx, &db).await?;
    work(&ctx, ms, false).await?;
    end(&*db, effect).await?;
    if permanent {
        return Err(JobError::permanent(format!(
            "flaky {n}: refused on purpose"
        )));
    }
    if ctx.attempt() <= fail_first {
        return Err(format!("flaky {n}: attempt {} fails on purpose", ctx.attempt()).into());
    }
    Ok(())
}

/// Snoozes for 400 ms while its attempt is at most `snoozes`, then succeeds.
#[job(
    queue = "soak",
    name = "soak_snooze",
    key = "snooze:{n}",
    lease = "4s",
    max_attempts = 4,
    backoff = "constant(300ms)"
)]
pub(crate) async fn snoozer(
    ctx: JobContext,
    db: Data<MySqlPool>,
    n: u64,
    snoozes: u32,
) -> Result<(), JobError> {
    let _ = n;
    let effect = begin(&ctx, &db).await?;
    work(&ctx, 20, false).await?;
    end(&*db, effect).await?;
    if ctx.attempt() <= snoozes {
        return Err(JobError::snooze(Duration::from_millis(400)));
    }
    Ok(())
}

/// At most 2 exports of one account at once, shared with [`export_b`].
#[job(
    queue = "soak",
    name = "soak_export_a",
    key = "export_a:{n}",
    concurrency = 2,
    concurrency_key = "acct:{acct}",
    lease = "4s",
    max_attempts = 6,
    backoff = "constant(300ms)"
)]
pub(crate) async fn export_a(
    ctx: JobContext,
    db: Data<MySqlPool>,
    n: u64,
    acct: u64,
    ms: u64,
    stubborn: bool,
) -> Result<(), JobError> {
    let _ = (n, acct);
    let effect = begin(&ctx, &db).await?;
    work(&ctx, ms, stubborn).await?;
    end(&*db, effect).await
}

/// Another kind on the keys of [`export_a`], with the same limit.
#[job(
    queue = "soak",
    name = "soak_export_b",
    key = "export_b:{n}",
    concurrency = 2,
    concurrency_key = "acct:{acct}",
    lease = "4s",
    max_attempts = 6,
    backoff = "constant(300ms)"
)]
pub(crate) async fn export_b(
    ctx: JobContext,
    db: Data<MySqlPool>,
    n: u64,
    acct: u64,
    ms: u64,
    stubborn: bool,
) -> Result<(), JobError> {
    let _ = (n, acct);
    let effect = begin(&ctx, &db).await?;
    work(&ctx, ms, stubborn).await?;
    end(&*db, effect).await
}

/// At most 5 starts per 2 s of one provider, shared with [`mail_b`].
#[job(
    queue = "soak",
    name = "soak_mail_a",
    key = "mail_a:{n}",
    rate_limit = "5/2s",
    rate_key = "provider:{provider}",
    lease = "4s",
    max_attempts = 6,
    backoff = "constant(300ms)"
)]
pub(crate) async fn mail_a(
    ctx: JobContext,
    db: Data<MySqlPool>,
    n: u64,
    provider: String,
    fail_first: u32,
) -> Result<(), JobError> {
    let _ = (n, provider);
    let effect = begin(&ctx, &db).await?;
    work(&ctx, 30, false).await?;
    end(&*db, effect).await?;
    if ctx.attempt() <= fail_first {
        // A retry is a start too, and counts against the rate again.
        return Err("the provider refused it on purpose".into());
    }
    Ok(())
}

/// Another kind on the keys of [`mail_a`], with the same limit.
#[job(
    queue = "soak",
    name = "soak_mail_b",
    key = "mail_b:{n}",
    rate_limit = "5/2s",
    rate_key = "provider:{provider}",
    lease = "4s",
    max_attempts = 6,
    backoff = "constant(300ms)"
)]
pub(crate) async fn mail_b(
    ctx: JobContext,
    db: Data<MySqlPool>,
    n: u64,
    provider: String,
) -> Result<(), JobError> {
    let _ = (n, provider);
    let effect = begin(&ctx, &db).await?;
    work(&ctx, 30, false).await?;
    end(&*db, effect).await
}

/// One sync per account at a time, and a new one only once the last has ended.
#[job(
    queue = "soak",
    name = "soak_sync",
    key = "sync:{acct}",
    unique = "while_active",
    concurrency = 1,
    concurrency_key = "sync:{acct}",
    lease = "4s",
    max_attempts = 6,
    backoff = "constant(300ms)"
)]
pub(crate) async fn sync_account(
    ctx: JobContext,
    db: Data<MySqlPool>,
    acct: u64,
    ms: u64,
    stubborn: bool,
) -> Result<(), JobError> {
    let _ = acct;
    let effect = begin(&ctx, &db).await?;
    work(&ctx, ms, stubborn).await?;
    end(&*db, effect).await
}

/// At most one refresh of an item per 3 s of enqueues, whatever became of the last.
#[job(
    queue = "soak",
    name = "soak_refresh",
    key = "refresh:{item}",
    unique_for = "3s",
    lease = "4s",
    max_attempts = 6,
    backoff = "constant(300ms)"
)]
pub(crate) async fn refresh(
    ctx: JobContext,
    db: Data<MySqlPool>,
    item: u64,
    ms: u64,
) -> Result<(), JobError> {
    let _ = item;
    let effect = begin(&ctx, &db).await?;
    work(&ctx, ms, false).await?;
    end(&*db, effect).await
}

/// One report per number, ever (the default policy: the key blocks until pruned).
#[job(
    queue = "soak",
    name = "soak_report",
    key = "report:{n}",
    lease = "4s",
    max_attempts = 6,
    backoff = "constant(300ms)"
)]
pub(crate) async fn report(ctx: JobContext, db: Data<MySqlPool>, n: u64) -> Result<(), JobError> {
    let _ = n;
    let effect = begin(&ctx, &db).await?;
    work(&ctx, 50, false).await?;
    end(&*db, effect).await
}

/// Moves `amount` from one account to another and completes itself in the same
/// transaction (`complete_in` first, as the README recommends). With `lose_first`, its
/// first attempt drops the transaction before the commit, as a broken connection would.
#[job(
    queue = "soak_ledger",
    name = "soak_transfer",
    key = "transfer:{transfer_id}",
    lease = "4s",
    max_attempts = 6,
    backoff = "constant(300ms)"
)]
pub(crate) async fn transfer(
    ctx: JobContext,
    db: Data<MySqlPool>,
    transfer_id: u64,
    from: u64,
    to: u64,
    amount: i64,
    lose_first: bool,
) -> Result<(), JobError> {
    let effect = begin(&ctx, &db).await?;
    let mut tx = db.begin().await?;
    ctx.complete_in(&mut tx).await?;
    // Both accounts in id order: transfers in opposite directions wait, never deadlock.
    sqlx::query("SELECT id FROM soak_account WHERE id IN (?, ?) ORDER BY id FOR UPDATE")
        .bind(from)
        .bind(to)
        .fetch_all(&mut *tx)
        .await?;
    let debited =
        sqlx::query("UPDATE soak_account SET balance = balance - ? WHERE id = ? AND balance >= ?")
            .bind(amount)
            .bind(from)
            .bind(amount)
            .execute(&mut *tx)
            .await?;
    if debited.rows_affected() != 1 {
        return Err(JobError::permanent(format!(
            "account {from} cannot pay {amount}"
        )));
    }
    sqlx::query("UPDATE soak_account SET balance = balance + ? WHERE id = ?")
        .bind(amount)
        .bind(to)
        .execute(&mut *tx)
        .await?;
    sqlx::query(
        "INSERT INTO soak_transfer (transfer_id, job_id, attempt, from_account, to_account, amount) \
         VALUES (?, ?, ?, ?, ?, ?)",
    )
    .bind(transfer_id)
    .bind(ctx.id())
    .bind(ctx.attempt())
    .bind(from)
    .bind(to)
    .bind(amount)
    .execute(&mut *tx)
    .await?;
    end(&mut *tx, effect).await?;
    if lose_first && ctx.attempt() == 1 {
        drop(tx);
        return Err("the transaction was lost before its commit, on purpose".into());
    }
    tx.commit().await?;
    Ok(())
}

/// A tick every second; every tick is enqueued, even while the previous one waits.
#[job(
    queue = "soak_cron",
    name = "soak_tick_1s",
    cron = "* * * * * *",
    overlap = true,
    lease = "4s",
    max_attempts = 6,
    backoff = "constant(300ms)"
)]
pub(crate) async fn tick_1s(ctx: JobContext, db: Data<MySqlPool>) -> Result<(), JobError> {
    tick(&ctx, &db, 30).await
}

/// A tick every other second, holding the one slot of key `ticks` while it runs.
#[job(
    queue = "soak_cron",
    name = "soak_tick_2s",
    cron = "*/2 * * * * *",
    overlap = true,
    concurrency = 1,
    concurrency_key = "ticks",
    lease = "4s",
    max_attempts = 6,
    backoff = "constant(300ms)"
)]
pub(crate) async fn tick_2s(ctx: JobContext, db: Data<MySqlPool>) -> Result<(), JobError> {
    tick(&ctx, &db, 300).await
}

/// A tick's body: works `ms` (ignoring cancellation), then records the tick, the end of
/// its work and its completion in one transaction (`complete_in` last this time, so that
/// the recorded end comes before the completion the history keeps): the tick's row exists
/// once for a done tick, and never for any other.
async fn tick(ctx: &JobContext, db: &MySqlPool, ms: u64) -> Result<(), JobError> {
    let effect = begin(ctx, db).await?;
    work(ctx, ms, true).await?;
    let mut tx = db.begin().await?;
    sqlx::query("INSERT INTO soak_tick (kind, tick_key, job_id, attempt) VALUES (?, ?, ?, ?)")
        .bind(ctx.kind())
        .bind(ctx.task_key())
        .bind(ctx.id())
        .bind(ctx.attempt())
        .execute(&mut *tx)
        .await?;
    end(&mut *tx, effect).await?;
    ctx.complete_in(&mut tx).await?;
    tx.commit().await?;
    Ok(())
}

/// Kinds whose body records its end before its completion statement: for them the end of
/// the body is bounded by the end of its attempt in the history. A transfer completes
/// first, and ends its body in the same transaction, after it.
pub(crate) fn ends_before_completion(kind: &str) -> bool {
    kind != "soak_transfer"
}

/// The periodic kinds and the seconds between their ticks.
pub(crate) const PERIODIC: [(&str, i64); 2] = [("soak_tick_1s", 1), ("soak_tick_2s", 2)];
