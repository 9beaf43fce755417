//! Worker processes: the benchmark re-executes itself as `jobqueue-bench worker ...`, so that
//! drains and cross-process latencies run in processes of their own, as in production.
//!
//! Protocol, one line each way: the child prints `ready` once connected and waits for `go`;
//! then it works and prints `progress <jobs done> <probes started>` as they change (at most
//! every 10 ms); on `stop` (or end of input) it shuts down and prints `result <json>`.

use std::process::Stdio;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context as _};
use jobqueue::{Queue, Worker};
use serde::{Deserialize, Serialize};
use tokio::io::{AsyncBufReadExt as _, AsyncWriteExt as _, BufReader, Lines};
use tokio::process::{Child, ChildStdin};
use tokio::sync::{mpsc, watch};

use crate::baseline::{self, Isolation};
use crate::jobs::{self, QUEUE};
use crate::measure::{now_us, peak_rss_kib};
use crate::Mode;

/// Environment variable that passes the database URL to a child (kept off its command line).
const URL_VAR: &str = "JOBQUEUE_BENCH_URL";

/// Arguments of a worker process.
#[derive(clap::Args, Debug)]
pub(crate) struct WorkerArgs {
    /// Framework (`Worker`), baseline (hand-written loop), minimal (the same loop on the
    /// minimal table) or minimal-rr (that loop at REPEATABLE READ).
    #[arg(long, value_enum)]
    mode: Mode,
    /// Jobs run at once (the baseline claims this many per transaction).
    #[arg(long, default_value_t = 16)]
    concurrency: usize,
    /// How long the baseline sleeps after a claim that found nothing.
    #[arg(long, default_value_t = 50)]
    poll_ms: u64,
    /// Record probe latencies (the baseline parses payloads only then).
    #[arg(long)]
    latency: bool,
}

/// What a worker process reports when it stops.
#[derive(Debug, Default, Serialize, Deserialize)]
pub(crate) struct ChildResult {
    /// Jobs recorded done.
    pub(crate) completed: u64,
    /// When the last of them was seen done (µs since the epoch; 2 ms resolution).
    pub(crate) last_done_us: u64,
    /// Probe latencies, µs.
    pub(crate) latencies_us: Vec<u64>,
    /// The baseline's claim loop counters.
    pub(crate) baseline: Option<baseline::LoopStats>,
    /// The framework worker's counters, as `Debug`.
    pub(crate) framework: Option<String>,
    /// CPU time this process used from `go` to `stop`, ms.
    #[serde(default)]
    pub(crate) cpu_ms: u64,
}

/// Entry point of `jobqueue-bench worker`.
pub(crate) async fn worker_main(args: WorkerArgs) -> anyhow::Result<()> {
    let url = std::env::var(URL_VAR).with_context(|| format!("{URL_VAR} is not set"))?;
    let mut input = BufReader::new(tokio::io::stdin()).lines();
    let mut result = match args.mode {
        Mode::Framework => run_framework(&url, &args, &mut input).await?,
        Mode::Baseline => {
            run_baseline(
                &url,
                baseline::Table::Project,
                Isolation::ReadCommitted,
                &args,
                &mut input,
            )
            .await?
        }
        Mode::Minimal => {
            run_baseline(
                &url,
                baseline::Table::Minimal,
                Isolation::ReadCommitted,
                &args,
                &mut input,
            )
            .await?
        }
        Mode::BaselineRr => {
            run_baseline(
                &url,
                baseline::Table::Project,
                Isolation::RepeatableRead,
                &args,
                &mut input,
            )
            .await?
        }
        Mode::MinimalKey => {
            run_baseline(
                &url,
                baseline::Table::MinimalByKey,
                Isolation::ReadCommitted,
                &args,
                &mut input,
            )
            .await?
        }
        Mode::MinimalRrKey => {
            run_baseline(
                &url,
                baseline::Table::MinimalByKey,
                Isolation::RepeatableRead,
                &args,
                &mut input,
            )
            .await?
        }
        Mode::MinimalRr => {
            run_baseline(
                &url,
                baseline::Table::Minimal,
                Isolation::RepeatableRead,
                &args,
                &mut input,
            )
            .await?
        }
    };
    result.cpu_ms = own_cpu_ms().saturating_sub(CPU_AT_GO.get().copied().unwrap_or(0));
    println!("result {}", serde_json::to_string(&result)?);
    Ok(())
}

type Input = Lines<BufReader<tokio::io::Stdin>>;

/// This process's CPU time when `go` came, ms.
static CPU_AT_GO: std::sync::OnceLock<u64> = std::sync::OnceLock::new();

