//! The command line: every command, flag and help text (the doc comments are the help).

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use clap::{Args, Parser, Subcommand, ValueEnum};
use jobqueue::admin::JobCursor;
use jobqueue::JobStatus;

/// See, retry, cancel and prune the jobs of a jobqueue database.
///
/// Every command takes --json: scripts get one JSON object (one line for the commands that
/// change something) with stable field names, described in each command's --help. The
/// commands that change something print `command`, `dry_run`, `matched` (what it found to
/// change, or would change with --dry-run), `changed` (what it changed: 0 with --dry-run)
/// and `message` (the line a person reads), and the fields of their own.
///
/// Confirmations: `purge`, and `retry` or `cancel` over a filter rather than one job, first
/// count what they would change. On a terminal they show the count and ask (y/N); when
/// standard input is not a terminal (a script, a pipe, cron) they refuse with an error unless
/// --yes is given. --dry-run only counts, and never asks.
///
/// Exit status:
///   0  success, also when there was nothing to change (retrying a job that is not failed)
///   1  done, but not what was asked: `migrate --check` found pending migrations; a
///      confirmation was answered no; with --strict, a command changed nothing (with
///      --dry-run: would change nothing)
///   2  error: bad arguments, no connection, a missing table, an unknown job, a change
///      that needs --yes off a terminal
#[derive(Debug, Parser)]
#[command(name = "jobqueue", version, max_term_width = 100, verbatim_doc_comment)]
pub(crate) struct Cli {
    /// The database: mysql://user:password@host:port/database (also mariadb://), or
    /// postgres://user:password@host:port/database (also postgresql://).
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
    /// connecting to a database: the SQL of the database --backend names, or else of the
    /// database URL's (if one is given), or else MySQL's.
    ///
    /// --json prints one line: {"command": "migrate", "dry_run": true with --check,
    /// "database", "pending": [{"version", "description"}] (pending before the command),
    /// "matched": how many were pending, "changed": how many were applied, "message"}.
    #[command(verbatim_doc_comment)]
    Migrate {
        /// List pending migrations without applying them; exit 1 if any.
        #[arg(long, conflicts_with = "print_sql")]
        check: bool,
        /// Print the schema's SQL instead of applying it; needs no database.
        #[arg(long)]
        print_sql: bool,
        /// With --print-sql: the database to print the SQL of (default: the URL's, if
        /// given, else mysql).
        #[arg(long, requires = "print_sql", value_name = "DATABASE")]
        backend: Option<BackendArg>,
        #[command(flatten)]
        format: Format,
    },

    /// Each queue's jobs by status, its backlog, its running jobs and their leases.
    ///
    /// The queue table, one row per queue that has jobs or is paused:
    ///   QUEUE           the queue's name
    ///   STATE           active, or paused (`jobqueue pause`): workers claim none of its jobs
    ///   SCHEDULED       jobs waiting for their run time (delayed, or a retry in its backoff)
    ///   READY           jobs due now, waiting for a worker to claim them
    ///   BLOCKED         jobs waiting for a free slot of their concurrency or rate limit key
    ///   RUNNING         jobs claimed by a worker (including those whose lease expired)
    ///   DONE            jobs that succeeded, until they are purged
    ///   FAILED          jobs out of attempts or failed permanently (`jobqueue retry` them)
    ///   CANCELLED       jobs cancelled by an operator or by themselves, until purged
    ///   OLDEST READY    how long the oldest ready job has been due: how far behind the
    ///                   workers are ("-" when nothing is ready)
    ///   EXPIRED LEASES  running jobs whose lease ran out: their worker crashed, was killed
    ///                   or stalled; maintenance gives them back to ready (or fails them)
    ///   NO WORKER       scheduled jobs that wait for a worker able to run them: no worker
    ///                   that claimed them knew their kind or could read their payload
    ///                   (a rolling deploy); above zero for long, deploy a worker that can
    ///   FAILED 1H       jobs that failed in the last hour and are still failed
    ///   DONE 1M         jobs that succeeded in the last minute (throughput)
    ///
    /// Then the running jobs, oldest lease first (at most 20; `jobqueue list --status
    /// running` shows all): ID, QUEUE, KIND, OWNER (the worker holding the lease), ATTEMPT
    /// (the attempt running) and LEASE (time left, or how long ago it expired).
    ///
    /// --json prints {"database", "server_time", "queues": [{"queue", "paused", "scheduled",
    /// "ready", "blocked", "running", "done", "failed", "cancelled", "oldest_ready_secs",
    /// "expired_leases", "unrunnable" (NO WORKER), "failed_last_hour", "done_last_minute"}],
    /// "running": [{"id", "queue", "kind", "lease_owner", "lease_left_secs", "attempts"}]}
    /// (up to 1000 running jobs); with --watch, one such line per refresh.
    #[command(verbatim_doc_comment)]
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

