//! Quickstart: define three job kinds, enqueue a batch (a duplicate among them), and watch one
//! worker run them: some fail once and are retried, one runs longer than its lease and keeps
//! it by renewal. Ends with a summary of the table and the worker's counters.
//!
//! Run it with `scripts/quickstart` (or `cargo run -p examples --example quickstart`). With
//! `DATABASE_URL` unset it starts a throwaway MariaDB/MySQL server from the binaries on PATH,
//! as the tests do (a PostgreSQL one with `scripts/quickstart --postgres`); set
//! `DATABASE_URL=mysql://user:pass@host/db` or `postgres://user:pass@host/db` to use your own.

use std::time::{Duration, Instant};

use jobqueue::{job, EnqueueOptions, Enqueued, JobContext, JobError, JobStatus, Queue, Worker};

/// Sends a welcome e-mail. Equal arguments make equal task keys: enqueued twice, it runs once.
#[job(queue = "emails", max_attempts = 3)]
async fn send_welcome_email(
    ctx: JobContext,
    user_id: u64,
    address: String,
) -> Result<(), JobError> {
    println!(
        "  [email]  job {:>3}  to {address} (user {user_id})",
        ctx.id()
    );
    Ok(())
}

/// Exports an order. Every third export fails on its first attempt, like a flaky storage
/// service would, and succeeds when retried a second later.
#[job(
    queue = "exports",
    max_attempts = 5,
    key = "export:{order_id}",
    backoff = "constant(1s)"
)]
async fn export_order(ctx: JobContext, order_id: u64, format: String) -> Result<(), JobError> {
    if order_id % 3 == 0 && ctx.attempt() == 1 {
        println!(
            "  [export] job {:>3}  order {order_id}: storage timeout (attempt 1, will retry)",
            ctx.id()
        );
        return Err("storage service timed out".into());
    }
    println!(
        "  [export] job {:>3}  order {order_id} as {format} (attempt {})",
        ctx.id(),
        ctx.attempt()
    );
    Ok(())
}

/// Builds a report for several seconds: longer than its 2 s lease, which the worker renews
/// while it runs. Stops early if asked to.
#[job(queue = "reports", lease = "2s", max_attempts = 2)]
async fn build_report(ctx: JobContext, name: String, seconds: u64) -> Result<(), JobError> {
    println!(
        "  [report] job {:>3}  {name}: started, {seconds}s of work",
        ctx.id()
    );
    for step in 1..=seconds {
        tokio::select! {
            _ = ctx.cancelled() => return Err(format!("stopped at step {step}: {:?}", ctx.cancel_reason()).into()),
            _ = tokio::time::sleep(Duration::from_secs(1)) => {}
        }
        println!("  [report] job {:>3}  {name}: {step}/{seconds}", ctx.id());
    }
    Ok(())
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    // Logs go to stderr; RUST_LOG overrides the default level.
    examples::init_logging("warn,jobqueue_runtime=info");

    // `DATABASE_URL`, or a database on a throwaway server; then `Queue::connect` and `migrate`.
    let queue: Queue = examples::connect("quickstart").await?;
    let info = queue.server_info();
    println!(
        "connected to {} (isolation {})\n",
        info.version, info.isolation
    );

    // Enqueue: one at a time, many at once, and one duplicate.
    for user_id in 1..=5 {
        let address = format!("user{user_id}@example.com");
        let _ = queue.enqueue(SendWelcomeEmail { user_id, address }).await?;
    }
    let again = queue
        .enqueue(SendWelcomeEmail {
            user_id: 1,
            address: "user1@example.com".into(),
        })
        .await?;
    if let Enqueued::Duplicate { id, status, .. } = again {
        println!(
            "enqueued 5 e-mails; enqueuing the first again is a duplicate of job {id} ({status:?}): it will not run twice"
        );
    }
    let exports = queue
        .enqueue_many((100..110).map(|order_id| ExportOrder {
            order_id,
            format: "csv".into(),
        }))
        .await?;
    println!("enqueued {} exports in one transaction", exports.len());
    let _ = queue
        .enqueue_with(
            BuildReport {
                name: "monthly-sales".into(),
                seconds: 5,
            },
            EnqueueOptions::default().priority(-1),
        )
        .await?;
    println!("enqueued 1 report that runs longer than its lease\n");

    let started = Instant::now();
    let worker = Worker::builder(queue.clone())
        .queues(["exports", "emails", "reports"])
        .concurrency(8)
        .build()?;
    let handle = worker.handle();
    let running = tokio::spawn(worker.run());

    // Wait until nothing is left to do; a real service would run until SIGTERM instead.
    loop {
        let counts = queue.counts(None).await?;
        let open: u64 = counts
            .iter()
            .filter(|(s, _)| {
                matches!(
                    s,
                    JobStatus::Scheduled | JobStatus::Ready | JobStatus::Running
                )
            })
            .map(|(_, n)| n)
            .sum();
        if open == 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    handle.shutdown();
    running.await??;

    println!(
        "\nall jobs finished in {:.1}s",
        started.elapsed().as_secs_f64()
    );
    println!("\n  status     jobs");
    for (status, n) in queue.counts(None).await? {
        println!("  {:<9} {n:>5}", status.as_str());
    }
    let m = handle.metrics();
    println!(
        "\n  claimed {}, succeeded {}, retried {}, failed {}, leases lost {}, reclaimed {}",
        m.claimed, m.succeeded, m.retried, m.failed, m.lease_lost, m.reclaimed
    );
    let q = queue.metrics();
    println!(
        "  enqueued {}, duplicates refused {}",
        q.enqueued, q.duplicates
    );
    Ok(())
}