fn own_cpu_ms() -> u64 {
    crate::measure::cpu_ms(std::process::id()).unwrap_or(0)
}

async fn wait_for_go(input: &mut Input) -> anyhow::Result<()> {
    println!("ready");
    while let Some(line) = input.next_line().await? {
        if line.trim() == "go" {
            let _ = CPU_AT_GO.set(own_cpu_ms());
            return Ok(());
        }
    }
    bail!("input closed before `go`")
}

/// Opens `n` connections at once, so that none is opened inside the measured window.
async fn warm(pool: &sqlx::MySqlPool, n: usize) -> anyhow::Result<()> {
    let mut held = Vec::new();
    for _ in 0..n {
        held.push(pool.acquire().await?);
    }
    Ok(())
}

async fn run_framework(
    url: &str,
    args: &WorkerArgs,
    input: &mut Input,
) -> anyhow::Result<ChildResult> {
    let queue = Queue::connect(url).await?;
    let pool_size = queue.mysql_pool().unwrap().options().get_max_connections() as usize;
    warm(queue.mysql_pool().unwrap(), pool_size.min(4)).await?;
    let worker = Worker::builder(queue)
        .queues([QUEUE])
        .concurrency(args.concurrency)
        .build()?;
    let handle = worker.handle();
    wait_for_go(input).await?;
    let running = tokio::spawn(worker.run());
    let h = handle.clone();
    let (completed, last_done_us) = monitor(input, move || h.metrics().succeeded).await;
    handle.shutdown();
    running.await??;
    Ok(ChildResult {
        completed,
        last_done_us,
        latencies_us: jobs::take_latencies(),
        baseline: None,
        framework: Some(format!("{:?}", handle.metrics())),
        cpu_ms: 0,
    })
}

async fn run_baseline(
    url: &str,
    table: baseline::Table,
    isolation: Isolation,
    args: &WorkerArgs,
    input: &mut Input,
) -> anyhow::Result<ChildResult> {
    let pool = baseline::pool_at(url, 2, isolation).await?;
    warm(&pool, 1).await?;
    let done = Arc::new(AtomicU64::new(0));
    let (stop_tx, stop_rx) = watch::channel(false);
    let lp = baseline::Loop {
        pool,
        table,
        batch: args.concurrency,
        owner: format!("baseline:{}", std::process::id()),
        poll: Duration::from_millis(args.poll_ms),
        wake: None,
        stop: stop_rx,
        done: done.clone(),
        latency: args.latency,
    };
    wait_for_go(input).await?;
    let running = tokio::spawn(baseline::run(lp));
    let d = done.clone();
    let (completed, last_done_us) = monitor(input, move || d.load(Relaxed)).await;
    let _ = stop_tx.send(true);
    let stats = running.await??;
    Ok(ChildResult {
        completed,
        last_done_us,
        latencies_us: jobs::take_latencies(),
        baseline: Some(stats),
        framework: None,
        cpu_ms: 0,
    })
}

/// Watches the done counter every 2 ms, reports progress, and returns (done, when the last
/// one was seen) on `stop` or end of input.
async fn monitor(input: &mut Input, count: impl Fn() -> u64) -> (u64, u64) {
    let mut tick = tokio::time::interval(Duration::from_millis(2));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    let (mut last, mut last_done_us) = (0u64, 0u64);
    let mut printed = (0u64, 0u64);
    let mut printed_at = Instant::now();
    loop {
        tokio::select! {
            line = input.next_line() => match line {
                Ok(Some(l)) if l.trim() != "stop" => {}
                _ => break,
            },
            _ = tick.tick() => {
                let c = count();
                if c != last {
                    last = c;
                    last_done_us = now_us();
                }
                let now = (c, jobs::probes_seen());
                if now != printed && printed_at.elapsed() >= Duration::from_millis(10) {
                    println!("progress {} {}", now.0, now.1);
                    printed = now;
                    printed_at = Instant::now();
                }
            }
        }
    }
    (count(), last_done_us)
}

/// Worker processes of one measurement, as seen by the coordinator.
pub(crate) struct Group {
    children: Vec<(Child, ChildStdin)>,
    messages: mpsc::UnboundedReceiver<(usize, String)>,
    progress: Vec<(u64, u64)>,
    results: Vec<Option<ChildResult>>,
}

