//! The worker processes: the soak re-executes itself as `jobqueue-soak worker`, one process
//! per slot, and kills, freezes, thaws and restarts them.

use std::path::PathBuf;
use std::process::Stdio;
use std::time::Duration;

use anyhow::Context as _;
use jobqueue::{Queue, QueueConfig, Worker};
use sqlx::mysql::MySqlPoolOptions;
use tokio::process::Child;

use crate::jobs::QUEUES;

/// Environment variable that passes the database URL to a worker (kept off its command line).
const URL_VAR: &str = "JOBQUEUE_SOAK_URL";

/// Arguments of a worker process.
#[derive(clap::Args, Debug)]
pub(crate) struct WorkerArgs {
    /// The slot this process fills; part of its `lease_owner`.
    #[arg(long)]
    slot: usize,
    /// Jobs run at once.
    #[arg(long)]
    concurrency: usize,
    /// Do not enqueue periodic ticks (the drain at the end).
    #[arg(long)]
    no_periodic: bool,
}

/// Entry point of `jobqueue-soak worker`: a worker over every soak queue until SIGTERM.
pub(crate) async fn worker_main(args: WorkerArgs) -> anyhow::Result<()> {
    let url = std::env::var(URL_VAR).with_context(|| format!("{URL_VAR} is not set"))?;
    let config = QueueConfig::default()
        .max_connections(6)
        .acquire_timeout(Duration::from_secs(5));
    // Restarted while the server itself restarts: wait for it rather than die.
    let mut tries = 0;
    let queue = loop {
        match Queue::connect_with(&url, config.clone()).await {
            Ok(queue) => break queue,
            Err(e) if tries < 60 => {
                tries += 1;
                tracing::warn!(error = %e, "cannot connect yet; trying again in 1 s");
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
            Err(e) => return Err(e.into()),
        }
    };
    // The bodies' own pool, as an application's would be.
    let effects = MySqlPoolOptions::new()
        .max_connections(args.concurrency as u32 + 2)
        .acquire_timeout(Duration::from_secs(5))
        .connect_lazy(&url)?;
    let worker = Worker::builder(queue)
        .queues(QUEUES)
        .concurrency(args.concurrency)
        .data(effects)
        .periodic_jobs(!args.no_periodic)
        .owner(format!("soak{}:{}", args.slot, std::process::id()))
        .shutdown_grace(Duration::from_secs(5))
        .cancel_grace(Duration::from_secs(2))
        .build()?;
    worker.run_until(jobqueue::shutdown_signal()).await?;
    Ok(())
}

/// The pid written in a `lease_owner` of a soak worker (`soak<slot>:<pid>`).
pub(crate) fn owner_pid(owner: &str) -> Option<u32> {
    owner.rsplit(':').next()?.parse().ok()
}

/// Sends `signal` (`STOP`, `CONT`, `TERM`) to process `pid`.
pub(crate) fn signal(pid: u32, signal: &str) -> anyhow::Result<()> {
    let status = std::process::Command::new("kill")
        .arg(format!("-{signal}"))
        .arg(pid.to_string())
        .status()
        .context("cannot run `kill`")?;
    anyhow::ensure!(status.success(), "kill -{signal} {pid} failed: {status}");
    Ok(())
}

/// The worker processes of the run, one per slot.
pub(crate) struct Fleet {
    url: String,
    concurrency: usize,
    log_dir: PathBuf,
    /// Whether new processes enqueue periodic ticks.
    pub(crate) periodic: bool,
    slots: Vec<Option<Child>>,
    /// Processes started so far (names the log files).
    started: usize,
    /// Processes that exited without being told to.
    pub(crate) unexpected_exits: Vec<String>,
}

impl Fleet {
    /// Starts `processes` workers.
    pub(crate) fn start(
        url: &str,
        processes: usize,
        concurrency: usize,
        log_dir: PathBuf,
    ) -> anyhow::Result<Fleet> {
        std::fs::create_dir_all(&log_dir)
            .with_context(|| format!("cannot create {}", log_dir.display()))?;
        let mut fleet = Fleet {
            url: url.to_owned(),
            concurrency,
            log_dir,
            periodic: true,
            slots: (0..processes).map(|_| None).collect(),
            started: 0,
            unexpected_exits: Vec::new(),
        };
        for slot in 0..processes {
            fleet.spawn(slot)?;
        }
        Ok(fleet)
    }

    /// How many slots there are.
    pub(crate) fn len(&self) -> usize {
        self.slots.len()
    }

    /// The pid of the process in `slot`, if one runs.
    pub(crate) fn pid(&self, slot: usize) -> Option<u32> {
        self.slots[slot].as_ref().and_then(Child::id)
    }

    /// Starts a process in `slot` (which must be empty).
    pub(crate) fn spawn(&mut self, slot: usize) -> anyhow::Result<u32> {
        let exe = std::env::current_exe().context("cannot find the soak's own binary")?;
        self.started += 1;
        let log = self
            .log_dir
            .join(format!("worker-{slot}-{}.log", self.started));
        let log = std::fs::File::create(&log)
            .with_context(|| format!("cannot create {}", log.display()))?;
        let mut cmd = tokio::process::Command::new(exe);
        cmd.arg("worker")
            .arg("--slot")
            .arg(slot.to_string())
            .arg("--concurrency")
            .arg(self.concurrency.to_string())
            .env(URL_VAR, &self.url)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .kill_on_drop(true);
        if !self.periodic {
            cmd.arg("--no-periodic");
        }
        let child = cmd.spawn().context("cannot start a worker process")?;
        let pid = child.id().context("a worker process without a pid")?;
        self.slots[slot] = Some(child);
        Ok(pid)
    }

    /// Kills the process in `slot` with SIGKILL and waits for it; returns its pid.
    pub(crate) async fn kill(&mut self, slot: usize) -> anyhow::Result<Option<u32>> {
        let Some(mut child) = self.slots[slot].take() else {
            return Ok(None);
        };
        let pid = child.id();
        child.kill().await?;
        Ok(pid)
    }

    /// Restarts every process that exited on its own, noting it.
    pub(crate) fn restart_exited(&mut self) -> anyhow::Result<()> {
        for slot in 0..self.slots.len() {
            let exited = match &mut self.slots[slot] {
                Some(child) => child.try_wait()?,
                None => continue,
            };
            if let Some(status) = exited {
                self.slots[slot] = None;
                self.unexpected_exits
                    .push(format!("worker in slot {slot} exited by itself ({status})"));
                self.spawn(slot)?;
            }
        }
        Ok(())
    }

    /// Stops every process with SIGTERM (the worker's own shutdown: running jobs finish or
    /// are handed back) and waits for them, killing any still there after `patience`.
    pub(crate) async fn stop_all(&mut self, patience: Duration) -> anyhow::Result<()> {
        for child in self.slots.iter().flatten() {
            if let Some(pid) = child.id() {
                // A frozen process would never see the TERM.
                signal(pid, "CONT")?;
                signal(pid, "TERM")?;
            }
        }
        for slot in 0..self.slots.len() {
            let Some(mut child) = self.slots[slot].take() else {
                continue;
            };
            match tokio::time::timeout(patience, child.wait()).await {
                Ok(status) => {
                    let status = status?;
                    if !status.success() {
                        self.unexpected_exits.push(format!(
                            "worker in slot {slot} ended its shutdown with {status}"
                        ));
                    }
                }
                Err(_) => {
                    self.unexpected_exits.push(format!(
                        "worker in slot {slot} did not stop within {patience:?}; killed"
                    ));
                    child.kill().await?;
                }
            }
        }
        Ok(())
    }
}
