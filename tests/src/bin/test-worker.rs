//! `test-worker`: the worker process the fault suite (`tests/tests/faults.rs`) starts, kills,
//! pauses and restarts. It is an ordinary jobqueue program: it connects, runs a [`Worker`]
//! over the job kinds of `test-worker/jobs.rs` until SIGTERM or Ctrl-C, and prints the
//! worker's counters as one JSON line on standard output when it stops.
//!
//! It logs to standard error as JSON, one object per line with the event's fields at the top
//! level (`level`, `message`, `job.id`, `task_key`...), so that a test can assert what it
//! logged.
//!
//! ```text
//! cargo run -p tests --bin test-worker -- --database-url mysql://root@127.0.0.1/db --concurrency 8
//! ```
//!
//! With `--enqueue-key KEY --enqueue-count N` it enqueues the `effect` job with task key
//! `KEY` N times instead, prints `{"new": .., "duplicates": .., "ids": [..]}` and exits. With
//! `--wait-for-go` it first prints `ready` and waits for a line on standard input, so that a
//! test can start several enqueuers at the same moment.
//!
//! The database must be migrated, with the `effects` table of `jobs.rs` created: the worker
//! needs only DML rights.

use std::io::BufRead as _;
use std::process::ExitCode;
use std::time::Duration;

use clap::Parser;
use jobqueue::metrics::MetricsSnapshot;
use jobqueue::{Backend, Enqueued, Queue, QueueConfig, Worker};
use sqlx::mysql::MySqlPoolOptions;
use sqlx::postgres::PgPoolOptions;

#[path = "test-worker/jobs.rs"]
mod jobs;

/// The flags of `test-worker`.
#[derive(Debug, Parser)]
#[command(
    about = "A jobqueue worker process for the fault suite",
    args_override_self = true
)]
struct Args {
    /// `mysql://user:password@host:port/database`, or a `postgres://` URL.
    #[arg(long)]
    database_url: String,
    /// Queues to serve, comma-separated, in priority order.
    #[arg(long, value_delimiter = ',', default_value = "default")]
    queues: Vec<String>,
    /// Jobs run at once.
    #[arg(long, default_value_t = 4)]
    concurrency: usize,
    /// Maintenance interval (promotion of due jobs, reclaim of expired leases).
    #[arg(long, default_value_t = 1000)]
    maintenance_ms: u64,
    /// Shortest idle poll interval.
    #[arg(long, default_value_t = 50)]
    poll_min_ms: u64,
    /// Longest idle poll interval.
    #[arg(long, default_value_t = 2000)]
    poll_max_ms: u64,
    /// How long running jobs may go on after SIGTERM before they are cancelled.
    #[arg(long, default_value_t = 10_000)]
    grace_ms: u64,
    /// Enqueue the ticks of periodic kinds (`tick`). Off by default, so that ticks appear
    /// only in the tests that ask for them.
    #[arg(long)]
    periodic: bool,
    /// Connections of the queue's pool.
    #[arg(long, default_value_t = 10)]
    max_connections: u32,
    /// How long an operation waits for a connection (both pools) before it fails and is
    /// logged: while the server is unreachable, this is how soon the worker says so.
    #[arg(long, default_value_t = 30_000)]
    acquire_timeout_ms: u64,
    /// Enqueue mode: the task key to enqueue (as an `effect` job) instead of running a worker.
    #[arg(long)]
    enqueue_key: Option<String>,
    /// Enqueue mode: how many times to enqueue it.
    #[arg(long, default_value_t = 1, requires = "enqueue_key")]
    enqueue_count: u32,
    /// Enqueue mode: print `ready` and wait for a line on standard input before enqueuing.
    #[arg(long, requires = "enqueue_key")]
    wait_for_go: bool,
}