impl Group {
    /// Starts `processes` workers and waits until each is connected and ready.
    pub(crate) async fn start(
        url: &str,
        mode: Mode,
        processes: usize,
        concurrency: usize,
        latency: bool,
    ) -> anyhow::Result<Group> {
        let exe = std::env::current_exe().context("cannot find the benchmark's own binary")?;
        let (tx, messages) = mpsc::unbounded_channel();
        let mut children = Vec::new();
        for i in 0..processes {
            let mut cmd = tokio::process::Command::new(&exe);
            cmd.arg("worker")
                .arg("--mode")
                .arg(mode.as_str())
                .arg("--concurrency")
                .arg(concurrency.to_string())
                .env(URL_VAR, url)
                .stdin(Stdio::piped())
                .stdout(Stdio::piped())
                .stderr(Stdio::inherit())
                .kill_on_drop(true);
            if latency {
                cmd.arg("--latency");
            }
            let mut child = cmd.spawn().context("cannot start a worker process")?;
            let stdin = child.stdin.take().context("no stdin")?;
            let stdout = child.stdout.take().context("no stdout")?;
            let tx = tx.clone();
            tokio::spawn(async move {
                let mut lines = BufReader::new(stdout).lines();
                while let Ok(Some(line)) = lines.next_line().await {
                    if tx.send((i, line)).is_err() {
                        break;
                    }
                }
                let _ = tx.send((i, "eof".into()));
            });
            children.push((child, stdin));
        }
        let mut group = Group {
            progress: vec![(0, 0); processes],
            results: (0..processes).map(|_| None).collect(),
            children,
            messages,
        };
        let mut ready = 0;
        let deadline = Instant::now() + Duration::from_secs(60);
        while ready < processes {
            let (i, line) = group.next(deadline).await?;
            match line.as_str() {
                "ready" => ready += 1,
                "eof" => bail!("worker process {i} exited before it was ready"),
                _ => {}
            }
        }
        Ok(group)
    }

    async fn next(&mut self, deadline: Instant) -> anyhow::Result<(usize, String)> {
        let left = deadline.saturating_duration_since(Instant::now());
        match tokio::time::timeout(left, self.messages.recv()).await {
            Ok(Some(m)) => Ok(m),
            Ok(None) => bail!("every worker process is gone"),
            Err(_) => bail!("timed out waiting for the worker processes"),
        }
    }

    fn absorb(&mut self, i: usize, line: &str) -> anyhow::Result<()> {
        if let Some(rest) = line.strip_prefix("progress ") {
            let mut it = rest.split(' ').map(|v| v.parse::<u64>().unwrap_or(0));
            self.progress[i] = (it.next().unwrap_or(0), it.next().unwrap_or(0));
        } else if let Some(json) = line.strip_prefix("result ") {
            self.results[i] = Some(serde_json::from_str(json)?);
        } else if line == "eof" && self.results[i].is_none() {
            bail!("worker process {i} exited early; see its messages above");
        }
        Ok(())
    }

    /// Tells every worker to start; returns the moment it did (µs since the epoch).
    pub(crate) async fn go(&mut self) -> anyhow::Result<u64> {
        let at = now_us();
        for (_, stdin) in &mut self.children {
            stdin.write_all(b"go\n").await?;
            stdin.flush().await?;
        }
        Ok(at)
    }

    /// Waits until `done(jobs done, probes started)`, summed over the workers, holds.
    pub(crate) async fn wait(
        &mut self,
        done: impl Fn(u64, u64) -> bool,
        timeout: Duration,
    ) -> anyhow::Result<()> {
        let deadline = Instant::now() + timeout;
        loop {
            let jobs: u64 = self.progress.iter().map(|p| p.0).sum();
            let probes: u64 = self.progress.iter().map(|p| p.1).sum();
            if done(jobs, probes) {
                return Ok(());
            }
            let (i, line) = self
                .next(deadline)
                .await
                .with_context(|| format!("after {jobs} jobs and {probes} probes"))?;
            self.absorb(i, &line)?;
        }
    }

    /// Peak resident set of each worker process so far, KiB.
    pub(crate) fn peak_rss_kib(&self) -> Vec<u64> {
        self.children
            .iter()
            .filter_map(|(c, _)| c.id().and_then(peak_rss_kib))
            .collect()
    }

    /// Stops every worker and returns what each reported.
    pub(crate) async fn stop(mut self) -> anyhow::Result<Vec<ChildResult>> {
        for (_, stdin) in &mut self.children {
            let _ = stdin.write_all(b"stop\n").await;
            let _ = stdin.flush().await;
        }
        let deadline = Instant::now() + Duration::from_secs(60);
        while self.results.iter().any(Option::is_none) {
            let (i, line) = self.next(deadline).await?;
            self.absorb(i, &line)?;
        }
        for (child, stdin) in &mut self.children {
            let _ = stdin.shutdown().await;
            let status = child.wait().await?;
            if !status.success() {
                bail!("a worker process ended with {status}");
            }
        }
        Ok(self.results.into_iter().flatten().collect())
    }
}
