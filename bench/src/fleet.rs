//! The fleet scenario: what N idle worker processes cost the server together (queries per
//! second, connections), how fast a job enqueued by another process starts while they
//! idle, and how many connections one worker process holds while it drains.
//!
//! Every figure comes from the server (`SHOW GLOBAL STATUS`, `information_schema.PROCESSLIST`),
//! so it is meaningful on the benchmark's own throwaway server only: run it without
//! `DATABASE_URL`.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::ensure;
use rand::Rng as _;
use sqlx::{Connection as _, MySqlConnection, MySqlPool};

use crate::baseline;
use crate::child::Group;
use crate::env::{self, Env, Rows};
use crate::measure::{median, percentile, server_counters};
use crate::report::Row;
use crate::scenarios::progress;
use crate::Mode;

/// How long the connections of idle workers are sampled, after the queries' window.
const SAMPLE_IDLE: Duration = Duration::from_secs(2);

/// The fleet sizes measured.
const FLEET: [usize; 4] = [1, 4, 16, 32];

/// How much the scenario does.
struct FleetSizes {
    /// Idle time before the window: long enough for every worker to have written two
    /// heartbeats and read the others'.
    warmup: Duration,
    window: Duration,
    probes: u64,
    probe_gap_ms: u64,
    drain_jobs: u64,
}

impl FleetSizes {
    fn new(quick: bool) -> FleetSizes {
        if quick {
            FleetSizes {
                warmup: Duration::from_secs(12),
                window: Duration::from_secs(8),
                probes: 40,
                probe_gap_ms: 200,
                drain_jobs: 10_000,
            }
        } else {
            FleetSizes {
                warmup: Duration::from_secs(15),
                window: Duration::from_secs(15),
                probes: 100,
                probe_gap_ms: 300,
                drain_jobs: 20_000,
            }
        }
    }
}

/// Samples the connections of a database every 10 ms on a connection of its own (to
/// `information_schema`, so that it does not count itself), keeping the largest count.
struct ConnectionSampler {
    stop: Arc<AtomicBool>,
    peak: Arc<AtomicU64>,
    task: tokio::task::JoinHandle<anyhow::Result<()>>,
}

