//! The scenarios. Each measures the framework and the baseline in turn, the one that goes
//! first alternating from run to run, and reports the median of the runs.

use std::collections::BTreeMap;
use std::sync::atomic::AtomicU64;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, ensure, Context as _};
use jobqueue::{EnqueueOptions, Queue, QueueConfig, Worker};
use rand::{Rng as _, SeedableRng as _};
use sqlx::{Connection as _, MySqlConnection, MySqlPool};
use tokio::sync::{watch, Notify};

use crate::baseline;
use crate::child::Group;
use crate::dashboard::DashboardSizes;
use crate::env::{self, Env, Rows};
use crate::jobs::{self, Noop, Probe, QUEUE};
use crate::measure::{median, now_us, percentile, server_counters, thousands};
use crate::report::{Figure, Report, Row, TargetOn};
use crate::{Mode, RunArgs, Scenario};

/// How much each scenario does.
struct Sizes {
    drain_jobs: u64,
    single_one: u64,
    single_many: u64,
    bulk: u64,
    probes_idle: u64,
    probes_load: u64,
    idle_gap_ms: u64,
    load_gap_ms: u64,
    load_backlog: u64,
    trickle_jobs: u64,
    history_done: u64,
    history_scheduled: u64,
    rss_jobs: u64,
    idle_warmup: Duration,
    idle_window: Duration,
    dashboard: DashboardSizes,
}

impl Sizes {
    fn new(quick: bool) -> Sizes {
        if quick {
            Sizes {
                drain_jobs: 5_000,
                single_one: 1_000,
                single_many: 4_000,
                bulk: 10_000,
                probes_idle: 8,
                probes_load: 15,
                idle_gap_ms: 500,
                load_gap_ms: 40,
                load_backlog: 10_000,
                trickle_jobs: 600,
                history_done: 200_000,
                history_scheduled: 20_000,
                rss_jobs: 5_000,
                idle_warmup: Duration::from_secs(4),
                idle_window: Duration::from_secs(5),
                dashboard: DashboardSizes {
                    finished: 100_000,
                    waiting: 10_000,
                    requests: 10,
                },
            }
        } else {
            Sizes {
                drain_jobs: 20_000,
                single_one: 4_000,
                single_many: 16_000,
                bulk: 50_000,
                probes_idle: 20,
                probes_load: 30,
                idle_gap_ms: 500,
                load_gap_ms: 40,
                load_backlog: 20_000,
                trickle_jobs: 2_000,
                history_done: 1_000_000,
                history_scheduled: 100_000,
                rss_jobs: 20_000,
                idle_warmup: Duration::from_secs(5),
                idle_window: Duration::from_secs(10),
                dashboard: DashboardSizes {
                    finished: 1_000_000,
                    waiting: 100_000,
                    requests: 30,
                },
            }
        }
    }
}

/// Everything a scenario needs.
struct Ctx {
    env: Env,
    sizes: Sizes,
    runs: u32,
    /// Indexes the drains drop from the framework's table (`--drop-index`).
    drop_index: Vec<String>,
}

/// Runs the scenarios asked for, prints the table, writes the JSON.
pub(crate) async fn run_all(args: RunArgs) -> anyhow::Result<()> {
    let started = Instant::now();
    let runs = args.runs.unwrap_or(if args.quick { 1 } else { 3 });
    // PostgreSQL's scenario brings its own server: a run of it alone starts no MySQL one.
    let env = if args.only == [Scenario::Postgres] {
        Env::without_server()
    } else {
        Env::open().await?
    };
    let mut cx = Ctx {
        env,
        sizes: Sizes::new(args.quick),
        runs,
        drop_index: args.drop_index.clone(),
    };
    let machine = machine();
    eprintln!(
        "machine: {} cpus ({}), {} memory",
        machine["nproc"], machine["cpu"], machine["memory"]
    );
    eprintln!("server: {}", settings_line(&cx.env.settings));
    if cx.env.is_external() {
        eprintln!("note: DATABASE_URL's server may have other clients; the server-wide counters (statements per job, idle queries per second) then include their traffic");
    }
    // The fleet scenario starts up to 32 processes and counts the whole server: only when
    // named.
    let want = |s: Scenario| {
        args.only.contains(&s)
            || (args.only.is_empty() && s != Scenario::Fleet && s != Scenario::Postgres)
    };
    let mut rows = Vec::new();
    let all: [(Scenario, &str); 10] = [
        (Scenario::Drain, "drain"),
        (Scenario::Enqueue, "enqueue"),
        (Scenario::Trickle, "trickle"),
        (Scenario::Latency, "latency"),
        (Scenario::Scale, "scale"),
        (Scenario::Resources, "resources"),
        (Scenario::Dashboard, "dashboard"),
        (Scenario::Limits, "limits"),
        (Scenario::Fleet, "fleet"),
        (Scenario::Postgres, "postgres"),
    ];
    for (scenario, name) in all {
        if !want(scenario) {
            continue;
        }
        let began = Instant::now();
        eprintln!(
            "\n== {name} ({runs} run{})",
            if runs == 1 { "" } else { "s" }
        );
        let new = match scenario {
            Scenario::Drain => drain(&mut cx).await,
            Scenario::Enqueue => enqueue(&mut cx).await,
            Scenario::Trickle => trickle(&mut cx).await,
            Scenario::Latency => latency(&mut cx).await,
            Scenario::Scale => scale(&mut cx).await,
            Scenario::Resources => resources(&mut cx).await,
            Scenario::Dashboard => dashboard(&mut cx).await,
            Scenario::Limits => limits(&mut cx).await,
            Scenario::Fleet => crate::fleet::fleet(&mut cx.env, args.quick, runs).await,
            Scenario::Postgres => crate::postgres::run(args.quick, runs).await,
        }
        .with_context(|| format!("scenario `{name}` failed"))?;
        eprintln!("   ({name}: {:.0} s)", began.elapsed().as_secs_f64());
        rows.extend(new);
    }
    let mut machine = machine;
    machine.insert("load average at end".into(), load_average());
    let report = Report {
        command: std::iter::once("jobqueue-bench".to_owned())
            .chain(std::env::args().skip(1))
            .collect::<Vec<_>>()
            .join(" "),
        machine,
        server: cx.env.settings.clone(),
        runs,
        quick: args.quick,
        seconds: started.elapsed().as_secs_f64(),
        rows,
    };
    println!();
    println!(
        "jobqueue benchmark: {} run{} per figure (median){}; {:.0} s in all",
        runs,
        if runs == 1 { "" } else { "s" },
        if args.quick { ", --quick sizes" } else { "" },
        report.seconds
    );
    println!(
        "machine: {} cpus ({}), {} memory; load average {} at start, {} at end",
        report.machine["nproc"],
        report.machine["cpu"],
        report.machine["memory"],
        report.machine["load average at start"],
        report.machine["load average at end"]
    );
    println!("server: {}\n", settings_line(&report.server));
    print!("{}", report.table());
    if let Some(dir) = args.json_out.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir)?;
    }
    std::fs::write(&args.json_out, serde_json::to_string_pretty(&report)?)
        .with_context(|| format!("cannot write {}", args.json_out.display()))?;
    println!("\nfigures written to {}", args.json_out.display());
    cx.env.close().await?;
    Ok(())
}

