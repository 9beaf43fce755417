//! A job that runs several times longer than its lease: the worker renews the lease while the
//! job works (no other worker takes it, nothing is re-run), the job reports progress through
//! `tracing`, and it stops promptly when its context is cancelled.
//!
//! Two runs: first the job runs to the end (6 s with a 2 s lease); then a second job is
//! interrupted by a worker shutdown, notices the cancellation within a step, and is handed
//! back to `ready` with its attempt kept, for another worker to finish.
//!
//! Run it with `cargo run -p examples --example long_job` (a throwaway server is started when
//! `DATABASE_URL` is unset).

use std::time::Duration;

use jobqueue::{job, JobContext, JobError, JobStatus, Worker};

/// Transcodes a video in `steps` half-second steps, checking for cancellation between them.
#[job(queue = "media", lease = "2s", max_attempts = 3)]
async fn transcode(ctx: JobContext, video: String, steps: u32) -> Result<(), JobError> {
    for step in 1..=steps {
        tokio::select! {
            _ = ctx.cancelled() => {
                let reason = ctx.cancel_reason();
                tracing::warn!(%video, step, ?reason, "transcode stopping early");
                println!("  {video}: stopping at step {step}/{steps} ({reason:?})");
                return Err(format!("stopped at step {step}").into());
            }
            _ = tokio::time::sleep(Duration::from_millis(500)) => {}
        }
        tracing::info!(%video, step, steps, "transcode progress");
        if step % 4 == 0 || step == steps {
            println!("  {video}: step {step}/{steps}");
        }
    }
    Ok(())
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    // Logs go to stderr; RUST_LOG overrides the default level.
    examples::init_logging("warn");
    let queue = examples::connect("long_job").await?;

    println!("1. a 6 s job with a 2 s lease runs to the end:");
    let id = queue
        .enqueue(Transcode {
            video: "holiday.mp4".into(),
            steps: 12,
        })
        .await?
        .id();
    let worker = Worker::builder(queue.clone()).queues(["media"]).build()?;
    let handle = worker.handle();
    let run = tokio::spawn(worker.run());
    let job = examples::wait_until_finished(&queue, id).await?;
    handle.shutdown();
    run.await??;
    let m = handle.metrics();
    println!(
        "   -> {} after {} attempt(s); leases lost {}, reclaimed {}",
        job.status, job.attempts, m.lease_lost, m.reclaimed
    );
    assert_eq!((job.status, job.attempts), (JobStatus::Done, 1));

    println!("2. a worker shuts down in the middle of a job:");
    let id = queue
        .enqueue(Transcode {
            video: "wedding.mp4".into(),
            steps: 16,
        })
        .await?
        .id();
    let worker = Worker::builder(queue.clone())
        .queues(["media"])
        .shutdown_grace(Duration::from_secs(1))
        .build()?;
    let handle = worker.handle();
    let run = tokio::spawn(worker.run());
    examples::wait_for_status(&queue, id, JobStatus::Running).await?;
    tokio::time::sleep(Duration::from_millis(1200)).await; // let it make some progress
    let stopping = std::time::Instant::now();
    handle.shutdown();
    run.await??;
    let job = queue.job(id).await?.expect("job exists");
    println!(
        "   -> worker stopped in {:.1}s; the job is {} with attempts {} (handed back: {})",
        stopping.elapsed().as_secs_f64(),
        job.status,
        job.attempts,
        handle.metrics().handed_back
    );
    assert_eq!(job.status, JobStatus::Ready);

    println!("3. another worker picks it up at once and finishes it:");
    let worker = Worker::builder(queue.clone()).queues(["media"]).build()?;
    let handle = worker.handle();
    let run = tokio::spawn(worker.run());
    let job = examples::wait_until_finished(&queue, id).await?;
    handle.shutdown();
    run.await??;
    println!("   -> {} after {} attempts", job.status, job.attempts);
    assert_eq!((job.status, job.attempts), (JobStatus::Done, 2));
    Ok(())
}