impl ConnectionSampler {
    async fn start(url: &str) -> anyhow::Result<ConnectionSampler> {
        let (server, db) = url
            .rsplit_once('/')
            .map(|(s, d)| (s.to_owned(), d.split('?').next().unwrap_or(d).to_owned()))
            .unwrap_or_default();
        let mut conn = MySqlConnection::connect(&format!("{server}/information_schema")).await?;
        let stop = Arc::new(AtomicBool::new(false));
        let peak = Arc::new(AtomicU64::new(0));
        let (s, p) = (stop.clone(), peak.clone());
        let task = tokio::spawn(async move {
            while !s.load(Relaxed) {
                let n: i64 = sqlx::query_scalar(
                    "SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE DB = ?",
                )
                .bind(&db)
                .fetch_one(&mut conn)
                .await?;
                p.fetch_max(n.max(0) as u64, Relaxed);
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            conn.close().await?;
            Ok(())
        });
        Ok(ConnectionSampler { stop, peak, task })
    }

    /// Stops sampling; returns the largest count seen.
    async fn finish(self) -> anyhow::Result<u64> {
        self.stop.store(true, Relaxed);
        self.task.await??;
        Ok(self.peak.load(Relaxed))
    }
}

/// What N idle workers measured.
struct Idle {
    qps: f64,
    breakdown: String,
    connections_per_process: f64,
    p99_ms: f64,
    max_ms: f64,
}

/// N idle workers: queries per second over the window, the connections they hold, then the
/// start latency of probes enqueued one at a time by this process.
async fn idle_once(url: &str, n: usize, s: &FleetSizes) -> anyhow::Result<Idle> {
    let admin = baseline::pool(url, 1).await?;
    env::truncate(&admin).await?;
    sqlx::query("DELETE FROM job_queue_worker")
        .execute(&admin)
        .await?;
    admin.close().await;
    let mut counters = MySqlConnection::connect(url).await?;
    let mut group = Group::start(url, Mode::Framework, n, 16, true).await?;
    group.go().await?;
    tokio::time::sleep(s.warmup).await;
    let before = server_counters(&mut counters).await?;
    let began = Instant::now();
    tokio::time::sleep(s.window).await;
    let after = server_counters(&mut counters).await?;
    let secs = began.elapsed().as_secs_f64();
    // The connections, after the window: the sampler's own reads would count in it.
    let sampler = ConnectionSampler::start(url).await?;
    tokio::time::sleep(SAMPLE_IDLE).await;
    // The counters' own connection is in the database too.
    let held = sampler.finish().await?.saturating_sub(1);
    let delta = before.delta(&after);
    let qps = delta.get("Questions").copied().unwrap_or(0) as f64 / secs;
    let breakdown = delta
        .iter()
        .filter(|(k, v)| k.starts_with("Com_") && **v > 0)
        .map(|(k, v)| format!("{} {:.1}/s", k.trim_start_matches("Com_"), *v as f64 / secs))
        .collect::<Vec<_>>()
        .join(", ");
    // Probes from another process: no in-process wake-up reaches the workers.
    let queue =
        jobqueue::Queue::connect_with(url, jobqueue::QueueConfig::default().max_connections(1))
            .await?;
    for i in 0..s.probes {
        let gap = rand::thread_rng().gen_range(0..=s.probe_gap_ms);
        tokio::time::sleep(Duration::from_millis(gap)).await;
        let sent_us = crate::measure::now_us();
        let _ = queue.enqueue(crate::jobs::Probe { n: i, sent_us }).await?;
    }
    group
        .wait(|_, p| p >= s.probes, Duration::from_secs(120))
        .await?;
    queue.mysql_pool().unwrap().close().await;
    let results = group.stop().await?;
    counters.close().await?;
    let latencies: Vec<u64> = results.into_iter().flat_map(|r| r.latencies_us).collect();
    ensure!(
        latencies.len() as u64 == s.probes,
        "{} latencies for {} probes",
        latencies.len(),
        s.probes
    );
    Ok(Idle {
        qps,
        breakdown,
        connections_per_process: held as f64 / n as f64,
        p99_ms: percentile(&latencies, 99.0) / 1000.0,
        max_ms: latencies.iter().copied().max().unwrap_or(0) as f64 / 1000.0,
    })
}

/// One process of `slots` slots drains `jobs`: the rate, and the most connections it held.
async fn drain_connections(url: &str, slots: usize, jobs: u64) -> anyhow::Result<(f64, u64)> {
    let admin: MySqlPool = baseline::pool(url, 1).await?;
    env::truncate(&admin).await?;
    env::fill(&admin, Rows::Ready, "fleet:", jobs).await?;
    admin.close().await;
    let mut group = Group::start(url, Mode::Framework, 2, slots, false).await?;
    let sampler = ConnectionSampler::start(url).await?;
    let start = group.go().await?;
    group
        .wait(|done, _| done >= jobs, Duration::from_secs(600))
        .await?;
    let held = sampler.finish().await?;
    let results = group.stop().await?;
    let end = results
        .iter()
        .map(|r| r.last_done_us)
        .max()
        .unwrap_or(start);
    let secs = end.saturating_sub(start) as f64 / 1e6;
    Ok((jobs as f64 / secs.max(1e-6), held))
}

/// The scenario.
pub(crate) async fn fleet(env: &mut Env, quick: bool, runs: u32) -> anyhow::Result<Vec<Row>> {
    if env.is_external() {
        eprintln!("note: the fleet scenario counts every client of DATABASE_URL's server; run it without DATABASE_URL for figures of the workers alone");
    }
    let url = env.database("fleet").await?;
    let s = FleetSizes::new(quick);
    let mut rows = Vec::new();
    for n in FLEET {
        let mut measured = Vec::new();
        for _ in 0..runs {
            measured.push(idle_once(&url, n, &s).await?);
        }
        let med = |f: fn(&Idle) -> f64| median(&measured.iter().map(f).collect::<Vec<_>>());
        let last = measured.last().expect("at least one run");
        let row = Row::new(
            "fleet",
            format!("{n} idle worker process{}: queries/s in all", if n == 1 { "" } else { "es" }),
            "queries/s",
        )
        .lower_is_better()
        .figures(measured.iter().map(|m| m.qps).collect(), Vec::new())
        .note("statements", last.breakdown.clone())
        .note(
            "connections per process (idle, most seen)",
            format!("{:.2}", med(|m| m.connections_per_process)),
        )
        .note(
            "start latency of a job enqueued by another process",
            format!(
                "p99 {:.1} ms, max {:.1} ms ({} jobs one at a time, 0-{} ms apart)",
                med(|m| m.p99_ms),
                med(|m| m.max_ms),
                s.probes,
                s.probe_gap_ms
            ),
        )
        .note(
            "source",
            format!(
                "server Questions delta over {:.0} s after {:.0} s idle; then PROCESSLIST rows of the database for 2 s",
                s.window.as_secs_f64(),
                s.warmup.as_secs_f64()
            ),
        );
        progress(&row);
        rows.push(row);
    }
    for slots in [16, 64] {
        let mut rates = Vec::new();
        let mut held = Vec::new();
        for _ in 0..runs {
            let (rate, h) = drain_connections(&url, slots, s.drain_jobs).await?;
            rates.push(rate);
            held.push(h as f64 / 2.0);
        }
        let row = Row::new(
            "fleet",
            format!(
                "2 processes of {slots} slots draining {} jobs",
                crate::measure::thousands(s.drain_jobs as f64)
            ),
            "jobs/s",
        )
        .figures(rates, Vec::new())
        .note(
            "connections per process (draining, most seen)",
            format!("{:.1}", median(&held)),
        );
        progress(&row);
        rows.push(row);
    }
    Ok(rows)
}