    /// Jobs matching a filter, a page at a time.
    ///
    /// Without --status, newest first. With --status, by the job's time in that status:
    /// done, failed and cancelled jobs newest finished first; scheduled, ready and blocked
    /// jobs next to run first; running jobs soonest lease expiry first. When more jobs
    /// match, the last line gives the --cursor of the next page.
    ///
    /// --json prints {"total": how many match, "jobs": [every column of each job, times in
    /// RFC 3339 UTC], "next_cursor": the --cursor of the next page, or null on the last}.
    #[command(verbatim_doc_comment)]
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
        /// Every job enqueued with this task key (the exact key), newest first: the one
        /// holding it, then those that gave it up when their uniqueness policy stopped
        /// blocking it.
        #[arg(long, conflicts_with_all = ["status", "queue", "kind", "meta"])]
        key: Option<String>,
        /// Show at most this many jobs.
        #[arg(long, short = 'n', default_value_t = 50)]
        limit: u32,
        /// Start after the jobs of the page before: the cursor it printed, with the same
        /// filter (a cursor of another --status is refused).
        #[arg(long, value_name = "CURSOR", conflicts_with = "key")]
        cursor: Option<JobCursor>,
        #[command(flatten)]
        privacy: Privacy,
        #[command(flatten)]
        format: Format,
    },

    /// One job in full: payload, attempts, times, lease and last error.
    ///
    /// --json prints every column of the job (as `list --json` does) plus "attempt_history"
    /// (each attempt's "attempt", "started_at", "ended_at", "worker", "outcome", "error"),
    /// "output" (what the job returned, or null) and "payload_hidden" (true with
    /// --hide-payload: "payload" and "output" are then null).
    #[command(verbatim_doc_comment)]
    Show {
        /// The job's id.
        #[arg(required_unless_present = "key", conflicts_with = "key")]
        id: Option<u64>,
        /// Find the job by its task key (the exact key) instead of its id.
        #[arg(long)]
        key: Option<String>,
        #[command(flatten)]
        privacy: Privacy,
        #[command(flatten)]
        format: Format,
    },

    /// Put failed or cancelled jobs back to ready: one job, or every job of a filter.
    ///
    /// One job: its id, or --key with its exact task key. Several: a filter of --queue,
    /// --kind, --key-prefix and --status (failed or cancelled; both when not given), or
    /// --failed (every failed job). A filter counts the jobs first and asks for confirmation
    /// (--yes off a terminal); jobs in other statuses are left alone.
    ///
    /// Attempts are never reset: a job that used all of its attempts gets one more
    /// (max_attempts becomes attempts + 1), and its last error stays until the next one.
    ///
    /// --json prints one line. One job: {"command": "retry", "dry_run", "id", "queue",
    /// "kind", "status_before", "status_after", "attempts", "max_attempts" (after the retry),
    /// "matched", "changed" (0 or 1), "message"}. A filter: {"command": "retry", "dry_run",
    /// "filter": {"queue", "kind", "key_prefix", "status": [statuses]}, "matched", "changed",
    /// "message"}.
    #[command(verbatim_doc_comment)]
    Retry {
        /// The job's id.
        #[arg(conflicts_with_all = ["key", "queue", "kind", "key_prefix", "status", "failed"])]
        id: Option<u64>,
        /// The job holding this task key (the exact key).
        #[arg(long, conflicts_with_all = ["queue", "kind", "key_prefix", "status", "failed"])]
        key: Option<String>,
        /// Every failed job (the same as --status failed); narrow it with the filters.
        #[arg(long, conflicts_with = "status")]
        failed: bool,
        /// Only jobs with this status (default: failed and cancelled).
        #[arg(long, short)]
        status: Option<RetryStatusArg>,
        #[command(flatten)]
        filter: FilterArgs,
        #[command(flatten)]
        change: Change,
        #[command(flatten)]
        confirm: Confirm,
        #[command(flatten)]
        format: Format,
    },

    /// Cancel one job, or every waiting job of a filter.
    ///
    /// One job (its id, or --key with its exact task key): cancelled at once if it has not
    /// started; if it runs, its worker is asked to stop it, and it ends cancelled (or done,
    /// if it finishes first). Several: a filter of --queue, --kind, --key-prefix and --status
    /// (scheduled, ready or blocked; all three when not given) cancels the waiting jobs it
    /// matches at once; running jobs are left alone (cancel them one by one). A filter counts
    /// the jobs first and asks for confirmation (--yes off a terminal).
    ///
    /// --json prints one line. One job: {"command": "cancel", "dry_run", "id", "queue",
    /// "kind", "status_before", "status_after", "cancel_requested" (true when its worker is
    /// asked to stop it), "matched", "changed" (0 or 1), "message"}. A filter: {"command":
    /// "cancel", "dry_run", "filter": {"queue", "kind", "key_prefix", "status": [statuses]},
    /// "matched", "changed", "running_left" (running jobs of the filter, left alone),
    /// "message"}.
    #[command(verbatim_doc_comment)]
    Cancel {
        /// The job's id.
        #[arg(conflicts_with_all = ["key", "queue", "kind", "key_prefix", "status"])]
        id: Option<u64>,
        /// The job holding this task key (the exact key).
        #[arg(long, conflicts_with_all = ["queue", "kind", "key_prefix", "status"])]
        key: Option<String>,
        /// Only jobs with this status (default: scheduled, ready and blocked).
        #[arg(long, short)]
        status: Option<CancelStatusArg>,
        #[command(flatten)]
        filter: FilterArgs,
        #[command(flatten)]
        change: Change,
        #[command(flatten)]
        confirm: Confirm,
        #[command(flatten)]
        format: Format,
    },

    /// Stop workers from claiming jobs of a queue (enqueues and running jobs go on).
    ///
    /// A queue that has no job and that no worker claims from is paused too, with a
    /// warning on standard error: its name may be a typo.
    ///
    /// --json prints one line: {"command": "pause", "dry_run", "queue", "paused" (after the
    /// command), "known_queue" (false: no job and no worker has that queue), "matched",
    /// "changed" (0 if it was paused already, else 1), "message"}.
    #[command(verbatim_doc_comment)]
    Pause {
        /// The queue.
        queue: String,
        #[command(flatten)]
        change: Change,
        #[command(flatten)]
        format: Format,
    },

    /// Let workers claim jobs of a paused queue again.
    ///
    /// --json prints one line: {"command": "resume", "dry_run", "queue", "paused" (after the
    /// command), "matched", "changed" (0 if it was not paused, else 1), "message"}.
    #[command(verbatim_doc_comment)]
    Resume {
        /// The queue.
        queue: String,
        #[command(flatten)]
        change: Change,
        #[command(flatten)]
        format: Format,
    },

    /// Live workers (from their heartbeats): queues, concurrency, running jobs and leases.
    ///
    /// --json prints one line per worker: {"owner", "host", "pid", "version", "queues",
    /// "concurrency", "running", "started_at", "last_seen", "seen_secs_ago", "gone",
    /// "leases": [{"id", "kind", "lease_left_secs"}]}.
    #[command(verbatim_doc_comment)]
    Workers {
        #[command(flatten)]
        format: Format,
    },

    /// Serve the web dashboard until Ctrl-C.
    ///
    /// It listens on the loopback interface unless told otherwise; on any other address it
    /// requires a token (16 characters or more) or a user and password (a password of 12
    /// or more). It answers only requests for the host names localhost, 127.0.0.1, [::1],
    /// the address it listens on and those of --allow-host (against DNS rebinding). Every
    /// action is recorded in the audit log (the /audit page). It takes no --json: it
    /// prints only its address, on standard error.
    #[command(verbatim_doc_comment)]
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
        /// Show no field a job's producer controls (they may hold personal data): payload,
        /// output, task key (a digest instead), errors, metadata, progress, limit keys; and
        /// refuse filters on them. (`--hide-payloads`, its former name, still works.)
        #[arg(long, alias = "hide-payloads")]
        redact: bool,
        /// Also answer requests for this host name (repeatable): the name the dashboard is
        /// reached by, e.g. behind a proxy. Names other than loopback need --token or
        /// --basic-auth.
        #[arg(long = "allow-host", value_name = "NAME")]
        allow_host: Vec<String>,
        /// Trust `X-Forwarded-Proto: https` from the proxy in front (the session cookie is
        /// then marked Secure). Only behind a proxy that sets the header itself.
        #[arg(long)]
        trust_forwarded_proto: bool,
        /// Take the last address of `X-Forwarded-For` as the client's, for the login
        /// throttle and the log. Only behind a proxy that appends the header itself.
        #[arg(long)]
        trust_forwarded_for: bool,
    },

    /// Delete finished jobs older than a given age (their task keys can be used again).
    ///
    /// It counts the jobs first and asks for confirmation (--yes off a terminal).
    ///
    /// --json prints one line: {"command": "purge", "dry_run", "filter": {"queue", "kind",
    /// "status": [status]}, "older_than" (as given), "older_than_secs", "matched", "changed"
    /// (rows deleted), "message"}.
    #[command(verbatim_doc_comment)]
    Purge {
        /// Which finished jobs.
        #[arg(long, short, default_value = "done")]
        status: FinishedArg,
        /// Only jobs that finished longer ago than this, e.g. 7d, 12h, 30min.
        #[arg(long, value_name = "AGE")]
        older_than: Age,
        /// Only jobs of this queue.
        #[arg(long, short)]
        queue: Option<String>,
        /// Only jobs of this kind.
        #[arg(long, short)]
        kind: Option<String>,
        #[command(flatten)]
        change: Change,
        #[command(flatten)]
        confirm: Confirm,
        #[command(flatten)]
        format: Format,
    },
}