#[tokio::main]
async fn main() -> ExitCode {
    let args = Args::parse();
    tracing_subscriber::fmt()
        .json()
        .flatten_event(true)
        .with_current_span(true)
        .with_span_list(false)
        .with_writer(std::io::stderr)
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into()),
        )
        .init();
    match run(args).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            tracing::error!(error = %e, "test-worker failed");
            ExitCode::FAILURE
        }
    }
}

async fn run(args: Args) -> anyhow::Result<()> {
    let acquire_timeout = Duration::from_millis(args.acquire_timeout_ms);
    let config = QueueConfig::default()
        .max_connections(args.max_connections)
        .acquire_timeout(acquire_timeout);
    let queue = Queue::connect_with(&args.database_url, config).await?;
    if let Some(key) = &args.enqueue_key {
        return enqueue(&queue, key, args.enqueue_count, args.wait_for_go).await;
    }

    // The jobs' effects pool, on the queue's database.
    let effects_connections = args.concurrency.min(16) as u32 + 1;
    let builder = Worker::builder(queue.clone());
    let builder = match queue.backend() {
        Backend::Postgres => builder.data(
            PgPoolOptions::new()
                .max_connections(effects_connections)
                .acquire_timeout(acquire_timeout)
                .connect(&args.database_url)
                .await?,
        ),
        _ => builder.data(
            MySqlPoolOptions::new()
                .max_connections(effects_connections)
                .acquire_timeout(acquire_timeout)
                .connect(&args.database_url)
                .await?,
        ),
    };

    let worker = builder
        .queues(args.queues)
        .concurrency(args.concurrency)
        .maintenance_interval(Duration::from_millis(args.maintenance_ms))
        .poll_interval(
            Duration::from_millis(args.poll_min_ms),
            Duration::from_millis(args.poll_max_ms),
        )
        .shutdown_grace(Duration::from_millis(args.grace_ms))
        .periodic_jobs(args.periodic)
        .build()?;
    let handle = worker.handle();
    worker.run_until(jobqueue::shutdown_signal()).await?;
    println!("{}", metrics_json(&handle.metrics()));
    Ok(())
}

/// Enqueues the `effect` job with task key `key`, `count` times, and prints the outcomes.
async fn enqueue(queue: &Queue, key: &str, count: u32, wait_for_go: bool) -> anyhow::Result<()> {
    if wait_for_go {
        println!("ready");
        // Blocking is fine: nothing else runs in this process yet.
        let mut line = String::new();
        std::io::stdin().lock().read_line(&mut line)?;
    }
    let (mut new, mut duplicates, mut ids) = (0u32, 0u32, Vec::new());
    for _ in 0..count {
        let job = jobs::Effect {
            name: key.to_owned(),
            sleep_ms: 0,
            fail_first: 0,
        };
        match queue.enqueue(job).await? {
            Enqueued::New(id) => {
                new += 1;
                ids.push(id);
            }
            Enqueued::Duplicate { id, .. } => {
                duplicates += 1;
                ids.push(id);
            }
        }
    }
    println!(
        "{}",
        serde_json::json!({ "new": new, "duplicates": duplicates, "ids": ids })
    );
    Ok(())
}

fn metrics_json(m: &MetricsSnapshot) -> serde_json::Value {
    serde_json::json!({
        "claimed": m.claimed,
        "succeeded": m.succeeded,
        "retried": m.retried,
        "failed": m.failed,
        "cancelled": m.cancelled,
        "handed_back": m.handed_back,
        "deferred": m.deferred,
        "lease_lost": m.lease_lost,
        "reclaimed": m.reclaimed,
        "promoted": m.promoted,
        "empty_idle": m.empty_idle,
        "idle_probes": m.idle_probes,
        "empty_contended": m.empty_contended,
        "empty_leased_only": m.empty_leased_only,
        "empty_paused": m.empty_paused,
        "conflict_retries": m.conflict_retries,
        "database_errors": m.database_errors,
        "enqueued": m.enqueued,
        "duplicates": m.duplicates,
    })
}
