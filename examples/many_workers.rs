//! Several worker processes sharing one database: run the same binary as many times as you
//! like, on one host or many, all with the same `DATABASE_URL`. Workers need no coordination
//! and no leader: each claim locks its rows with `SELECT ... FOR UPDATE SKIP LOCKED`, so two
//! processes never take the same job, and a process that dies leaves its jobs to the others
//! once their leases expire.
//!
//! This program plays both parts: it starts three worker processes (itself, with the argument
//! `worker`), enqueues 300 jobs, waits for them, and shows which process ran what. Note the
//! order: each process takes jobs in `priority, id` order at the moment of its claim, but the
//! processes run side by side, so jobs finish interleaved — SKIP LOCKED gives no global FIFO.
//!
//! Run it with `cargo run -p examples --example many_workers`. On real hosts, run
//! `many_workers worker` on each with `DATABASE_URL` set to the same primary.

use std::collections::BTreeMap;
use std::process::Stdio;
use std::time::{Duration, Instant};

use jobqueue::{job, Data, JobContext, JobError, Worker};
use sqlx::MySqlPool;

/// Resizes one image (here: records which process ran it).
#[job(queue = "images")]
async fn resize_image(ctx: JobContext, db: Data<MySqlPool>, image_id: u32) -> Result<(), JobError> {
    sqlx::query("INSERT INTO ran_by (job_id, image_id, pid) VALUES (?, ?, ?)")
        .bind(ctx.id())
        .bind(image_id)
        .bind(std::process::id())
        .execute(&*db)
        .await?;
    tokio::time::sleep(Duration::from_millis(5)).await;
    Ok(())
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    // Logs go to stderr; RUST_LOG overrides the default level.
    examples::init_logging("warn");
    if std::env::args().nth(1).as_deref() == Some("worker") {
        return run_worker().await;
    }

    let url = examples::database_url("many_workers").await?;
    let queue = jobqueue::Queue::connect(&url).await?;
    queue.migrate().await?;
    sqlx::query(
        "CREATE TABLE IF NOT EXISTS ran_by (job_id BIGINT UNSIGNED, image_id INT UNSIGNED, pid INT UNSIGNED)",
    )
    .execute(queue.mysql_pool().expect("the examples run on MySQL or MariaDB"))
    .await?;

    let mut workers = Vec::new();
    for _ in 0..3 {
        let child = tokio::process::Command::new(std::env::current_exe()?)
            .arg("worker")
            .env("DATABASE_URL", &url)
            .stdin(Stdio::null())
            .kill_on_drop(true)
            .spawn()?;
        workers.push(child);
    }
    println!(
        "started 3 worker processes: {:?}",
        workers.iter().filter_map(|c| c.id()).collect::<Vec<_>>()
    );

    let started = Instant::now();
    let jobs = queue
        .enqueue_many((1..=300).map(|image_id| ResizeImage { image_id }))
        .await?;
    println!("enqueued {} jobs", jobs.len());
    examples::wait_until_done(&queue, 300).await?;
    println!("all 300 done in {:.1}s", started.elapsed().as_secs_f64());

    let rows: Vec<(u32, i64)> = sqlx::query_as("SELECT pid, COUNT(*) FROM ran_by GROUP BY pid")
        .fetch_all(
            queue
                .mysql_pool()
                .expect("the examples run on MySQL or MariaDB"),
        )
        .await?;
    let per_pid: BTreeMap<u32, i64> = rows.into_iter().collect();
    for (pid, n) in &per_pid {
        println!("  process {pid} ran {n} jobs");
    }
    let runs: i64 = per_pid.values().sum();
    let distinct: i64 = sqlx::query_scalar("SELECT COUNT(DISTINCT job_id) FROM ran_by")
        .fetch_one(
            queue
                .mysql_pool()
                .expect("the examples run on MySQL or MariaDB"),
        )
        .await?;
    println!("{runs} runs of {distinct} distinct jobs: none ran twice");

    // Graceful stop, as a deploy would do it: SIGTERM, and each worker hands back what it holds.
    for child in &workers {
        if let Some(pid) = child.id() {
            std::process::Command::new("kill")
                .arg("-TERM")
                .arg(pid.to_string())
                .status()?;
        }
    }
    for mut child in workers {
        let status = child.wait().await?;
        println!("  worker exited: {status}");
    }
    anyhow::ensure!(
        runs == 300 && distinct == 300,
        "expected 300 runs of 300 jobs"
    );
    Ok(())
}

async fn run_worker() -> anyhow::Result<()> {
    let url = std::env::var("DATABASE_URL")?;
    let queue = jobqueue::Queue::connect(&url).await?;
    Worker::builder(queue.clone())
        .queues(["images"])
        // The pool the jobs record in: here the queue's own.
        .data(
            queue
                .mysql_pool()
                .expect("the examples run on MySQL or MariaDB")
                .clone(),
        )
        .concurrency(4)
        .build()?
        .run_until(jobqueue::shutdown_signal())
        .await?;
    Ok(())
}
