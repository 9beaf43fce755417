//! The command line: every command, flag and help text (the doc comments are the help).

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use clap::{Args, Parser, Subcommand, ValueEnum};
use jobqueue::JobStatus;

/// See, retry, cancel and prune the jobs of a jobqueue database.
///
/// Exit status: 0 on success; 1 when `migrate --check` finds pending migrations; 2 on any
/// error (bad arguments, no connection, a missing table, an unknown job).
#[derive(Debug, Parser)]
#[command(name = "jobqueue", version, max_term_width = 100)]
pub(crate) struct Cli {
    /// The database: mysql://user:password@host:port/database.
    #[arg(
        long,
        env = "DATABASE_URL",
        global = true,
        hide_env_values = true,
        value_name = "URL"
    )]
    pub(crate) database_url: Option<String>,

    /// How long to wait for the server to accept a connection.
    #[arg(long, global = true, default_value = "10s", value_name = "DURATION")]
    pub(crate) connect_timeout: Age,

    /// What to do.
    #[command(subcommand)]
    pub(crate) command: Command,
}

/// The commands.
#[derive(Debug, Subcommand)]
pub(crate) enum Command {
    /// Apply the embedded migrations (create or upgrade the job tables).
    ///
    /// With --check, only list the migrations not yet applied, and exit with status 1 if
    /// there is any (0 if the database is up to date). With --print-sql, print the SQL of
    /// every migration (and the rows that record them) for your own migration tool, without
    /// connecting to a database.
    Migrate {
        /// List pending migrations without applying them; exit 1 if any.
        #[arg(long, conflicts_with = "print_sql")]
        check: bool,
        /// Print the schema's SQL instead of applying it; needs no database.
        #[arg(long)]
        print_sql: bool,
    },

    /// Each queue's jobs by status, its backlog, its running jobs and their leases.
    Status {
        /// Only this queue.
        #[arg(long, short)]
        queue: Option<String>,
        /// Redraw every interval, like `top`, until Ctrl-C (with --json: one line per refresh).
        #[arg(long, short)]
        watch: bool,
        /// How often --watch redraws.
        #[arg(
            long,
            default_value = "2s",
            value_name = "DURATION",
            requires = "watch"
        )]
        interval: Age,
        #[command(flatten)]
        format: Format,
    },

    /// Jobs matching a filter, newest first.
    List {
        /// Only jobs with this status.
        #[arg(long, short)]
        status: Option<StatusArg>,
        /// Only jobs of this queue.
        #[arg(long, short)]
        queue: Option<String>,
        /// Only jobs of this kind.
        #[arg(long, short)]
        kind: Option<String>,
        /// Only jobs whose metadata holds KEY with VALUE, e.g. `--meta tenant=acme` (not
        /// indexed: combine it with --status, --queue or --kind on a large table).
        #[arg(long, value_name = "KEY=VALUE", value_parser = parse_meta)]
        meta: Option<(String, String)>,
        /// Every job enqueued with this task key, newest first: the one holding it, then
        /// those that gave it up when their uniqueness policy stopped blocking it.
        #[arg(long, conflicts_with_all = ["status", "queue", "kind", "meta"])]
        key: Option<String>,
        /// Show at most this many jobs.
        #[arg(long, short = 'n', default_value_t = 50)]
        limit: u32,
        #[command(flatten)]
        format: Format,
    },

    /// One job in full: payload, attempts, times, lease and last error.
    Show {
        /// The job's id.
        #[arg(required_unless_present = "key", conflicts_with = "key")]
        id: Option<u64>,
        /// Find the job by its task key instead of its id.
        #[arg(long)]
        key: Option<String>,
        #[command(flatten)]
        format: Format,
    },

    /// Put a failed (or cancelled) job back to ready, or every failed job with --failed.
    ///
    /// Attempts are never reset: a job that used all of its attempts gets one more
    /// (max_attempts becomes attempts + 1), and its last error stays until the next one.
    Retry {
        /// The job's id.
        #[arg(required_unless_present = "failed", conflicts_with = "failed")]
        id: Option<u64>,
        /// Retry every failed job (narrow it with --queue and --kind).
        #[arg(long)]
        failed: bool,
        /// With --failed: only jobs of this queue.
        #[arg(long, short, requires = "failed")]
        queue: Option<String>,
        /// With --failed: only jobs of this kind.
        #[arg(long, short, requires = "failed")]
        kind: Option<String>,
        #[command(flatten)]
        dry_run: DryRun,
    },

    /// Cancel a job: at once if it has not started, by asking its worker if it runs.
    Cancel {
        /// The job's id.
        id: u64,
        #[command(flatten)]
        dry_run: DryRun,
    },

    /// Stop workers from claiming jobs of a queue (enqueues and running jobs go on).
    Pause {
        /// The queue.
        queue: String,
        #[command(flatten)]
        dry_run: DryRun,
    },

    /// Let workers claim jobs of a paused queue again.
    Resume {
        /// The queue.
        queue: String,
        #[command(flatten)]
        dry_run: DryRun,
    },

    /// Live workers (from their heartbeats): queues, concurrency, running jobs and leases.
    Workers {
        #[command(flatten)]
        format: Format,
    },

    /// Serve the web dashboard until Ctrl-C.
    ///
    /// It listens on the loopback interface unless told otherwise; on any other address it
    /// requires a token or a user and password.
    Web {
        /// Address and port to listen on.
        #[arg(long, default_value = "127.0.0.1:8080", value_name = "ADDR:PORT")]
        listen: std::net::SocketAddr,
        /// Require this token: `Authorization: Bearer <token>`, or the password of the
        /// browser's login prompt (any user name).
        #[arg(
            long,
            env = "JOBQUEUE_WEB_TOKEN",
            hide_env_values = true,
            conflicts_with = "basic_auth"
        )]
        token: Option<String>,
        /// Require this user and password (HTTP basic authentication), as user:password.
        #[arg(
            long,
            env = "JOBQUEUE_WEB_BASIC_AUTH",
            hide_env_values = true,
            value_name = "USER:PASSWORD"
        )]
        basic_auth: Option<String>,
        /// Show no actions and refuse them: a dashboard to look at only.
        #[arg(long)]
        read_only: bool,
        /// Never show job payloads (they may hold personal data), only their size.
        #[arg(long)]
        hide_payloads: bool,
    },

    /// Delete finished jobs older than a given age (their task keys can be used again).
    Purge {
        /// Which finished jobs.
        #[arg(long, short, default_value = "done")]
        status: FinishedArg,
        /// Only jobs that finished longer ago than this, e.g. 7d, 12h, 30min.
        #[arg(long, value_name = "AGE")]
        older_than: Age,
        #[command(flatten)]
        dry_run: DryRun,
    },
}

