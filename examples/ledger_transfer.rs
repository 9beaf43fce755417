//! Exactly-once database effects: each transfer job moves money between two accounts and
//! completes itself in the same transaction (`JobContext::complete_in`), so the transfer
//! and the job's `done` commit together or not at all. One transfer loses its transaction
//! on its first attempt (as if the connection broke before the commit) and is retried; one
//! is refused for lack of funds and fails with nothing written. The books balance at the
//! end, and each done transfer has exactly one ledger entry.
//!
//! Run it with `cargo run -p examples --example ledger_transfer` (with `DATABASE_URL` unset
//! it starts a throwaway MariaDB/MySQL server from the binaries on PATH).

use jobqueue::{job, Data, JobContext, JobError, Queue, Worker};
use sqlx::MySqlPool;

/// Moves `cents` from account `from` to account `to`, once.
#[job(
    queue = "ledger",
    key = "transfer:{transfer_id}",
    backoff = "constant(200ms)"
)]
async fn transfer(
    ctx: JobContext,
    db: Data<MySqlPool>,
    transfer_id: u64,
    from: u64,
    to: u64,
    cents: i64,
) -> Result<(), JobError> {
    let mut tx = db.begin().await?;
    // First: an attempt that no longer holds the job stops here, before any work, and from
    // here on no other worker can take the job until this transaction ends.
    ctx.complete_in(&mut tx).await?;
    // Both accounts locked in id order, so that two transfers between the same accounts in
    // opposite directions wait for each other instead of deadlocking.
    sqlx::query("SELECT id FROM accounts WHERE id IN (?, ?) ORDER BY id FOR UPDATE")
        .bind(from)
        .bind(to)
        .fetch_all(&mut *tx)
        .await?;
    let debited = sqlx::query(
        "UPDATE accounts SET balance_cents = balance_cents - ? WHERE id = ? AND balance_cents >= ?",
    )
    .bind(cents)
    .bind(from)
    .bind(cents)
    .execute(&mut *tx)
    .await?;
    if debited.rows_affected() != 1 {
        // Returning drops `tx`: the completion is rolled back with everything else.
        return Err(JobError::permanent(format!(
            "account {from} cannot pay {cents} cents"
        )));
    }
    sqlx::query("UPDATE accounts SET balance_cents = balance_cents + ? WHERE id = ?")
        .bind(cents)
        .bind(to)
        .execute(&mut *tx)
        .await?;
    sqlx::query(
        "INSERT INTO ledger (transfer_id, from_account, to_account, cents, job_attempt) \
         VALUES (?, ?, ?, ?, ?)",
    )
    .bind(transfer_id)
    .bind(from)
    .bind(to)
    .bind(cents)
    .bind(ctx.attempt())
    .execute(&mut *tx)
    .await?;
    if transfer_id == 3 && ctx.attempt() == 1 {
        // As if the connection broke before COMMIT: the server rolls the transaction back.
        drop(tx);
        println!("transfer 3: attempt 1 lost its transaction before the commit");
        return Err("connection lost before COMMIT".into());
    }
    tx.commit().await?;
    Ok(())
}

async fn total(pool: &MySqlPool) -> anyhow::Result<i64> {
    // SUM of a BIGINT is DECIMAL: cast it back for the driver.
    Ok(
        sqlx::query_scalar("SELECT CAST(SUM(balance_cents) AS SIGNED) FROM accounts")
            .fetch_one(pool)
            .await?,
    )
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    examples::init_logging("warn");
    let queue: Queue = examples::connect("ledger_transfer").await?;
    let pool = queue
        .mysql_pool()
        .expect("the examples run on MySQL or MariaDB")
        .clone();
    sqlx::query(
        "CREATE TABLE accounts (id BIGINT UNSIGNED PRIMARY KEY, balance_cents BIGINT NOT NULL)",
    )
    .execute(&pool)
    .await?;
    sqlx::query(
        "CREATE TABLE ledger (transfer_id BIGINT UNSIGNED NOT NULL, from_account BIGINT UNSIGNED NOT NULL, \
         to_account BIGINT UNSIGNED NOT NULL, cents BIGINT NOT NULL, job_attempt INT UNSIGNED NOT NULL)",
    )
    .execute(&pool)
    .await?;
    sqlx::query("INSERT INTO accounts VALUES (1, 10000), (2, 10000), (3, 10000)")
        .execute(&pool)
        .await?;
    let before = total(&pool).await?;

    // Twenty transfers around the three accounts, and one that account 3 cannot pay.
    let mut transfers: Vec<Transfer> = (1..=20)
        .map(|transfer_id| Transfer {
            transfer_id,
            from: transfer_id % 3 + 1,
            to: (transfer_id + 1) % 3 + 1,
            cents: 250,
        })
        .collect();
    transfers.push(Transfer {
        transfer_id: 21,
        from: 3,
        to: 1,
        cents: 1_000_000,
    });
    let ids: Vec<u64> = queue
        .enqueue_many(transfers)
        .await?
        .into_iter()
        .map(|e| e.id())
        .collect();
    println!("enqueued {} transfers", ids.len());

    let worker = Worker::builder(queue.clone())
        .queues(["ledger"])
        .concurrency(4)
        .data(pool.clone())
        .build()?;
    let handle = worker.handle();
    let running = tokio::spawn(worker.run());
    let mut done = 0;
    for id in &ids {
        let job = examples::wait_until_finished(&queue, *id).await?;
        if job.status == jobqueue::JobStatus::Done {
            done += 1;
        } else {
            println!(
                "job {id} {}: {}",
                job.status,
                job.last_error.unwrap_or_default()
            );
        }
    }
    handle.shutdown();
    running.await??;

    let entries: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM ledger")
        .fetch_one(&pool)
        .await?;
    let distinct: i64 = sqlx::query_scalar("SELECT COUNT(DISTINCT transfer_id) FROM ledger")
        .fetch_one(&pool)
        .await?;
    let (retried_at,): (u32,) =
        sqlx::query_as("SELECT job_attempt FROM ledger WHERE transfer_id = 3")
            .fetch_one(&pool)
            .await?;
    println!("transfer 3: its ledger entry was written by attempt {retried_at}");
    println!("ledger: {entries} entries for {distinct} transfers, {done} jobs done");
    println!(
        "total balance {before} before and {} after",
        total(&pool).await?
    );
    let m = handle.metrics();
    println!(
        "worker: succeeded {}, retried {}, failed {}, leases lost {}",
        m.succeeded, m.retried, m.failed, m.lease_lost
    );
    Ok(())
}