/// `--json` of every command.
#[derive(Debug, Args)]
pub(crate) struct Format {
    /// Print JSON for scripts instead of text (see this command's --help for its fields).
    #[arg(long)]
    pub(crate) json: bool,
}

/// `--hide-payload` of the commands that print jobs.
#[derive(Debug, Args)]
pub(crate) struct Privacy {
    /// Print neither the payload nor the output of a job (they may hold personal data).
    #[arg(long)]
    pub(crate) hide_payload: bool,
}

/// `--dry-run` and `--strict` of the commands that change jobs or queues.
#[derive(Debug, Args)]
pub(crate) struct Change {
    /// Change nothing; tell how many rows the command would change (never asks).
    #[arg(long)]
    pub(crate) dry_run: bool,
    /// Exit with status 1 when nothing changed (with --dry-run: when nothing would).
    #[arg(long)]
    pub(crate) strict: bool,
}

/// `--yes` of the commands that may change many jobs at once.
#[derive(Debug, Args)]
pub(crate) struct Confirm {
    /// Go ahead without asking (needed when standard input is not a terminal).
    #[arg(long, short)]
    pub(crate) yes: bool,
}

/// The filter of a bulk `retry` or `cancel`.
#[derive(Debug, Args)]
pub(crate) struct FilterArgs {
    /// Only jobs of this queue.
    #[arg(long, short)]
    pub(crate) queue: Option<String>,
    /// Only jobs of this kind.
    #[arg(long, short)]
    pub(crate) kind: Option<String>,
    /// Only jobs whose task key starts with PREFIX (`export:` takes `export:1`, `export:12`).
    #[arg(long, value_name = "PREFIX")]
    pub(crate) key_prefix: Option<String>,
}

