//! `jobqueue-soak`: a mixed load on several worker processes, with faults, for a bounded
//! time; then the queue's invariants are checked from the tables and from the rows every
//! job body writes.
//!
//! ```text
//! cargo run --release -p jobqueue-bench --bin jobqueue-soak -- [--minutes 20] [--workers 3]
//! ```
//!
//! Without `--database-url` (or `DATABASE_URL`) it starts a throwaway MariaDB/MySQL server
//! with durable settings, which it also restarts once during the run. It prints what it
//! enqueued, the faults it injected, the reruns they caused and PASS or FAIL per invariant,
//! and exits with 1 if any failed. See `bench/README.md`, "Soak".

mod checks;
mod fleet;
mod jobs;
mod run;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

/// Command line of the soak.
#[derive(Parser, Debug)]
#[command(
    name = "jobqueue-soak",
    about = "Run a mixed load with faults on several worker processes, then check the queue's invariants",
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
    /// How long the load and the faults last, in minutes (fractions allowed); the drain and
    /// the checks come after (about a minute more).
    #[arg(long, default_value_t = 20.0, value_parser = parse_minutes)]
    pub(crate) minutes: f64,
    /// A server to use instead of a throwaway one (it creates a database of its own there,
    /// and drops it at the end unless `--keep`). The server is not restarted then.
    #[arg(long, env = "DATABASE_URL")]
    pub(crate) database_url: Option<String>,
    /// Worker processes.
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u16).range(2..=32))]
    pub(crate) workers: u16,
    /// Jobs each worker process runs at once.
    #[arg(long, default_value_t = 8, value_parser = clap::value_parser!(u16).range(1..=256))]
    pub(crate) concurrency: u16,
    /// Where the worker processes' logs go (one file per process started).
    #[arg(long, default_value = "target/soak")]
    pub(crate) log_dir: PathBuf,
    /// Keep the database (and a throwaway server's folder is still removed) for a look
    /// afterwards: with `--database-url` only.
    #[arg(long)]
    pub(crate) keep: bool,
}

fn parse_minutes(s: &str) -> Result<f64, String> {
    let m: f64 = s.parse().map_err(|e| format!("{e}"))?;
    if !(0.1..=24.0 * 60.0).contains(&m) {
        return Err("between 0.1 and 1440 minutes".into());
    }
    Ok(m)
}

#[derive(Subcommand, Debug)]
enum Command {
    /// One worker process; the soak starts these itself.
    #[command(hide = true)]
    Worker(fleet::WorkerArgs),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    if cli.command.is_none() {
        // Before any thread exists: the throwaway server reads its options from here.
        run::prefer_durable_server_settings();
    }
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| "warn,sqlx::query=error".into()),
        )
        .init();
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(r) => r,
        Err(e) => {
            eprintln!("cannot start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let result = match cli.command {
        Some(Command::Worker(args)) => runtime.block_on(fleet::worker_main(args)).map(|()| true),
        None => runtime.block_on(run::run(cli.run)),
    };
    match result {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::FAILURE,
        Err(e) => {
            eprintln!("jobqueue-soak: {e:#}");
            ExitCode::from(2)
        }
    }
}
