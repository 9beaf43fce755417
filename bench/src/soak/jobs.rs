//! The job kinds of the soak, and the tables their bodies write.
//!
//! Every body records one row in `soak_effect` as it starts (the job's id and attempt from
//! its `JobContext`, this process's pid, the server's clock) and sets the row's `ended_at`
//! only when its work has really finished. A body that stops early (cancelled, its lease
//! lost, its process killed or frozen) leaves `ended_at` NULL: the checks then bound the
//! body by the end its attempt has in the job's history, which is the moment the runtime
//! says it was stopped (see `checks.rs`, "Why a body's interval ends where it does").
//! A body also notes the longest stretch its work did not run (its process frozen or
//! starved: a step of its wait that overran by more than half a second), and records it
//! with its end, so that the checks count it as running only when it was.
//!
//! All kinds have a 4 s lease, so that a frozen or killed worker's jobs come back within a
//! few seconds, and a constant backoff, so that the drain at the end is short.

use std::time::{Duration, Instant};

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
        -- The longest stretch its work did not run (frozen or starved), if over 0.5 s.
        stalled_from  DATETIME(6) NULL,
        stalled_until DATETIME(6) NULL,
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

/// How long a step of a body's work waits: the finest grain at which it notices a stall.
const STEP: Duration = Duration::from_millis(50);
/// A step that overruns its wait by more than this was a stall: the process was frozen (or
/// starved of CPU) and the body did not run meanwhile.
const STALL: Duration = Duration::from_millis(500);

/// A running body: its effect row, and the longest stall of its work.
struct Body {
    effect: u64,
    /// Just after its start was recorded; stalls are measured from here.
    began: Instant,
    /// The longest stall, from and to, since `began`.
    stall: Option<(Duration, Duration)>,
}

/// Records the start of this body.
async fn begin(ctx: &JobContext, db: &MySqlPool) -> Result<Body, JobError> {
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
    Ok(Body {
        effect: done.last_insert_id(),
        began: Instant::now(),
        stall: None,
    })
}

impl Body {
    /// The body's work: `ms` of waiting, in steps of [`STEP`], noting the longest stall. A
    /// `stubborn` body ignores cancellation, so only the runtime can stop it (by dropping
    /// it when its lease is lost); the others return at once when told to stop, without
    /// recording an end, since their work did not finish.
    async fn work(&mut self, ctx: &JobContext, ms: u64, stubborn: bool) -> Result<(), JobError> {
        let deadline = Instant::now() + Duration::from_millis(ms);
        loop {
            let before = Instant::now();
            if before >= deadline {
                return Ok(());
            }
            let step = (deadline - before).min(STEP);
            if stubborn {
                tokio::time::sleep(step).await;
            } else {
                tokio::select! {
                    _ = ctx.cancelled() => return Err(JobError::retryable(format!(
                        "stopped before the end of its work ({:?})",
                        ctx.cancel_reason()
                    ))),
                    _ = tokio::time::sleep(step) => {}
                }
            }
            let after = Instant::now();
            let longest = self.stall.map_or(Duration::ZERO, |(from, to)| to - from);
            if after - before > step + STALL && after - before > longest {
                self.stall = Some((before - self.began, after - self.began));
            }
        }
    }

    /// Records that the body's work has finished, with its longest stall, on `db` (the
    /// pool, or the job's own transaction). The stall's bounds are written as offsets from
    /// the recorded start, on the server's clock, so that they compare with the other times.
    async fn end<'e>(&self, db: impl sqlx::MySqlExecutor<'e>) -> Result<(), JobError> {
        let (from, to) = self.stall.map_or((None, None), |(from, to)| {
            (Some(from.as_micros() as u64), Some(to.as_micros() as u64))
        });
        sqlx::query(
            "UPDATE soak_effect SET ended_at = UTC_TIMESTAMP(6), \
             stalled_from = started_at + INTERVAL ? MICROSECOND, \
             stalled_until = started_at + INTERVAL ? MICROSECOND WHERE id = ?",
        )
        .bind(from)
        .bind(to)
        .bind(self.effect)
        .execute(db)
        .await?;
        Ok(())
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
    let mut body = begin(&ctx, &db).await?;
    body.work(&ctx, ms, stubborn).await?;
    body.end(&*db).await?;
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
    let mut body = begin(&ctx, &db).await?;
    body.work(&ctx, ms, false).await?;
    body.end(&*db).await?;
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
    let mut body = begin(&ctx, &db).await?;
    body.work(&ctx, 20, false).await?;
    body.end(&*db).await?;
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
    let mut body = begin(&ctx, &db).await?;
    body.work(&ctx, ms, stubborn).await?;
    body.end(&*db).await
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
    let mut body = begin(&ctx, &db).await?;
    body.work(&ctx, ms, stubborn).await?;
    body.end(&*db).await
}