/// `--json` of the read commands.
#[derive(Debug, Args)]
pub(crate) struct Format {
    /// Print JSON for scripts instead of tables.
    #[arg(long)]
    pub(crate) json: bool,
}

/// `--dry-run` of the commands that change jobs.
#[derive(Debug, Args)]
pub(crate) struct DryRun {
    /// Change nothing; tell how many rows the command would change.
    #[arg(long)]
    pub(crate) dry_run: bool,
}

/// A job status, as the command line spells it.
#[derive(Debug, Clone, Copy, ValueEnum)]
pub(crate) enum StatusArg {
    /// Waiting for its run time (delayed, or a retry in backoff).
    Scheduled,
    /// May be claimed now.
    Ready,
    /// Waiting for a slot of its concurrency or rate limit.
    Blocked,
    /// Claimed by a worker.
    Running,
    /// Finished successfully.
    Done,
    /// Out of attempts, or failed permanently.
    Failed,
    /// Cancelled by an operator.
    Cancelled,
}

impl From<StatusArg> for JobStatus {
    fn from(s: StatusArg) -> JobStatus {
        match s {
            StatusArg::Scheduled => JobStatus::Scheduled,
            StatusArg::Ready => JobStatus::Ready,
            StatusArg::Blocked => JobStatus::Blocked,
            StatusArg::Running => JobStatus::Running,
            StatusArg::Done => JobStatus::Done,
            StatusArg::Failed => JobStatus::Failed,
            StatusArg::Cancelled => JobStatus::Cancelled,
        }
    }
}

/// A status a job ends in: the ones `purge` deletes.
#[derive(Debug, Clone, Copy, ValueEnum)]
pub(crate) enum FinishedArg {
    /// Finished successfully.
    Done,
    /// Out of attempts, or failed permanently.
    Failed,
    /// Cancelled by an operator.
    Cancelled,
}

impl From<FinishedArg> for JobStatus {
    fn from(s: FinishedArg) -> JobStatus {
        match s {
            FinishedArg::Done => JobStatus::Done,
            FinishedArg::Failed => JobStatus::Failed,
            FinishedArg::Cancelled => JobStatus::Cancelled,
        }
    }
}

/// A duration as typed (`7d`, `12h 30m`), kept with its text so messages repeat it as given.
#[derive(Debug, Clone)]
pub(crate) struct Age {
    /// As typed, trimmed.
    text: String,
    /// As parsed.
    duration: Duration,
}

impl Age {
    /// The duration.
    pub(crate) fn duration(&self) -> Duration {
        self.duration
    }
}

impl FromStr for Age {
    type Err = String;

    fn from_str(s: &str) -> Result<Age, String> {
        let duration = humantime::parse_duration(s.trim())
            .map_err(|e| format!("{e}; write a number and a unit, e.g. 30s, 15min, 12h, 7d"))?;
        Ok(Age {
            text: s.trim().to_owned(),
            duration,
        })
    }
}

impl fmt::Display for Age {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

/// `--meta KEY=VALUE`.
fn parse_meta(arg: &str) -> Result<(String, String), String> {
    match arg.split_once('=') {
        Some((key, value)) if !key.is_empty() => Ok((key.to_owned(), value.to_owned())),
        _ => Err(format!(
            "`{arg}` is not KEY=VALUE; write e.g. `--meta tenant=acme`"
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn the_command_line_is_consistent() {
        Cli::command().debug_assert();
    }

    #[test]
    fn ages_parse_with_units() {
        assert_eq!(
            "7d".parse::<Age>().unwrap().duration(),
            Duration::from_secs(7 * 86400)
        );
        assert_eq!(
            "1h 30m".parse::<Age>().unwrap().duration(),
            Duration::from_secs(5400)
        );
        let err = "7".parse::<Age>().unwrap_err();
        assert!(err.contains("e.g. 30s"), "{err}");
    }
}