fn settings_line(s: &BTreeMap<String, String>) -> String {
    let get = |k: &str| s.get(k).map_or("?", String::as_str);
    if s.len() == 1 {
        return format!("MySQL/MariaDB: {}", get("version"));
    }
    let mib = |k: &str| {
        s.get(k)
            .and_then(|v| v.parse::<u64>().ok())
            .map_or("?".to_owned(), |v| format!("{} MiB", v / (1024 * 1024)))
    };
    format!(
        "{} ({}), innodb_flush_log_at_trx_commit={}, log_bin={}, sync_binlog={}, \
         innodb_doublewrite={}, innodb_flush_method={}, innodb_buffer_pool_size={}, \
         innodb_log_file_size={}, isolation of the queue's sessions: READ-COMMITTED",
        get("version"),
        get("version_comment"),
        get("innodb_flush_log_at_trx_commit"),
        get("log_bin"),
        get("sync_binlog"),
        get("innodb_doublewrite"),
        get("innodb_flush_method"),
        mib("innodb_buffer_pool_size"),
        mib("innodb_log_file_size"),
    )
}

fn machine() -> BTreeMap<String, String> {
    let mut m = BTreeMap::new();
    m.insert(
        "nproc".into(),
        std::thread::available_parallelism().map_or("?".into(), |n| n.to_string()),
    );
    let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let cpu = cpuinfo
        .lines()
        .find_map(|l| l.strip_prefix("model name"))
        .map(|l| l.trim_start_matches([' ', '\t', ':']).trim().to_owned())
        .unwrap_or_else(|| "?".into());
    m.insert("cpu".into(), cpu);
    let meminfo = std::fs::read_to_string("/proc/meminfo").unwrap_or_default();
    let mem = meminfo
        .lines()
        .find_map(|l| l.strip_prefix("MemTotal:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .map_or("?".into(), |kib| {
            format!("{:.0} GiB", kib as f64 / 1048576.0)
        });
    m.insert("memory".into(), mem);
    m.insert("load average at start".into(), load_average());
    m
}

/// `/proc/loadavg`'s first three figures: other work on the machine skews every figure.
fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|l| l.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|_| "?".into())
}

/// Prints one finished row as progress.
pub(crate) fn progress(row: &Row) {
    let f = |x: &Option<Figure>| {
        x.as_ref()
            .map_or("-".into(), |f| crate::measure::figure(f.value))
    };
    eprintln!(
        "   {:<44} framework {:>10}  baseline {:>10}  {}{}",
        row.case,
        f(&row.framework),
        f(&row.baseline),
        row.unit,
        row.ratio
            .map_or(String::new(), |r| format!("  fw/base {r:.2}")),
    );
    if let (Some(m), Some(r)) = (&row.minimal, row.minimal_ratio) {
        eprintln!(
            "   {:<44} minimal table {}  fw/min {r:.2}",
            "",
            crate::measure::figure(m.value)
        );
    }
    if let (Some(m), Some(r)) = (&row.minimal_rr, row.minimal_rr_ratio) {
        eprintln!(
            "   {:<44} minimal table at REPEATABLE READ {}  fw/min RR {r:.2}",
            "",
            crate::measure::figure(m.value)
        );
    }
}

// ---------------------------------------------------------------------------------------
// Drains

/// One drain (or enqueue) measured.
struct Measured {
    /// Jobs per second from `go` to the last completion.
    rate: f64,
    /// Statements the server received per job (all clients: the workers alone here).
    statements_per_job: f64,
    /// Redo log fsyncs per job.
    fsyncs_per_job: f64,
    /// Peak RSS of each worker process, KiB.
    rss_kib: Vec<u64>,
    /// Rows per claim, for the baseline.
    per_claim: Option<f64>,
    /// Each server counter's delta per job.
    per_job: BTreeMap<String, f64>,
    /// CPU time of the server per job, µs (a throwaway server only).
    server_cpu_us: Option<f64>,
    /// CPU time of the worker processes per job, µs.
    worker_cpu_us: f64,
}

/// Fills `jobs` ready no-op jobs and has `processes` workers of `mode` drain them.
#[allow(clippy::too_many_arguments)]
async fn drain_once(
    url: &str,
    admin: &MySqlPool,
    mode: Mode,
    processes: usize,
    concurrency: usize,
    jobs: u64,
    prefix: &str,
    empty_first: bool,
) -> anyhow::Result<Measured> {
    drain_limited(
        url,
        admin,
        mode,
        processes,
        concurrency,
        jobs,
        prefix,
        empty_first,
        false,
    )
    .await
}

/// [`drain_once`], the jobs each with a concurrency limit of 1 on a key of its own when
/// `limited`.
#[allow(clippy::too_many_arguments)]
async fn drain_limited(
    url: &str,
    admin: &MySqlPool,
    mode: Mode,
    processes: usize,
    concurrency: usize,
    jobs: u64,
    prefix: &str,
    empty_first: bool,
    limited: bool,
) -> anyhow::Result<Measured> {
    if empty_first {
        env::truncate(admin).await?;
    }
    if mode.minimal_table() {
        env::fill_minimal(admin, prefix, jobs).await?;
    } else {
        env::fill(admin, Rows::Ready, prefix, jobs).await?;
    }
    if limited {
        sqlx::query(
            "UPDATE job_queue SET concurrency_key = task_key, concurrency_limit = 1 \
             WHERE task_key LIKE ?",
        )
        .bind(format!("{prefix}%"))
        .execute(admin)
        .await?;
    }
    let mut counters = MySqlConnection::connect(url).await?;
    let mut group = Group::start(url, mode, processes, concurrency, false).await?;
    let server_cpu = || {
        env::SERVER_PID
            .get()
            .and_then(|&pid| crate::measure::cpu_ms(pid))
    };
    let before = server_counters(&mut counters).await?;
    let cpu_before = server_cpu();
    let start = group.go().await?;
    group
        .wait(|done, _| done >= jobs, Duration::from_secs(600))
        .await?;
    let cpu_after = server_cpu();
    let after = server_counters(&mut counters).await?;
    let rss_kib = group.peak_rss_kib();
    let results = group.stop().await?;
    counters.close().await?;
    let completed: u64 = results.iter().map(|r| r.completed).sum();
    ensure!(
        completed == jobs,
        "{mode:?} recorded {completed} jobs done for {jobs} enqueued"
    );
    let open: i64 = sqlx::query_scalar(
        "SELECT COUNT(*) FROM job_queue WHERE status NOT IN ('done', 'failed') AND task_key LIKE ?",
    )
    .bind(format!("{prefix}%"))
    .fetch_one(admin)
    .await?;
    ensure!(open == 0, "{open} jobs were left undone");
    let end = results
        .iter()
        .map(|r| r.last_done_us)
        .max()
        .unwrap_or(start);
    let secs = (end.saturating_sub(start)) as f64 / 1e6;
    let delta = before.delta(&after);
    let per_job = |k: &str| delta.get(k).copied().unwrap_or(0) as f64 / jobs as f64;
    let claims: u64 = results
        .iter()
        .filter_map(|r| r.baseline.map(|b| b.claims - b.empty_claims))
        .sum();
    Ok(Measured {
        rate: jobs as f64 / secs.max(1e-6),
        statements_per_job: per_job("Questions"),
        fsyncs_per_job: per_job("Innodb_data_fsyncs").max(per_job("Innodb_os_log_fsyncs")),
        rss_kib,
        per_claim: (claims > 0).then(|| jobs as f64 / claims as f64),
        per_job: delta
            .iter()
            .map(|(k, v)| (k.clone(), *v as f64 / jobs as f64))
            .collect(),
        server_cpu_us: cpu_before
            .zip(cpu_after)
            .map(|(b, a)| a.saturating_sub(b) as f64 * 1000.0 / jobs as f64),
        worker_cpu_us: results.iter().map(|r| r.cpu_ms).sum::<u64>() as f64 * 1000.0 / jobs as f64,
    })
}

