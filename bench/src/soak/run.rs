//! The run: a server and a database, the worker processes, a producer and the faults for
//! the given time, a drain, the checks and the summary.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::Context as _;
use jobqueue::testing::TestServer;
use jobqueue::{Enqueued, Job, Queue, QueueConfig};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use sqlx::{Connection as _, MySqlConnection, MySqlPool};

use crate::checks::{self, clock, Check, Stats};
use crate::fleet::{self, Fleet};
use crate::jobs::{self, ACCOUNTS, INITIAL_BALANCE, TABLES};
use crate::RunArgs;

/// Microseconds since 2000-01-01 UTC: the unit of every time the checks compare (the
/// server's `UTC_TIMESTAMP(6)`, and this process's clock for the faults, the same clock on
/// a throwaway server).
pub(crate) type Us = i64;

/// This process's clock, in [`Us`].
fn now_us() -> Us {
    const Y2K: i64 = 946_684_800_000_000;
    let unix = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_micros() as i64)
        .unwrap_or(0);
    unix - Y2K
}

/// The durable setting the benchmark uses too (a flush of the redo log at every commit),
/// before any the user sets in `JOBQUEUE_TEST_SERVER_ARGS`.
pub(crate) fn prefer_durable_server_settings() {
    let user = std::env::var("JOBQUEUE_TEST_SERVER_ARGS").unwrap_or_default();
    std::env::set_var(
        "JOBQUEUE_TEST_SERVER_ARGS",
        format!("--innodb-flush-log-at-trx-commit=1 {user}").trim(),
    );
}

/// The longest a single lease of the soak's kinds lasts, ms.
const LEASE_MS: u64 = 4000;
/// How long the drain may take before the run gives up on it.
const DRAIN_PATIENCE: Duration = Duration::from_secs(180);

/// What a fault did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum FaultKind {
    Kill,
    Freeze,
    RowLock,
    ServerRestart,
}

impl FaultKind {
    pub(crate) fn name(self) -> &'static str {
        match self {
            FaultKind::Kill => "worker SIGKILLed and restarted",
            FaultKind::Freeze => "worker SIGSTOPped past its lease, then SIGCONTed",
            FaultKind::RowLock => "job row locked by a foreign session",
            FaultKind::ServerRestart => "database server stopped and started",
        }
    }
}

/// One fault, from when it began to when it was undone.
#[derive(Debug, Clone)]
pub(crate) struct FaultRecord {
    pub(crate) kind: FaultKind,
    pub(crate) start: Us,
    pub(crate) end: Us,
    pub(crate) detail: String,
}

/// What the producer enqueued, per kind.
#[derive(Debug, Default)]
struct Counts {
    new: u64,
    duplicates: u64,
    errors: u64,
    bulk_calls: u64,
}

