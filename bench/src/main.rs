//! `jobqueue-bench`: throughput, latency, memory and scaling of jobqueue, each measured
//! against a hand-written SQL claim loop in the same run.
//!
//! ```text
//! cargo run --release -p jobqueue-bench -- [--quick] [--runs N] [--json-out FILE]
//! ```
//!
//! Without `DATABASE_URL` it starts a throwaway MariaDB/MySQL server with durable settings
//! (`innodb_flush_log_at_trx_commit=1`); with it, it creates databases of its own on that
//! server and drops them at the end. It prints a table and writes the same figures as JSON.
//! See `bench/README.md` for the scenarios and what each figure means.

mod baseline;
mod child;
mod dashboard;
mod env;
mod fleet;
mod jobs;
mod measure;
mod postgres;
mod report;
mod scenarios;

use std::path::PathBuf;

use clap::{Parser, Subcommand, ValueEnum};

/// Command line of the benchmark.
#[derive(Parser, Debug)]
#[command(
    name = "jobqueue-bench",
    about = "Benchmark jobqueue against a hand-written SQL claim loop, in the same run",
    args_conflicts_with_subcommands = true
)]
struct Cli {
    #[command(subcommand)]
    command: Option<Command>,
    #[command(flatten)]
    run: RunArgs,
}

#[derive(clap::Args, Debug, Clone)]
pub(crate) struct RunArgs {
    /// Fewer and smaller runs: about two minutes instead of about ten (the dashboard
    /// scenario: 100,000 finished rows instead of 1,000,000, 10 requests per page instead of 30).
    #[arg(long)]
    pub(crate) quick: bool,
    /// Runs of each scenario in each mode; the median is reported. Default 3 (1 with --quick).
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..=50))]
    pub(crate) runs: Option<u32>,
    /// Where to write the figures as JSON.
    #[arg(long, default_value = "target/bench.json")]
    pub(crate) json_out: PathBuf,
    /// Only these scenarios (comma-separated). Default: all of them.
    #[arg(long, value_enum, value_delimiter = ',')]
    pub(crate) only: Vec<Scenario>,
    /// A diagnostic of the drains: drop these secondary indexes (comma-separated) of the
    /// framework's table before draining it, to see what each costs. The framework and the
    /// hand-written loop both drain the table without them; maintenance statements that
    /// name a dropped index fail and are logged meanwhile.
    #[arg(long, value_delimiter = ',')]
    pub(crate) drop_index: Vec<String>,
}

/// The scenarios, in the order they run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum Scenario {
    /// Drain pre-enqueued no-op jobs with 1 and 4 worker processes.
    Drain,
    /// Enqueue one by one and in bulk, with and without duplicates.
    Enqueue,
    /// How long a single-row enqueue takes while workers drain a nearly empty queue, at
    /// READ COMMITTED and at REPEATABLE READ.
    Trickle,
    /// Time from enqueue to job start, in-process and from another process.
    Latency,
    /// Drain speed with a large history in the table against an empty table.
    Scale,
    /// Peak memory of a worker process, and the queries an idle worker sends.
    Resources,
    /// Time of each operator dashboard page on a large table, through its router in-process.
    Dashboard,
    /// Drain speed of jobs with a concurrency limit (every key distinct) against the same
    /// drain without limits, both through jobqueue.
    Limits,
    /// Queries per second and connections of 1, 4, 16 and 32 idle worker processes, the
    /// start latency of jobs another process enqueues meanwhile, and the connections of a
    /// draining process. Run it without `DATABASE_URL`.
    Fleet,
    /// The framework on PostgreSQL against the leanest SKIP LOCKED loop on a minimal
    /// PostgreSQL table: drains, bulk enqueue, an idle worker (`JOBQUEUE_BENCH_POSTGRES_URL`
    /// names a server; without it a throwaway one is started).
    Postgres,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// One worker process of a scenario; the benchmark starts these itself.
    #[command(hide = true)]
    Worker(child::WorkerArgs),
}

/// The ways of running the queue that the scenarios compare: every scenario the first two,
/// the drains (and the trickle) the other two too.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub(crate) enum Mode {
    /// jobqueue: `#[job]` kinds, `Queue::enqueue*`, `Worker`.
    Framework,
    /// Plain sqlx statements written by hand.
    Baseline,
    /// The baseline's claim loop on the minimal table of the pattern
    /// (`baseline::MINIMAL_TABLE`) at READ COMMITTED: the physical floor, measured in the
    /// drains only.
    Minimal,
    /// The baseline's loop at REPEATABLE READ on the framework's table, measured in the
    /// trickle only.
    #[value(name = "baseline-rr")]
    BaselineRr,
    /// The same loop on the same table at REPEATABLE READ: faster, but its claims lock the
    /// gap where new jobs go (the trickle scenario measures what that costs an enqueue).
    #[value(name = "minimal-rr")]
    MinimalRr,
    /// That loop at REPEATABLE READ claiming by key (`baseline::Table::MinimalByKey`): its
    /// locks take no gap.
    #[value(name = "minimal-rr-key")]
    MinimalRrKey,
    /// The loop claiming by key at READ COMMITTED.
    #[value(name = "minimal-key")]
    MinimalKey,
}

impl Mode {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Mode::Framework => "framework",
            Mode::Baseline => "baseline",
            Mode::Minimal => "minimal",
            Mode::BaselineRr => "baseline-rr",
            Mode::MinimalRr => "minimal-rr",
            Mode::MinimalRrKey => "minimal-rr-key",
            Mode::MinimalKey => "minimal-key",
        }
    }

    /// Whether this mode's loop runs on the minimal table.
    pub(crate) fn minimal_table(self) -> bool {
        matches!(
            self,
            Mode::Minimal | Mode::MinimalRr | Mode::MinimalRrKey | Mode::MinimalKey
        )
    }

    /// The framework and the five loops of the drains, in an order that turns from run to
    /// run.
    pub(crate) fn order6(run: u32) -> [Mode; 6] {
        let all = [
            Mode::Framework,
            Mode::Baseline,
            Mode::Minimal,
            Mode::MinimalRr,
            Mode::MinimalRrKey,
            Mode::MinimalKey,
        ];
        std::array::from_fn(|i| all[(i + run as usize) % 6])
    }

    /// Both modes, the one that goes first alternating from run to run.
    pub(crate) fn order(run: u32) -> [Mode; 2] {
        if run % 2 == 0 {
            [Mode::Framework, Mode::Baseline]
        } else {
            [Mode::Baseline, Mode::Framework]
        }
    }
}

fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_env_filter(
            // The fills' large statements would trip sqlx's slow-statement warning.
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| "warn,sqlx::query=error".into()),
        )
        .init();
    match cli.command {
        Some(Command::Worker(args)) => runtime()?.block_on(child::worker_main(args)),
        None => {
            // Before any thread exists: the throwaway server reads its options from here.
            env::prefer_durable_server_settings();
            runtime()?.block_on(scenarios::run_all(cli.run))
        }
    }
}

fn runtime() -> anyhow::Result<tokio::runtime::Runtime> {
    Ok(tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?)
}