/// The median of one figure over several measurements.
fn median_of(v: &[Measured], f: fn(&Measured) -> f64) -> f64 {
    median(&v.iter().map(f).collect::<Vec<_>>())
}

/// Medians of the server counters of several measurements, per job, as notes.
fn counter_notes(mut row: Row, fw: &[Measured], base: &[Measured]) -> Row {
    let m = median_of;
    row = row
        .note(
            "statements/job",
            format!(
                "fw {:.2}, base {:.2}",
                m(fw, |d| d.statements_per_job),
                m(base, |d| d.statements_per_job)
            ),
        )
        .note(
            "fsyncs/job",
            format!(
                "fw {:.3}, base {:.3}",
                m(fw, |d| d.fsyncs_per_job),
                m(base, |d| d.fsyncs_per_job)
            ),
        );
    for (key, label) in [
        ("Innodb_buffer_pool_reads", "pages read from disk/job"),
        ("Innodb_buffer_pool_pages_flushed", "pages flushed/job"),
        ("Handler_read_next", "index entries read in order/job"),
    ] {
        let m = |v: &[Measured]| {
            median(
                &v.iter()
                    .map(|d| d.per_job.get(key).copied().unwrap_or(0.0))
                    .collect::<Vec<_>>(),
            )
        };
        row = row.note(label, format!("fw {:.3}, base {:.3}", m(fw), m(base)));
    }
    let commands = |v: &[Measured]| {
        let keys: std::collections::BTreeSet<&String> =
            v.iter().flat_map(|d| d.per_job.keys()).collect();
        keys.into_iter()
            .filter(|k| k.starts_with("Com_"))
            .filter_map(|k| {
                let m = median(
                    &v.iter()
                        .map(|d| d.per_job.get(k).copied().unwrap_or(0.0))
                        .collect::<Vec<_>>(),
                );
                let name = k.trim_start_matches("Com_");
                (m >= 0.0005).then(|| {
                    if m < 0.1 {
                        format!("{name} {m:.3}")
                    } else {
                        format!("{name} {m:.2}")
                    }
                })
            })
            .collect::<Vec<_>>()
            .join(", ")
    };
    row = row
        .note("fw commands/job", commands(fw))
        .note("base commands/job", commands(base));
    if base.iter().any(|d| d.per_claim.is_some()) {
        row = row.note(
            "base jobs/claim",
            format!("{:.1}", m(base, |d| d.per_claim.unwrap_or(0.0))),
        );
    }
    row
}

/// One small unrecorded drain per mode: the first drain after a server start or a large
/// fill is slower (cold caches, background flushing), whichever mode it is.
async fn warm_up(url: &str, admin: &MySqlPool, jobs: u64) -> anyhow::Result<()> {
    for mode in Mode::order(0) {
        let prefix = format!("warm{}:", mode.as_str());
        drain_once(
            url,
            admin,
            mode,
            1,
            16,
            (jobs / 10).max(500),
            &prefix,
            false,
        )
        .await?;
    }
    Ok(())
}

/// The drains: (processes, concurrency). Up to 100 slots in one process (the claim takes at
/// most 100 jobs per queue and transaction), then past it: 256 slots in one process, and 4
/// processes of 64.
const DRAIN_CASES: [(usize, usize); 6] = [(1, 16), (1, 64), (1, 100), (4, 16), (1, 256), (4, 64)];

async fn drain(cx: &mut Ctx) -> anyhow::Result<Vec<Row>> {
    let url = cx.env.database("drain").await?;
    let admin = baseline::pool(&url, 2).await?;
    for index in &cx.drop_index {
        ensure!(
            index
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'_'),
            "not an index name: {index}"
        );
        sqlx::raw_sql(&format!("ALTER TABLE job_queue DROP INDEX `{index}`"))
            .execute(&admin)
            .await
            .with_context(|| format!("cannot drop the index {index}"))?;
        eprintln!("   (the framework's table drains without its index {index})");
    }
    let min_url = cx.env.minimal_database("drain_min").await?;
    let min_admin = baseline::pool(&min_url, 2).await?;
    let jobs = cx.sizes.drain_jobs;
    warm_up(&url, &admin, jobs).await?;
    for mode in [
        Mode::Minimal,
        Mode::MinimalRr,
        Mode::MinimalRrKey,
        Mode::MinimalKey,
    ] {
        let prefix = format!("warm{}:", mode.as_str());
        drain_once(
            &min_url,
            &min_admin,
            mode,
            1,
            16,
            (jobs / 10).max(500),
            &prefix,
            false,
        )
        .await?;
    }
    // [case][framework, baseline, minimal, minimal at REPEATABLE READ, the same by key,
    // minimal by key]
    let mut results: Vec<[Vec<Measured>; 6]> =
        DRAIN_CASES.iter().map(|_| Default::default()).collect();
    for run in 0..cx.runs {
        for (c, &(procs, conc)) in DRAIN_CASES.iter().enumerate() {
            for mode in Mode::order6(run) {
                let (u, a) = if mode.minimal_table() {
                    (&min_url, &min_admin)
                } else {
                    (&url, &admin)
                };
                let prefix = format!("d{run}{}{c}:", mode.as_str());
                let d = drain_once(u, a, mode, procs, conc, jobs, &prefix, true).await?;
                eprintln!(
                    "   run {run} {procs} x {conc:<3} {:<9} {:>8} jobs/s",
                    mode.as_str(),
                    thousands(d.rate)
                );
                let slot = match mode {
                    Mode::Framework => 0,
                    Mode::Baseline | Mode::BaselineRr => 1,
                    Mode::Minimal => 2,
                    Mode::MinimalRr => 3,
                    Mode::MinimalRrKey => 4,
                    Mode::MinimalKey => 5,
                };
                results[c][slot].push(d);
            }
        }
    }
    let rates = |v: &[Measured]| v.iter().map(|d| d.rate).collect::<Vec<_>>();
    let mut rows = Vec::new();
    for (c, &(procs, conc)) in DRAIN_CASES.iter().enumerate() {
        let [fw, base, min, min_rr, min_rr_key, min_key] = &results[c];
        let row = Row::new(
            "drain",
            format!(
                "{} no-op jobs, {procs} process{} x {conc}",
                thousands(jobs as f64),
                if procs == 1 { "" } else { "es" }
            ),
            "jobs/s",
        )
        .figures(rates(fw), rates(base))
        .minimal(rates(min))
        .minimal_rr(rates(min_rr))
        .target(TargetOn::Minimal, 0.9);
        let m = median_of;
        let row = counter_notes(row, fw, base)
            .note(
                "min statements/job, fsyncs/job",
                format!(
                    "{:.2}, {:.3}",
                    m(min, |d| d.statements_per_job),
                    m(min, |d| d.fsyncs_per_job)
                ),
            )
            .note(
                "minimal at REPEATABLE READ claiming by key (gap-free), jobs/s",
                format!(
                    "{} (fw/min RR by key {:.2})",
                    thousands(m(min_rr_key, |d| d.rate)),
                    m(fw, |d| d.rate) / m(min_rr_key, |d| d.rate).max(1e-9)
                ),
            )
            .note(
                "minimal at READ COMMITTED claiming by key, jobs/s",
                format!(
                    "{} (fw/min by key {:.2})",
                    thousands(m(min_key, |d| d.rate)),
                    m(fw, |d| d.rate) / m(min_key, |d| d.rate).max(1e-9)
                ),
            )
            .note(
                "CPU µs/job server + workers",
                format!(
                    "fw {:.0} + {:.0}, base {:.0} + {:.0}, min {:.0} + {:.0}, min RR {:.0} + {:.0}",
                    m(fw, |d| d.server_cpu_us.unwrap_or(0.0)),
                    m(fw, |d| d.worker_cpu_us),
                    m(base, |d| d.server_cpu_us.unwrap_or(0.0)),
                    m(base, |d| d.worker_cpu_us),
                    m(min, |d| d.server_cpu_us.unwrap_or(0.0)),
                    m(min, |d| d.worker_cpu_us),
                    m(min_rr, |d| d.server_cpu_us.unwrap_or(0.0)),
                    m(min_rr, |d| d.worker_cpu_us)
                ),
            );
        progress(&row);
        rows.push(row);
    }
    admin.close().await;
    min_admin.close().await;
    Ok(rows)
}