#[derive(Debug, Default)]
struct Produced {
    per_kind: BTreeMap<&'static str, Counts>,
    /// Every id an enqueue returned (new, or the holder of a duplicate key).
    acknowledged: Vec<(&'static str, u64)>,
    last_error: Option<String>,
}

impl Produced {
    fn record(&mut self, kind: &'static str, result: jobqueue::Result<Vec<Enqueued>>, bulk: bool) {
        let counts = self.per_kind.entry(kind).or_default();
        counts.bulk_calls += u64::from(bulk);
        match result {
            Ok(all) => {
                for e in all {
                    match e {
                        Enqueued::New(_) => counts.new += 1,
                        Enqueued::Duplicate { .. } => counts.duplicates += 1,
                    }
                    self.acknowledged.push((kind, e.id()));
                }
            }
            Err(e) => {
                counts.errors += 1;
                self.last_error = Some(e.to_string());
            }
        }
    }
}

async fn one<J: Job>(queue: &Queue, produced: &mut Produced, job: J) {
    let result = queue.enqueue(job).await.map(|e| vec![e]);
    produced.record(J::KIND, result, false);
}

async fn many<J: Job>(queue: &Queue, produced: &mut Produced, jobs: Vec<J>) {
    let result = queue.enqueue_many(jobs).await;
    produced.record(J::KIND, result, true);
}

/// Enqueues the mixed load until `until`: about 25 new jobs a second, some in bulk, and
/// duplicates of the keys with a uniqueness policy.
async fn produce(queue: Queue, until: Instant) -> Produced {
    let mut rng = StdRng::from_entropy();
    let mut p = Produced::default();
    let mut n: u64 = 0;
    let mut transfer_id: u64 = 0;
    let mut reports: Vec<u64> = Vec::new();
    let mut tick = tokio::time::interval(Duration::from_millis(100));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut round: u64 = 0;
    while Instant::now() < until {
        tick.tick().await;
        round += 1;
        let q = &queue;
        let mut next = || {
            n += 1;
            n
        };
        if rng.gen_bool(0.4) {
            let job = jobs::Plain {
                n: next(),
                ms: rng.gen_range(10..300),
                stubborn: rng.gen_bool(0.5),
            };
            one(q, &mut p, job).await;
        }
        if round % 50 == 0 {
            let batch: Vec<jobs::Plain> = (0..40)
                .map(|_| jobs::Plain {
                    n: next(),
                    ms: rng.gen_range(10..100),
                    stubborn: rng.gen_bool(0.5),
                })
                .collect();
            many(q, &mut p, batch).await;
        }
        if rng.gen_bool(0.2) {
            let fail_first = [0, 0, 1, 2, 4][rng.gen_range(0..5)];
            let job = jobs::Flaky {
                n: next(),
                fail_first,
                permanent: rng.gen_bool(0.1),
                ms: rng.gen_range(10..200),
            };
            one(q, &mut p, job).await;
        }
        if rng.gen_bool(0.1) {
            let job = jobs::Snoozer {
                n: next(),
                snoozes: rng.gen_range(1..=2),
            };
            one(q, &mut p, job).await;
        }
        if rng.gen_bool(0.1) {
            let job = jobs::ExportA {
                n: next(),
                acct: rng.gen_range(0..4),
                ms: rng.gen_range(100..800),
                stubborn: rng.gen_bool(0.5),
            };
            one(q, &mut p, job).await;
        }
        if rng.gen_bool(0.1) {
            let job = jobs::ExportB {
                n: next(),
                acct: rng.gen_range(0..4),
                ms: rng.gen_range(100..800),
                stubborn: rng.gen_bool(0.5),
            };
            one(q, &mut p, job).await;
        }
        if rng.gen_bool(0.05) {
            let job = jobs::Long {
                n: next(),
                acct: rng.gen_range(0..4),
                ms: rng.gen_range(3000..8000),
                stubborn: rng.gen_bool(0.5),
            };
            one(q, &mut p, job).await;
        }
        if rng.gen_bool(0.1) {
            let job = jobs::MailA {
                n: next(),
                provider: format!("p{}", rng.gen_range(0..2)),
                fail_first: rng.gen_range(0..2),
            };
            one(q, &mut p, job).await;
        }
        if rng.gen_bool(0.1) {
            let job = jobs::MailB {
                n: next(),
                provider: format!("p{}", rng.gen_range(0..2)),
            };
            one(q, &mut p, job).await;
        }
        if rng.gen_bool(0.2) {
            let job = jobs::SyncAccount {
                acct: rng.gen_range(0..5),
                ms: rng.gen_range(200..1500),
                stubborn: rng.gen_bool(0.5),
            };
            one(q, &mut p, job).await;
        }
        if rng.gen_bool(0.2) {
            let job = jobs::Refresh {
                item: rng.gen_range(0..8),
                ms: rng.gen_range(20..200),
            };
            one(q, &mut p, job).await;
        }
        if rng.gen_bool(0.1) {
            let n = if !reports.is_empty() && rng.gen_bool(0.3) {
                reports[rng.gen_range(0..reports.len())]
            } else {
                let n = next();
                reports.push(n);
                n
            };
            one(q, &mut p, jobs::Report { n }).await;
        }
        let mut transfer = |rng: &mut StdRng| {
            transfer_id += 1;
            let from = rng.gen_range(1..=ACCOUNTS);
            let to = (from + rng.gen_range(1..ACCOUNTS) - 1) % ACCOUNTS + 1;
            jobs::Transfer {
                transfer_id,
                from,
                to,
                amount: rng.gen_range(1..1000),
                lose_first: rng.gen_bool(0.1),
            }
        };
        if rng.gen_bool(0.15) {
            let job = transfer(&mut rng);
            one(q, &mut p, job).await;
        }
        if round % 100 == 0 {
            let batch: Vec<jobs::Transfer> = (0..10).map(|_| transfer(&mut rng)).collect();
            many(q, &mut p, batch).await;
        }
    }
    p
}

/// Injects faults until `until`: one at a time, a few seconds apart, a row lock now and
/// then on the side, and the server restart once (a throwaway server only), at 40 % of
/// the time. Workers that exit on their own are restarted (and noted).
async fn inject(
    fleet: &mut Fleet,
    server: Option<Arc<TestServer>>,
    url: String,
    began: Instant,
    until: Instant,
) -> anyhow::Result<Vec<FaultRecord>> {
    let mut rng = StdRng::from_entropy();
    let log: Arc<Mutex<Vec<FaultRecord>>> = Arc::default();
    let restart_at = began + (until - began).mul_f64(0.4);
    let mut restarted = server.is_none();
    let mut locks = Vec::new();
    loop {
        // A pause of 3-9 s between faults, watching the workers meanwhile.
        let pause = Instant::now() + Duration::from_millis(rng.gen_range(3000..9000));
        while Instant::now() < pause.min(until) {
            fleet.restart_exited()?;
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
        if Instant::now() >= until {
            break;
        }
        let start = now_us();
        if !restarted && Instant::now() >= restart_at {
            restarted = true;
            let server = server.clone().context("a server to restart")?;
            println!("[{}] fault: stopping the database server", clock(start));
            let s = server.clone();
            tokio::task::spawn_blocking(move || s.stop()).await??;
            tokio::time::sleep(Duration::from_secs(3)).await;
            tokio::task::spawn_blocking(move || server.restart()).await??;
            let end = now_us();
            note(
                &log,
                FaultRecord {
                    kind: FaultKind::ServerRestart,
                    start,
                    end,
                    detail: format!("down {:.1} s", (end - start) as f64 / 1e6),
                },
            );
            continue;
        }
        let slot = rng.gen_range(0..fleet.len());
        match rng.gen_range(0..3) {
            0 => {
                let pid = fleet.kill(slot).await?;
                tokio::time::sleep(Duration::from_millis(rng.gen_range(500..3000))).await;
                let new = fleet.spawn(slot)?;
                note(
                    &log,
                    FaultRecord {
                        kind: FaultKind::Kill,
                        start,
                        end: now_us(),
                        detail: format!("slot {slot}: pid {pid:?} killed, pid {new} started"),
                    },
                );
            }
            1 => {
                let Some(pid) = fleet.pid(slot) else {
                    continue;
                };
                fleet::signal(pid, "STOP")?;
                // Past the lease (and its reclaim, which needs a maintenance pass).
                let frozen = LEASE_MS * 3 / 2 + rng.gen_range(0..2000);
                tokio::time::sleep(Duration::from_millis(frozen)).await;
                fleet::signal(pid, "CONT")?;
                note(
                    &log,
                    FaultRecord {
                        kind: FaultKind::Freeze,
                        start,
                        end: now_us(),
                        detail: format!("slot {slot}: pid {pid} frozen {frozen} ms"),
                    },
                );
            }
            _ => {
                let hold = Duration::from_millis(rng.gen_range(2000..6000));
                let running = rng.gen_bool(0.8);
                let url = url.clone();
                let log = log.clone();
                locks.push(tokio::spawn(async move {
                    match lock_a_row(&url, running, hold).await {
                        Ok(Some(detail)) => note(
                            &log,
                            FaultRecord {
                                kind: FaultKind::RowLock,
                                start,
                                end: now_us(),
                                detail,
                            },
                        ),
                        Ok(None) => {}
                        Err(e) => eprintln!("row lock not taken: {e:#}"),
                    }
                }));
            }
        }
    }
    for lock in locks {
        lock.await?;
    }
    fleet.restart_exited()?;
    let mut records = std::mem::take(&mut *log.lock().expect("not poisoned"));
    records.sort_by_key(|r| r.start);
    Ok(records)
}

/// Prints a fault as it ends, for the timeline, and keeps it for the checks.
fn note(log: &Mutex<Vec<FaultRecord>>, fault: FaultRecord) {
    println!(
        "[{}] fault: {} since {}: {}",
        clock(fault.end),
        fault.kind.name(),
        clock(fault.start),
        fault.detail
    );
    log.lock().expect("not poisoned").push(fault);
}

/// Locks one running (or ready) job's row for `hold` in a session of its own, as an
/// operator's or an application's long transaction would; returns which.
async fn lock_a_row(url: &str, running: bool, hold: Duration) -> anyhow::Result<Option<String>> {
    let mut conn = MySqlConnection::connect(url).await?;
    sqlx::query("SET SESSION innodb_lock_wait_timeout = 2")
        .execute(&mut conn)
        .await?;
    let status = if running { "running" } else { "ready" };
    // The running job claimed first is most likely a long one, whose lease is then lost
    // while its process runs on.
    let id: Option<u64> = sqlx::query_scalar(
        "SELECT id FROM job_queue WHERE status = ? ORDER BY claimed_at, RAND() LIMIT 1",
    )
    .bind(status)
    .fetch_optional(&mut conn)
    .await?;
    let Some(id) = id else {
        return Ok(None);
    };
    let mut tx = conn.begin().await?;
    let locked: Vec<u64> = sqlx::query_scalar("SELECT id FROM job_queue WHERE id = ? FOR UPDATE")
        .bind(id)
        .fetch_all(&mut *tx)
        .await?;
    tokio::time::sleep(hold).await;
    tx.rollback().await?;
    conn.close().await?;
    Ok((!locked.is_empty()).then(|| format!("job {id} ({status}) locked {} ms", hold.as_millis())))
}

/// Jobs not yet done, failed or cancelled, by status.
async fn unfinished(pool: &MySqlPool) -> anyhow::Result<BTreeMap<String, i64>> {
    let rows: Vec<(String, i64)> = sqlx::query_as(
        "SELECT CAST(status AS CHAR), COUNT(*) FROM job_queue \
         WHERE status NOT IN ('done', 'failed', 'cancelled') GROUP BY status",
    )
    .fetch_all(pool)
    .await?;
    Ok(rows.into_iter().collect())
}

/// The server and database of the run.
struct Place {
    server: Option<Arc<TestServer>>,
    /// The server's URL, without a database.
    server_url: String,
    database: String,
    url: String,
}

async fn place(args: &RunArgs) -> anyhow::Result<Place> {
    let (server, server_url) = match &args.database_url {
        Some(url) => (None, url.clone()),
        None => {
            println!("no --database-url: starting a throwaway database server...");
            let server = tokio::task::spawn_blocking(TestServer::start).await??;
            let url = server.url().to_owned();
            (Some(Arc::new(server)), url)
        }
    };
    let database = format!("jqsoak_{}", std::process::id());
    let server_url = without_database(&server_url);
    let mut conn = MySqlConnection::connect(&server_url).await?;
    sqlx::raw_sql(&format!(
        "DROP DATABASE IF EXISTS `{database}`; CREATE DATABASE `{database}` CHARACTER SET utf8mb4"
    ))
    .execute(&mut conn)
    .await
    .with_context(|| format!("cannot create the database {database}"))?;
    conn.close().await?;
    let url = with_database(&server_url, &database);
    Ok(Place {
        server,
        server_url,
        database,
        url,
    })
}

/// `url` with its database part set to `name` (any `?options` kept).
fn with_database(url: &str, name: &str) -> String {
    let (head, options) = url.split_at(url.find('?').unwrap_or(url.len()));
    let host_start = head.find("://").map_or(0, |i| i + 3);
    let host_end = head[host_start..]
        .find('/')
        .map_or(head.len(), |i| host_start + i);
    format!("{}/{name}{options}", &head[..host_end])
}

/// `url` without its database part.
fn without_database(url: &str) -> String {
    with_database(url, "")
}

/// Runs the soak; returns whether every invariant held.
pub(crate) async fn run(args: RunArgs) -> anyhow::Result<bool> {
    let began = Instant::now();
    let place = place(&args).await?;
    let queue = Queue::connect_with(
        &place.url,
        QueueConfig::default().acquire_timeout(Duration::from_secs(2)),
    )
    .await?;
    queue.migrate().await?;
    for table in TABLES {
        sqlx::raw_sql(table)
            .execute(queue.mysql_pool().unwrap())
            .await?;
    }
    let accounts: Vec<String> = (1..=ACCOUNTS)
        .map(|a| format!("({a}, {INITIAL_BALANCE})"))
        .collect();
    sqlx::raw_sql(&format!(
        "INSERT INTO soak_account (id, balance) VALUES {}",
        accounts.join(", ")
    ))
    .execute(queue.mysql_pool().unwrap())
    .await?;

    let load = Duration::from_secs_f64(args.minutes * 60.0);
    println!(
        "soak: {} worker processes x {} slots, {:.1} min of load and faults, database {} \
         (worker logs in {})",
        args.workers,
        args.concurrency,
        args.minutes,
        place.database,
        args.log_dir.display()
    );
    let mut fleet = Fleet::start(
        &place.url,
        args.workers.into(),
        args.concurrency.into(),
        args.log_dir.clone(),
    )?;
    let load_began = Instant::now();
    let until = load_began + load;
    let producer = tokio::spawn(produce(queue.clone(), until));
    let progress = tokio::spawn(report_progress(queue.mysql_pool().unwrap().clone(), until));
    let faults = inject(
        &mut fleet,
        place.server.clone(),
        place.url.clone(),
        load_began,
        until,
    )
    .await;
    let produced = producer.await?;
    progress.abort();
    let faults = faults?;

    // The drain: the load's workers stop (their running jobs are handed back), and fresh
    // ones that enqueue no more ticks run what is left.
    println!(
        "[{}] load over; stopping the workers and draining without new ticks",
        clock(now_us())
    );
    let drain_began = Instant::now();
    fleet.stop_all(Duration::from_secs(30)).await?;
    fleet.periodic = false;
    for slot in 0..fleet.len() {
        fleet.spawn(slot)?;
    }
    let mut left = unfinished(queue.mysql_pool().unwrap()).await?;
    while !left.is_empty() && drain_began.elapsed() < DRAIN_PATIENCE {
        tokio::time::sleep(Duration::from_secs(1)).await;
        fleet.restart_exited()?;
        left = unfinished(queue.mysql_pool().unwrap()).await?;
    }
    fleet.stop_all(Duration::from_secs(30)).await?;
    println!(
        "[{}] drained in {:.1} s{}",
        clock(now_us()),
        drain_began.elapsed().as_secs_f64(),
        if left.is_empty() {
            String::new()
        } else {
            format!(", giving up with {left:?} left")
        }
    );

    let run = checks::Run {
        acknowledged: &produced.acknowledged,
        faults: &faults,
    };
    let (checks, stats) = checks::check_all(queue.mysql_pool().unwrap(), &run).await?;
    let pass = checks.iter().all(|c| c.pass);
    print_summary(
        &produced,
        &faults,
        &fleet.unexpected_exits,
        &stats,
        &checks,
        began.elapsed(),
    );

    queue.mysql_pool().unwrap().close().await;
    if args.keep && place.server.is_none() {
        println!("database {} kept", place.database);
    } else if place.server.is_none() {
        let mut conn = MySqlConnection::connect(&place.server_url).await?;
        sqlx::raw_sql(&format!("DROP DATABASE IF EXISTS `{}`", place.database))
            .execute(&mut conn)
            .await?;
        conn.close().await?;
    }
    if let Some(server) = place.server {
        // The last handle: stops the server and removes its folder.
        tokio::task::spawn_blocking(move || drop(server)).await?;
    }
    Ok(pass)
}

/// A line every 30 s: what the table holds.
async fn report_progress(pool: MySqlPool, until: Instant) {
    loop {
        tokio::time::sleep(Duration::from_secs(30)).await;
        if Instant::now() >= until {
            return;
        }
        let counts: Result<Vec<(String, i64)>, _> =
            sqlx::query_as("SELECT CAST(status AS CHAR), COUNT(*) FROM job_queue GROUP BY status")
                .fetch_all(&pool)
                .await;
        match counts {
            Ok(counts) => {
                let text: Vec<String> = counts.iter().map(|(s, n)| format!("{s} {n}")).collect();
                println!("[{}] jobs: {}", clock(now_us()), text.join(", "));
            }
            Err(e) => println!("[{}] jobs: cannot count ({e})", clock(now_us())),
        }
    }
}

fn print_summary(
    produced: &Produced,
    faults: &[FaultRecord],
    unexpected_exits: &[String],
    stats: &Stats,
    checks: &[Check],
    wall: Duration,
) {
    println!();
    println!("== jobs enqueued by the producer (new / duplicate / failed calls; bulk calls)");
    for (kind, c) in &produced.per_kind {
        println!(
            "  {kind:<16} {:>7} new {:>7} dup {:>5} err {:>5} bulk",
            c.new, c.duplicates, c.errors, c.bulk_calls
        );
    }
    if let Some(e) = &produced.last_error {
        println!("  last enqueue error: {e}");
    }
    println!("== final status per kind (periodic ticks included)");
    for (kind, statuses) in &stats.statuses {
        let text: Vec<String> = statuses.iter().map(|(s, n)| format!("{s} {n}")).collect();
        println!("  {kind:<16} {}", text.join(", "));
    }
    println!("== faults injected");
    let mut per_kind: BTreeMap<FaultKind, usize> = BTreeMap::new();
    for f in faults {
        *per_kind.entry(f.kind).or_default() += 1;
    }
    for (kind, n) in &per_kind {
        println!("  {n:>4}  {}", kind.name());
    }
    for f in faults.iter().filter(|f| f.kind == FaultKind::ServerRestart) {
        println!(
            "        server restart {} .. {} ({})",
            clock(f.start),
            clock(f.end),
            f.detail
        );
    }
    for e in unexpected_exits {
        println!("  note: {e}");
    }
    println!("== reruns");
    println!(
        "  {} jobs, {} claims; {} jobs claimed more than once; {} jobs with an expired lease",
        stats.jobs, stats.claims, stats.rerun_jobs, stats.expired_jobs
    );
    let outcomes: Vec<String> = stats
        .outcomes
        .iter()
        .map(|(o, n)| format!("{o} {n}"))
        .collect();
    println!("  attempt outcomes: {}", outcomes.join(", "));
    println!(
        "  {} bodies ran, {} stopped before the end of their work ({} of them ignoring \
         cancellation, stopped by the runtime when their lease was lost)",
        stats.bodies, stats.unfinished_bodies, stats.stubborn_stopped
    );
    let causes: Vec<String> = stats
        .failure_causes
        .iter()
        .map(|(c, n)| format!("{c} {n}"))
        .collect();
    println!("  failed jobs by cause: {}", causes.join(", "));
    println!("== wall time {:.1} min", wall.as_secs_f64() / 60.0);
    println!("== invariants");
    for c in checks {
        println!(
            "  {}  {}: {}",
            if c.pass { "PASS" } else { "FAIL" },
            c.name,
            c.summary
        );
        for line in &c.evidence {
            println!("        {line}");
        }
        if c.violations > c.evidence.len() {
            println!("        ... {} more", c.violations - c.evidence.len());
        }
    }
    let failed = checks.iter().filter(|c| !c.pass).count();
    println!(
        "== {}",
        if failed == 0 {
            "PASS".to_owned()
        } else {
            format!("FAIL ({failed} of {} invariants)", checks.len())
        }
    );
}