impl FilterArgs {
    /// Whether any filter is given.
    pub(crate) fn is_set(&self) -> bool {
        self.queue.is_some() || self.kind.is_some() || self.key_prefix.is_some()
    }
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
    /// Ended cancelled: by an operator (before it ran, or stopped while it ran), or by the
    /// job itself.
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

/// A status `retry` takes jobs out of.
#[derive(Debug, Clone, Copy, ValueEnum)]
pub(crate) enum RetryStatusArg {
    /// Out of attempts, or failed permanently.
    Failed,
    /// Ended cancelled.
    Cancelled,
}

impl From<RetryStatusArg> for JobStatus {
    fn from(s: RetryStatusArg) -> JobStatus {
        match s {
            RetryStatusArg::Failed => JobStatus::Failed,
            RetryStatusArg::Cancelled => JobStatus::Cancelled,
        }
    }
}

/// A status a bulk `cancel` takes jobs out of: the waiting ones.
#[derive(Debug, Clone, Copy, ValueEnum)]
pub(crate) enum CancelStatusArg {
    /// Waiting for its run time.
    Scheduled,
    /// May be claimed now.
    Ready,
    /// Waiting for a slot of its concurrency or rate limit.
    Blocked,
}

impl From<CancelStatusArg> for JobStatus {
    fn from(s: CancelStatusArg) -> JobStatus {
        match s {
            CancelStatusArg::Scheduled => JobStatus::Scheduled,
            CancelStatusArg::Ready => JobStatus::Ready,
            CancelStatusArg::Blocked => JobStatus::Blocked,
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
    /// Ended cancelled: by an operator (before it ran, or stopped while it ran), or by the
    /// job itself.
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

/// A database, for `migrate --print-sql --backend`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum BackendArg {
    /// MySQL 8.0+ or MariaDB 10.6+.
    #[value(alias = "mariadb")]
    Mysql,
    /// PostgreSQL 13+.
    #[value(alias = "postgresql")]
    Postgres,
}

impl From<BackendArg> for jobqueue::Backend {
    fn from(b: BackendArg) -> jobqueue::Backend {
        match b {
            BackendArg::Mysql => jobqueue::Backend::MySql,
            BackendArg::Postgres => jobqueue::Backend::Postgres,
        }
    }
}