// ---------------------------------------------------------------------------------------
// Limits

/// The drain of `drain` (4 processes x 16), through jobqueue only: every job with a
/// concurrency limit of 1 on a key of its own (so the limit never holds a job back, and
/// every claim takes a slot and every completion frees one), against the same drain
/// without limits. The "baseline" column is the drain without limits.
async fn limits(cx: &mut Ctx) -> anyhow::Result<Vec<Row>> {
    let url = cx.env.database("limits").await?;
    let admin = baseline::pool(&url, 2).await?;
    let jobs = cx.sizes.drain_jobs;
    let (procs, conc) = (4, 16);
    warm_up(&url, &admin, jobs).await?;
    let mut limited = Vec::new();
    let mut plain = Vec::new();
    for run in 0..cx.runs {
        // Alternate which goes first, as the modes do.
        for with_limits in [run % 2 == 0, run % 2 == 1] {
            let prefix = format!("l{run}{}:", with_limits as u8);
            sqlx::query("DELETE FROM job_queue_slot")
                .execute(&admin)
                .await?;
            let d = drain_limited(
                &url,
                &admin,
                Mode::Framework,
                procs,
                conc,
                jobs,
                &prefix,
                true,
                with_limits,
            )
            .await?;
            eprintln!(
                "   run {run} {procs} x {conc} {:<14} {:>8} jobs/s",
                if with_limits {
                    "with limits"
                } else {
                    "without limits"
                },
                thousands(d.rate)
            );
            if with_limits {
                limited.push(d);
            } else {
                plain.push(d);
            }
        }
    }
    let row = Row::new(
        "limits",
        format!(
            "{} no-op jobs, {procs} processes x {conc}, a concurrency limit per job (distinct keys) vs none; baseline column = jobqueue without limits",
            thousands(jobs as f64)
        ),
        "jobs/s",
    )
    .figures(
        limited.iter().map(|d| d.rate).collect(),
        plain.iter().map(|d| d.rate).collect(),
    )
    .target(TargetOn::Ratio, 0.7);
    let row = counter_notes(row, &limited, &plain);
    progress(&row);
    admin.close().await;
    Ok(vec![row])
}

// ---------------------------------------------------------------------------------------
// Enqueue

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum EnqueueCase {
    SingleOne,
    SingleMany,
    Bulk,
    SingleManyDup,
    BulkDup,
}

impl EnqueueCase {
    fn label(self, s: &Sizes) -> String {
        match self {
            EnqueueCase::SingleOne => {
                format!("single, 1 task, {} jobs", thousands(s.single_one as f64))
            }
            EnqueueCase::SingleMany => {
                format!("single, 16 tasks, {} jobs", thousands(s.single_many as f64))
            }
            EnqueueCase::Bulk => format!("bulk 1,000/call, {} jobs", thousands(s.bulk as f64)),
            EnqueueCase::SingleManyDup => format!(
                "single, 16 tasks, {} jobs, 50 % duplicates",
                thousands(s.single_many as f64)
            ),
            EnqueueCase::BulkDup => format!(
                "bulk 1,000/call, {} jobs, 50 % duplicates",
                thousands(s.bulk as f64)
            ),
        }
    }

    fn jobs(self, s: &Sizes) -> u64 {
        match self {
            EnqueueCase::SingleOne => s.single_one,
            EnqueueCase::SingleMany | EnqueueCase::SingleManyDup => s.single_many,
            EnqueueCase::Bulk | EnqueueCase::BulkDup => s.bulk,
        }
    }

    fn duplicates(self) -> bool {
        matches!(self, EnqueueCase::SingleManyDup | EnqueueCase::BulkDup)
    }
}

/// The enqueuer of one mode.
#[derive(Clone)]
enum Enqueuer {
    Framework(Queue),
    Baseline(MySqlPool),
}

impl Enqueuer {
    async fn open(url: &str, mode: Mode, connections: u32) -> anyhow::Result<Enqueuer> {
        let e = match mode {
            Mode::Framework => Enqueuer::Framework(
                Queue::connect_with(url, QueueConfig::default().max_connections(connections))
                    .await?,
            ),
            Mode::Baseline => Enqueuer::Baseline(baseline::pool(url, connections).await?),
            Mode::Minimal
            | Mode::MinimalRr
            | Mode::MinimalRrKey
            | Mode::MinimalKey
            | Mode::BaselineRr => {
                bail!("the other loops are measured in the drains and the trickle only")
            }
        };
        // Open the connections before anything is timed.
        let pool = e.pool();
        let mut held = Vec::new();
        for _ in 0..connections {
            held.push(pool.acquire().await?);
        }
        Ok(e)
    }

    fn pool(&self) -> &MySqlPool {
        match self {
            Enqueuer::Framework(q) => q.mysql_pool().unwrap(),
            Enqueuer::Baseline(p) => p,
        }
    }

    /// One job, autocommit. Returns whether it was new.
    async fn one(&self, n: u64) -> anyhow::Result<bool> {
        Ok(match self {
            Enqueuer::Framework(q) => q.enqueue(Noop { n }).await?.is_new(),
            Enqueuer::Baseline(p) => baseline::enqueue_one(p, n).await?.1,
        })
    }

    /// Many jobs in one call.
    async fn many(&self, ns: &[u64], duplicates: bool) -> anyhow::Result<()> {
        match self {
            Enqueuer::Framework(q) => {
                let out = q.enqueue_many(ns.iter().map(|&n| Noop { n })).await?;
                ensure!(out.len() == ns.len());
            }
            Enqueuer::Baseline(p) => {
                baseline::enqueue_rows(p, ns, duplicates).await?;
            }
        }
        Ok(())
    }