/// A long body (3-8 s, longer than the lease, renewed meanwhile) on the keys of
/// [`export_a`]. When a foreign session locks its row, renewals pass over it and the lease
/// is lost while the process runs on: a `stubborn` one must then be stopped by the runtime
/// (dropped), or its end would land after its claim's.
#[job(
    queue = "soak",
    name = "soak_long",
    key = "long:{n}",
    concurrency = 2,
    concurrency_key = "acct:{acct}",
    lease = "4s",
    max_attempts = 6,
    backoff = "constant(300ms)"
)]
pub(crate) async fn long(
    ctx: JobContext,
    db: Data<MySqlPool>,
    n: u64,
    acct: u64,
    ms: u64,
    stubborn: bool,
) -> Result<(), JobError> {
    let _ = (n, acct);
    let mut body = begin(&ctx, &db).await?;
    body.work(&ctx, ms, stubborn).await?;
    body.end(&*db).await
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
    let mut body = begin(&ctx, &db).await?;
    body.work(&ctx, 30, false).await?;
    body.end(&*db).await?;
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
    let mut body = begin(&ctx, &db).await?;
    body.work(&ctx, 30, false).await?;
    body.end(&*db).await
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
    let mut body = begin(&ctx, &db).await?;
    body.work(&ctx, ms, stubborn).await?;
    body.end(&*db).await
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
    let mut body = begin(&ctx, &db).await?;
    body.work(&ctx, ms, false).await?;
    body.end(&*db).await
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
    let mut body = begin(&ctx, &db).await?;
    body.work(&ctx, 50, false).await?;
    body.end(&*db).await
}

/// Moves `amount` from one account to another and completes itself in the same
/// transaction (`complete_in` first, as the exactly-once guide recommends). With `lose_first`, its
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
    let body = begin(&ctx, &db).await?;
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
    body.end(&mut *tx).await?;
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
    let mut body = begin(ctx, db).await?;
    body.work(ctx, ms, true).await?;
    let mut tx = db.begin().await?;
    sqlx::query("INSERT INTO soak_tick (kind, tick_key, job_id, attempt) VALUES (?, ?, ?, ?)")
        .bind(ctx.kind())
        .bind(ctx.task_key())
        .bind(ctx.id())
        .bind(ctx.attempt())
        .execute(&mut *tx)
        .await?;
    body.end(&mut *tx).await?;
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

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(flavor = "current_thread")]
    async fn a_stall_of_the_work_is_noted_and_short_waits_are_not() {
        let ctx = JobContext::detached(1, "k");
        let mut body = Body {
            effect: 0,
            began: Instant::now(),
            stall: None,
        };
        // Blocks the only thread for 800 ms, as a freeze would stop the whole process.
        let freeze = tokio::spawn(async {
            tokio::time::sleep(Duration::from_millis(100)).await;
            std::thread::sleep(Duration::from_millis(800));
        });
        body.work(&ctx, 300, true).await.expect("work");
        freeze.await.expect("freeze");
        let (from, to) = body.stall.expect("a stall");
        assert!(
            to - from >= Duration::from_millis(750),
            "{from:?} .. {to:?}"
        );

        let mut body = Body {
            effect: 0,
            began: Instant::now(),
            stall: None,
        };
        body.work(&ctx, 200, false).await.expect("work");
        assert_eq!(body.stall, None);
    }
}