    /// A probe job with `priority`, sent now.
    async fn probe(&self, n: u64, priority: i16) -> anyhow::Result<()> {
        let sent_us = now_us();
        match self {
            Enqueuer::Framework(q) => {
                let _ = q
                    .enqueue_with(
                        Probe { n, sent_us },
                        EnqueueOptions::default().priority(priority),
                    )
                    .await?;
            }
            Enqueuer::Baseline(p) => baseline::enqueue_probe(p, n, sent_us, priority).await?,
        }
        Ok(())
    }

    async fn close(self) {
        self.pool().close().await;
    }
}

/// Jobs per second of one enqueue case.
async fn enqueue_once(
    url: &str,
    admin: &MySqlPool,
    mode: Mode,
    case: EnqueueCase,
    sizes: &Sizes,
) -> anyhow::Result<Measured> {
    env::truncate(admin).await?;
    let jobs = case.jobs(sizes);
    if case.duplicates() {
        // Every even n exists already (the rows either mode writes are the same).
        let evens: Vec<u64> = (0..jobs).step_by(2).collect();
        for chunk in evens.chunks(1000) {
            baseline::enqueue_rows(admin, chunk, false).await?;
        }
    }
    let tasks = match case {
        EnqueueCase::SingleOne | EnqueueCase::Bulk | EnqueueCase::BulkDup => 1,
        EnqueueCase::SingleMany | EnqueueCase::SingleManyDup => 16,
    };
    let e = Enqueuer::open(url, mode, tasks).await?;
    let mut counters = MySqlConnection::connect(url).await?;
    let before = server_counters(&mut counters).await?;
    let began = Instant::now();
    match case {
        EnqueueCase::SingleOne | EnqueueCase::SingleMany | EnqueueCase::SingleManyDup => {
            let mut set = tokio::task::JoinSet::new();
            for t in 0..tasks {
                let e = e.clone();
                set.spawn(async move {
                    let mut new = 0u64;
                    for n in (u64::from(t)..jobs).step_by(tasks as usize) {
                        new += u64::from(e.one(n).await?);
                    }
                    anyhow::Ok(new)
                });
            }
            let mut new = 0;
            while let Some(r) = set.join_next().await {
                new += r??;
            }
            let expected = if case.duplicates() { jobs / 2 } else { jobs };
            ensure!(new == expected, "{new} new jobs, expected {expected}");
        }
        EnqueueCase::Bulk | EnqueueCase::BulkDup => {
            let all: Vec<u64> = (0..jobs).collect();
            for chunk in all.chunks(1000) {
                e.many(chunk, case.duplicates()).await?;
            }
        }
    }
    let secs = began.elapsed().as_secs_f64();
    let after = server_counters(&mut counters).await?;
    counters.close().await?;
    e.close().await;
    let rows: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM job_queue")
        .fetch_one(admin)
        .await?;
    ensure!(
        rows as u64 == jobs,
        "{rows} rows after enqueuing {jobs} jobs"
    );
    let per_job: BTreeMap<String, f64> = before
        .delta(&after)
        .into_iter()
        .map(|(k, v)| (k, v as f64 / jobs as f64))
        .collect();
    Ok(Measured {
        rate: jobs as f64 / secs,
        statements_per_job: per_job.get("Questions").copied().unwrap_or(0.0),
        fsyncs_per_job: per_job.get("Innodb_data_fsyncs").copied().unwrap_or(0.0),
        rss_kib: Vec::new(),
        per_claim: None,
        per_job,
        server_cpu_us: None,
        worker_cpu_us: 0.0,
    })
}

async fn enqueue(cx: &mut Ctx) -> anyhow::Result<Vec<Row>> {
    let url = cx.env.database("enqueue").await?;
    let admin = baseline::pool(&url, 2).await?;
    let cases = [
        EnqueueCase::SingleOne,
        EnqueueCase::SingleMany,
        EnqueueCase::Bulk,
        EnqueueCase::SingleManyDup,
        EnqueueCase::BulkDup,
    ];
    let mut results: Vec<[Vec<Measured>; 2]> =
        cases.iter().map(|_| [Vec::new(), Vec::new()]).collect();
    for run in 0..cx.runs {
        for (c, &case) in cases.iter().enumerate() {
            for mode in Mode::order(run) {
                let m = enqueue_once(&url, &admin, mode, case, &cx.sizes).await?;
                results[c][(mode == Mode::Baseline) as usize].push(m);
            }
        }
    }
    let mut rows = Vec::new();
    for (c, &case) in cases.iter().enumerate() {
        let [fw, base] = &results[c];
        let rates = |v: &[Measured]| v.iter().map(|m| m.rate).collect::<Vec<_>>();
        let mut row =
            Row::new("enqueue", case.label(&cx.sizes), "jobs/s").figures(rates(fw), rates(base));
        row = counter_notes(row, fw, base);
        row = match case {
            EnqueueCase::Bulk => row
                .target(TargetOn::Ratio, 0.8)
                .note("baseline", "one multi-row INSERT of 1,000 rows per call"),
            EnqueueCase::BulkDup => row.note(
                "baseline",
                "multi-row INSERT IGNORE (no ids back); framework returns New/Duplicate with ids",
            ),
            EnqueueCase::SingleManyDup => {
                row.note("baseline", "INSERT, on error 1062 SELECT the existing id")
            }
            _ => row.note("baseline", "plain single-row INSERT, autocommit"),
        };
        progress(&row);
        rows.push(row);
    }
    admin.close().await;
    Ok(rows)
}

// ---------------------------------------------------------------------------------------
// Trickle

/// Worker processes and slots of the trickle: a few workers claiming.
const TRICKLE_WORKERS: (usize, usize) = (4, 16);

/// The longest random gap between two enqueues of the trickle (about 200 a second).
const TRICKLE_GAP_US: u64 = 10_000;

/// The single-row `INSERT` of the minimal table.
const MINIMAL_INSERT: &str = "INSERT INTO job_queue \
    (task_key, payload, status, attempts, created_at, updated_at) \
    VALUES (?, ?, 'ready', 0, UTC_TIMESTAMP(6), UTC_TIMESTAMP(6))";

/// What one trickle measured: each enqueue's time (µs), the enqueues that deadlocked (and
/// were tried again), and the claimers' conflicts.
struct Trickled {
    enqueue_us: Vec<u64>,
    deadlocks: u64,
    conflicts: u64,
}

/// Workers of `mode` drain while `jobs` single-row enqueues arrive one at a time, from a
/// connection of their own (at READ COMMITTED, as every enqueuer's is here), at random gaps
/// of up to [`TRICKLE_GAP_US`]: the queue stays nearly empty, so every claim reads to the end
/// of the ready jobs, where the next enqueue's row goes. Each enqueue is timed.
async fn trickle_once(
    url: &str,
    admin: &MySqlPool,
    mode: Mode,
    jobs: u64,
) -> anyhow::Result<Trickled> {
    env::truncate(admin).await?;
    let enqueuer = match mode {
        Mode::Framework => Some(Enqueuer::open(url, mode, 1).await?),
        _ => None,
    };
    let pool = baseline::pool(url, 1).await?;
    let (procs, conc) = TRICKLE_WORKERS;
    let mut group = Group::start(url, mode, procs, conc, false).await?;
    group.go().await?;
    let mut enqueue_us = Vec::with_capacity(jobs as usize);
    let mut deadlocks = 0u64;
    let mut gaps = rand::rngs::StdRng::seed_from_u64(jobs);
    for n in 0..jobs {
        tokio::time::sleep(Duration::from_micros(gaps.gen_range(0..TRICKLE_GAP_US))).await;
        let began = Instant::now();
        // An enqueue that deadlocks with a claim (at REPEATABLE READ it can) is retried, as
        // an application would have to, and counted; its time includes the retries.
        loop {
            let tried: anyhow::Result<()> = match (&enqueuer, mode.minimal_table()) {
                (Some(e), _) => {
                    ensure!(e.one(n).await?, "job {n} was a duplicate");
                    Ok(())
                }
                (None, true) => sqlx::query(MINIMAL_INSERT)
                    .bind(jobs::noop_key(n))
                    .bind(jobs::noop_payload(n))
                    .execute(&pool)
                    .await
                    .map(drop)
                    .map_err(Into::into),
                (None, false) => baseline::enqueue_one(&pool, n).await.map(drop),
            };
            match tried {
                Ok(()) => break,
                Err(e)
                    if e.downcast_ref::<sqlx::Error>()
                        .and_then(baseline::code)
                        .is_some_and(|c| c == 1213) =>
                {
                    deadlocks += 1;
                }
                Err(e) => return Err(e),
            }
        }
        enqueue_us.push(began.elapsed().as_micros() as u64);
    }
    group
        .wait(|done, _| done >= jobs, Duration::from_secs(120))
        .await?;
    let results = group.stop().await?;
    pool.close().await;
    if let Some(e) = enqueuer {
        e.close().await;
    }
    let completed: u64 = results.iter().map(|r| r.completed).sum();
    ensure!(
        completed == jobs,
        "{mode:?} recorded {completed} jobs done for {jobs} enqueued"
    );
    Ok(Trickled {
        enqueue_us,
        deadlocks,
        conflicts: results
            .iter()
            .filter_map(|r| r.baseline.map(|b| b.conflicts))
            .sum(),
    })
}

/// The trickle: the time of a single-row enqueue into a nearly empty queue that workers
/// are draining, with the framework (READ COMMITTED), the hand-written loop on the
/// framework's table at both levels, and the loop on the minimal table at both levels.
/// At REPEATABLE READ a claim that reads to the end of the ready jobs holds a next-key lock
/// on the entry after them until it commits: the gap where the next job's row goes.
async fn trickle(cx: &mut Ctx) -> anyhow::Result<Vec<Row>> {
    let url = cx.env.database("trickle").await?;
    let admin = baseline::pool(&url, 2).await?;
    let min_url = cx.env.minimal_database("trickle_min").await?;
    let min_admin = baseline::pool(&min_url, 2).await?;
    let jobs = cx.sizes.trickle_jobs;
    let modes = [
        Mode::Framework,
        Mode::Baseline,
        Mode::BaselineRr,
        Mode::Minimal,
        Mode::MinimalRr,
        Mode::MinimalRrKey,
    ];
    // [mode] -> every run's enqueue times pooled, the claimers' conflicts, the deadlocked enqueues.
    let mut pooled: Vec<(Vec<u64>, u64, u64)> = modes.iter().map(|_| (Vec::new(), 0, 0)).collect();
    for run in 0..cx.runs {
        for i in 0..modes.len() {
            let k = (i + run as usize) % modes.len();
            let mode = modes[k];
            let (u, a) = if mode.minimal_table() {
                (&min_url, &min_admin)
            } else {
                (&url, &admin)
            };
            let t = trickle_once(u, a, mode, jobs).await?;
            eprintln!(
                "   run {run} {:<14} enqueue p50 {:>6.2} ms  p99 {:>7.2} ms  max {:>7.2} ms  enqueue deadlocks {}  claim conflicts {}",
                mode.as_str(),
                percentile(&t.enqueue_us, 50.0) / 1000.0,
                percentile(&t.enqueue_us, 99.0) / 1000.0,
                percentile(&t.enqueue_us, 100.0) / 1000.0,
                t.deadlocks,
                t.conflicts,
            );
            pooled[k].0.extend(t.enqueue_us);
            pooled[k].1 += t.conflicts;
            pooled[k].2 += t.deadlocks;
        }
    }
    let (procs, conc) = TRICKLE_WORKERS;
    let mut rows = Vec::new();
    for (p, label) in [(50.0, "p50"), (99.0, "p99"), (100.0, "max")] {
        let ms = |k: usize| vec![percentile(&pooled[k].0, p) / 1000.0];
        let row = Row::new(
            "trickle",
            format!(
                "single-row enqueue while {procs} x {conc} drain a nearly empty queue, {label}"
            ),
            "ms",
        )
        .lower_is_better()
        .figures(ms(0), ms(1))
        .minimal(ms(3))
        .minimal_rr(ms(4))
        .note(
            "baseline at REPEATABLE READ (framework's table)",
            format!("{:.2} ms", ms(2)[0]),
        )
        .note(
            "minimal at REPEATABLE READ claiming by key (gap-free)",
            format!("{:.2} ms", ms(5)[0]),
        )
        .note(
            "claim conflicts (deadlocks, lock wait timeouts) per run: base, base RR, min, min RR, min RR by key",
            format!(
                "{}, {}, {}, {}, {}",
                pooled[1].1 / u64::from(cx.runs),
                pooled[2].1 / u64::from(cx.runs),
                pooled[3].1 / u64::from(cx.runs),
                pooled[4].1 / u64::from(cx.runs),
                pooled[5].1 / u64::from(cx.runs)
            ),
        )
        .note(
            "enqueues that deadlocked with a claim (retried), all runs: fw, base, base RR, min, min RR, min RR by key",
            pooled
                .iter()
                .map(|p| p.2.to_string())
                .collect::<Vec<_>>()
                .join(", "),
        )
        .note(
            "enqueues",
            format!(
                "{jobs} per mode and run, one at a time, at random gaps of 0-{} ms, pooled over the runs",
                TRICKLE_GAP_US / 1000
            ),
        );
        progress(&row);
        rows.push(row);
    }
    admin.close().await;
    min_admin.close().await;
    Ok(rows)
}

// ---------------------------------------------------------------------------------------
// Latency

/// A worker in this process, for the in-process latencies.
enum Local {
    Framework(
        jobqueue::WorkerHandle,
        tokio::task::JoinHandle<jobqueue::Result<()>>,
    ),
    Baseline(
        watch::Sender<bool>,
        tokio::task::JoinHandle<anyhow::Result<baseline::LoopStats>>,
    ),
}

/// Probe latencies (µs) of one run: `probes` probes sent at random gaps of up to `gap_ms`,
/// with a backlog of no-op jobs being drained when `load`.
#[allow(clippy::too_many_arguments)]
async fn latency_once(
    url: &str,
    admin: &MySqlPool,
    mode: Mode,
    cross_process: bool,
    load: bool,
    probes: u64,
    gap_ms: u64,
    backlog: u64,
) -> anyhow::Result<(Vec<u64>, bool)> {
    env::truncate(admin).await?;
    if load {
        env::fill(admin, Rows::Ready, "load:", backlog).await?;
    }
    jobs::take_latencies();
    let enqueuer = Enqueuer::open(url, mode, 2).await?;
    let wake = Arc::new(Notify::new());
    let mut group = None;
    let mut local = None;
    if cross_process {
        let mut g = Group::start(url, mode, 1, 16, true).await?;
        g.go().await?;
        group = Some(g);
    } else {
        local = Some(match (&enqueuer, mode) {
            (Enqueuer::Framework(q), _) => {
                let worker = Worker::builder(q.clone())
                    .queues([QUEUE])
                    .concurrency(16)
                    .build()?;
                let handle = worker.handle();
                Local::Framework(handle, tokio::spawn(worker.run()))
            }
            (Enqueuer::Baseline(_), _) => {
                let (stop_tx, stop) = watch::channel(false);
                let lp = baseline::Loop {
                    pool: baseline::pool(url, 2).await?,
                    table: baseline::Table::Project,
                    batch: 16,
                    owner: format!("baseline-local:{}", std::process::id()),
                    poll: Duration::from_millis(50),
                    wake: Some(wake.clone()),
                    stop,
                    done: Arc::new(AtomicU64::new(0)),
                    latency: true,
                };
                Local::Baseline(stop_tx, tokio::spawn(baseline::run(lp)))
            }
        });
    }
    let priority = if load { -1 } else { 0 };
    if load {
        // Let the drain get going first.
        tokio::time::sleep(Duration::from_millis(300)).await;
    } else {
        // Let the worker go idle first.
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    for n in 0..probes {
        let gap = rand::thread_rng().gen_range(0..=gap_ms);
        tokio::time::sleep(Duration::from_millis(gap)).await;
        enqueuer.probe(n, priority).await?;
        wake.notify_one();
    }
    let deadline = Instant::now() + Duration::from_secs(60);
    let latencies = match (&mut group, &mut local) {
        (Some(g), _) => {
            g.wait(|_, p| p >= probes, Duration::from_secs(60)).await?;
            let g = group.take().expect("set above");
            g.stop()
                .await?
                .into_iter()
                .flat_map(|r| r.latencies_us)
                .collect()
        }
        (None, Some(_)) => {
            while jobs::probes_seen() < probes {
                if Instant::now() > deadline {
                    bail!("only {} of {probes} probes started", jobs::probes_seen());
                }
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
            match local.take().expect("set above") {
                Local::Framework(handle, running) => {
                    handle.shutdown();
                    running.await??;
                }
                Local::Baseline(stop, running) => {
                    let _ = stop.send(true);
                    running.await??;
                }
            }
            jobs::take_latencies()
        }
        (None, None) => unreachable!(),
    };
    enqueuer.close().await;
    ensure!(
        latencies.len() as u64 == probes,
        "{} latencies for {probes} probes",
        latencies.len()
    );
    // Under load: was the backlog still there when the last probe started?
    let held = if load {
        let left: i64 = sqlx::query_scalar(
            "SELECT COUNT(*) FROM job_queue WHERE status = 'ready' AND task_key LIKE 'load:%'",
        )
        .fetch_one(admin)
        .await?;
        left > 0
    } else {
        true
    };
    Ok((latencies, held))
}

async fn latency(cx: &mut Ctx) -> anyhow::Result<Vec<Row>> {
    let url = cx.env.database("latency").await?;
    let admin = baseline::pool(&url, 2).await?;
    let s = &cx.sizes;
    // (cross-process, under load)
    let cases = [(false, false), (true, false), (false, true), (true, true)];
    let mut samples: Vec<[Vec<Vec<u64>>; 2]> =
        cases.iter().map(|_| [Vec::new(), Vec::new()]).collect();
    let mut load_held = true;
    for run in 0..cx.runs {
        for (c, &(cross, load)) in cases.iter().enumerate() {
            for mode in Mode::order(run) {
                let (probes, gap) = if load {
                    (s.probes_load, s.load_gap_ms)
                } else {
                    (s.probes_idle, s.idle_gap_ms)
                };
                let (lat, held) =
                    latency_once(&url, &admin, mode, cross, load, probes, gap, s.load_backlog)
                        .await?;
                load_held &= held;
                samples[c][(mode == Mode::Baseline) as usize].push(lat);
            }
        }
    }
    let mut rows = Vec::new();
    for (c, &(cross, load)) in cases.iter().enumerate() {
        let [fw, base] = &samples[c];
        let label = format!(
            "{}, {}",
            if cross {
                "other process (polling)"
            } else {
                "in-process (woken by enqueue)"
            },
            if load { "under load" } else { "idle queue" },
        );
        for p in [50.0, 99.0] {
            let fig = |runs: &[Vec<u64>]| {
                let pooled: Vec<u64> = runs.iter().flatten().copied().collect();
                Some(Figure {
                    value: percentile(&pooled, p) / 1000.0,
                    runs: runs.iter().map(|r| percentile(r, p) / 1000.0).collect(),
                })
            };
            let mut row = Row::new("latency", format!("{label}, p{p:.0}"), "ms")
                .lower_is_better()
                .with(fig(fw), fig(base));
            if p == 50.0 {
                let n: usize = fw.iter().map(Vec::len).sum();
                row = row.note(
                    "setup",
                    format!(
                        "{n} probes per mode, sent at random gaps of 0-{} ms{}; baseline polls every 50 ms, framework backs off 50 ms to 2 s",
                        if load { s.load_gap_ms } else { s.idle_gap_ms },
                        if load {
                            format!(
                                ", priority -1, ahead of a backlog of {} no-op jobs being drained{}",
                                thousands(s.load_backlog as f64),
                                if load_held { "" } else { " (the backlog ran out before the last probe in some run)" }
                            )
                        } else {
                            String::new()
                        }
                    ),
                );
            }
            progress(&row);
            rows.push(row);
        }
    }
    admin.close().await;
    Ok(rows)
}

// ---------------------------------------------------------------------------------------
// Scale

async fn scale(cx: &mut Ctx) -> anyhow::Result<Vec<Row>> {
    let empty_url = cx.env.database("scale_empty").await?;
    let history_url = cx.env.database("scale_history").await?;
    let empty = baseline::pool(&empty_url, 2).await?;
    let history = baseline::pool(&history_url, 2).await?;
    let s = &cx.sizes;
    let began = Instant::now();
    env::fill(&history, Rows::Done, "hist:", s.history_done).await?;
    env::fill(&history, Rows::Scheduled, "sched:", s.history_scheduled).await?;
    sqlx::raw_sql("ANALYZE TABLE job_queue")
        .execute(&history)
        .await?;
    let fill_secs = began.elapsed().as_secs_f64();
    eprintln!(
        "   filled {} done and {} scheduled rows in {fill_secs:.1} s",
        thousands(s.history_done as f64),
        thousands(s.history_scheduled as f64)
    );
    let plan = claim_plan(&history)
        .await
        .unwrap_or_else(|e| format!("EXPLAIN failed: {e}"));
    let jobs = s.drain_jobs;
    warm_up(&empty_url, &empty, jobs).await?;
    warm_up(&history_url, &history, jobs).await?;
    // [table][mode]
    let mut results: [[Vec<Measured>; 2]; 2] = Default::default();
    for run in 0..cx.runs {
        let tables = if run % 2 == 0 { [0, 1] } else { [1, 0] };
        for t in tables {
            for mode in Mode::order(run) {
                let (url, pool) = if t == 0 {
                    (&empty_url, &empty)
                } else {
                    (&history_url, &history)
                };
                let prefix = format!("s{run}{}:", mode.as_str());
                let d = drain_once(url, pool, mode, 1, 16, jobs, &prefix, t == 0).await?;
                eprintln!(
                    "   run {run} {} {:<9} {:>8} jobs/s",
                    if t == 0 { "empty  " } else { "history" },
                    mode.as_str(),
                    thousands(d.rate)
                );
                results[t][(mode == Mode::Baseline) as usize].push(d);
            }
        }
    }
    let rates = |v: &[Measured]| v.iter().map(|d| d.rate).collect::<Vec<_>>();
    let mut rows = Vec::new();
    let history_label = format!(
        "{} done + {} scheduled rows",
        thousands(s.history_done as f64),
        thousands(s.history_scheduled as f64)
    );
    for (t, label) in [(0, "empty table".to_owned()), (1, history_label.clone())] {
        let [fw, base] = &results[t];
        let row = Row::new(
            "scale",
            format!("drain {} jobs, 1 x 16, {label}", thousands(jobs as f64)),
            "jobs/s",
        )
        .figures(rates(fw), rates(base));
        let row = counter_notes(row, fw, base);
        progress(&row);
        rows.push(row);
    }
    let ratio = |m: usize| {
        let e = median(&rates(&results[0][m]));
        let h = median(&rates(&results[1][m]));
        Figure::of(vec![if e > 0.0 { h / e } else { 0.0 }])
    };
    let mut row = Row::new("scale", format!("history / empty ({history_label})"), "x")
        .with(ratio(0), ratio(1));
    row.ratio = None;
    let row = row
        .target(TargetOn::Framework, 0.8)
        .note("plain claim SELECT plan on the large table", plan)
        .note("fill", format!("{fill_secs:.1} s"));
    progress(&row);
    rows.push(row);
    empty.close().await;
    history.close().await;
    Ok(rows)
}

/// What the server plans for the baseline's claim (no index hint) on the large table.
async fn claim_plan(pool: &MySqlPool) -> anyhow::Result<String> {
    let row = sqlx::query(
        "EXPLAIN SELECT id, payload FROM job_queue WHERE queue = ? AND status = 'ready' \
         ORDER BY priority, id LIMIT 16 FOR UPDATE SKIP LOCKED",
    )
    .bind(QUEUE)
    .fetch_one(pool)
    .await?;
    use sqlx::{Column as _, Row as _};
    let mut parts = Vec::new();
    for (i, col) in row.columns().iter().enumerate() {
        if ["type", "key", "rows", "Extra"].contains(&col.name()) {
            let v = match row.try_get::<Option<String>, _>(i) {
                Ok(v) => v.unwrap_or_else(|| "NULL".into()),
                Err(_) => row
                    .try_get::<Option<i64>, _>(i)
                    .ok()
                    .flatten()
                    .map_or_else(|| crate::measure::text(&row, i), |n| n.to_string()),
            };
            parts.push(format!("{}={v}", col.name()));
        }
    }
    Ok(parts.join(" "))
}

// ---------------------------------------------------------------------------------------
// Dashboard

async fn dashboard(cx: &mut Ctx) -> anyhow::Result<Vec<Row>> {
    let url = cx.env.database("dashboard").await?;
    let admin = baseline::pool(&url, 2).await?;
    let rows = crate::dashboard::run(&url, &admin, &cx.sizes.dashboard, cx.runs).await;
    admin.close().await;
    rows
}

// ---------------------------------------------------------------------------------------
// Resources

async fn resources(cx: &mut Ctx) -> anyhow::Result<Vec<Row>> {
    let url = cx.env.database("resources").await?;
    let admin = baseline::pool(&url, 2).await?;
    let jobs = cx.sizes.rss_jobs;
    let mut drained: [Vec<Measured>; 2] = Default::default();
    for run in 0..cx.runs {
        for mode in Mode::order(run) {
            let prefix = format!("m{run}{}:", mode.as_str());
            let d = drain_once(&url, &admin, mode, 1, 64, jobs, &prefix, true).await?;
            drained[(mode == Mode::Baseline) as usize].push(d);
        }
    }
    let mut rows = Vec::new();
    let rss = |v: &[Measured]| {
        v.iter()
            .map(|d| d.rss_kib.iter().copied().max().unwrap_or(0) as f64 / 1024.0)
            .collect::<Vec<_>>()
    };
    let row = Row::new(
        "resources",
        format!(
            "peak RSS of a worker process, concurrency 64, {} jobs",
            thousands(jobs as f64)
        ),
        "MiB",
    )
    .lower_is_better()
    .figures(rss(&drained[0]), rss(&drained[1]))
    .note("source", "VmHWM of /proc/<pid>/status after the drain");
    progress(&row);
    rows.push(row);
    let row = Row::new(
        "resources",
        "drain throughput at concurrency 64, 1 process",
        "jobs/s",
    )
    .figures(
        drained[0].iter().map(|d| d.rate).collect(),
        drained[1].iter().map(|d| d.rate).collect(),
    );
    let row = counter_notes(row, &drained[0], &drained[1]);
    progress(&row);
    rows.push(row);

    // Idle: one worker, empty queue, nothing else connected.
    admin.close().await;
    let mut qps: [f64; 2] = [0.0; 2];
    let mut breakdown: [String; 2] = Default::default();
    for mode in Mode::order(0) {
        let admin = baseline::pool(&url, 1).await?;
        env::truncate(&admin).await?;
        admin.close().await;
        let mut counters = MySqlConnection::connect(&url).await?;
        let mut group = Group::start(&url, mode, 1, 16, false).await?;
        group.go().await?;
        tokio::time::sleep(cx.sizes.idle_warmup).await;
        let before = server_counters(&mut counters).await?;
        let began = Instant::now();
        tokio::time::sleep(cx.sizes.idle_window).await;
        let after = server_counters(&mut counters).await?;
        let secs = began.elapsed().as_secs_f64();
        group.stop().await?;
        counters.close().await?;
        let delta = before.delta(&after);
        let i = (mode == Mode::Baseline) as usize;
        qps[i] = delta.get("Questions").copied().unwrap_or(0) as f64 / secs;
        breakdown[i] = delta
            .iter()
            .filter(|(k, v)| k.starts_with("Com_") && **v > 0)
            .map(|(k, v)| format!("{} {:.1}/s", k.trim_start_matches("Com_"), *v as f64 / secs))
            .collect::<Vec<_>>()
            .join(", ");
    }
    let row = Row::new(
        "resources",
        format!(
            "queries/s sent by an idle worker ({:.0} s window after {:.0} s idle)",
            cx.sizes.idle_window.as_secs_f64(),
            cx.sizes.idle_warmup.as_secs_f64()
        ),
        "queries/s",
    )
    .lower_is_better()
    .figures(vec![qps[0]], vec![qps[1]])
    .note("framework", breakdown[0].clone())
    .note("baseline (fixed 50 ms poll)", breakdown[1].clone())
    .note("source", "server Questions delta (its own SHOW excluded); framework defaults: poll backs off to 2 s, maintenance every 1 s");
    progress(&row);
    rows.push(row);
    Ok(rows)
}
