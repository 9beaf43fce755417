//! Lease renewal and outcome writes that can neither hang nor starve: a connection that stops
//! answering mid-statement, another session's lock on one running job, job code that blocks
//! its thread, the number of renewal rounds a busy worker sends, a completion whose reply is
//! late, and a database clock that jumps ahead.
//!
//! The hung connections come from a small TCP proxy between the worker and the server
//! ([`Proxy`]): on the first client packet that contains a given piece of SQL it stops
//! forwarding on that connection, or holds the server's replies for a while, keeping both
//! sockets open, like a peer that vanished or a slow network. It looks for statement text
//! only, which both databases' protocols carry in the clear when a statement is prepared, so
//! it stands between a worker and either database (without TLS); a rule names the piece of
//! each database's statement ([`Sql`]).
//!
//! Every test runs on MySQL/MariaDB and on PostgreSQL (`mysql::name`, `postgres::name`),
//! except the two at the end, about the two statements of MySQL's renewal transaction.
//! Jobs record their side effects through the pool their worker is given
//! (`.data(effects.clone())`, a `Data<Effects>` parameter). Every worker of this file gets
//! one: the kinds share the default queue, and a worker must hold what each kind it serves
//! takes. A job that tells its test something picks the test's mailbox by that pool's backend
//! ([`on`]), since a test's two runs run at once.
//!
//! ```text
//! cargo test -p tests --test lease_renewal -- --nocapture
//! ```

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use jobqueue::{job, Data, EnqueueOptions, JobContext, JobError, JobStatus, Queue, WorkerHandle};
use tests::{
    effects, effects_of, fresh_queue_with_effects_on, lock_job, on, on_every_backend,
    plain_database_url, quick_worker, receive, record_effect_in, row, slot, sql_exec, start,
    wait_status, Arg, Backend, Effects, LogCapture, Mailbox, WorkerTask,
};
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

// ---------------------------------------------------------------------------------------
// A proxy that can stop answering
// ---------------------------------------------------------------------------------------

/// A piece of SQL as each database's statement has it.
#[derive(Clone, Copy)]
struct Sql {
    mysql: &'static str,
    postgres: &'static str,
}

impl Sql {
    /// The same text on both.
    const fn both(text: &'static str) -> Sql {
        Sql {
            mysql: text,
            postgres: text,
        }
    }

    fn on(&self, backend: Backend) -> &'static str {
        match backend {
            Backend::Postgres => self.postgres,
            _ => self.mysql,
        }
    }
}

/// What the proxy does to the first connection that sends `pattern`.
#[derive(Clone, Copy)]
struct Rule {
    /// SQL to look for in what the client sends (statement text travels in the clear when a
    /// statement is prepared, once per connection).
    pattern: Sql,
    /// Start holding replies with the packet after the one that matched (the statement's
    /// execution) rather than with the matching packet itself.
    after_next: bool,
    /// How long replies are held. `None`: the connection freezes for good, nothing more is
    /// forwarded either way, and both sockets stay open.
    hold: Option<Duration>,
}

/// A TCP proxy between the worker and the server; see [`Rule`].
struct Proxy {
    addr: SocketAddr,
    tripped: watch::Receiver<bool>,
}

/// The hold of one proxied connection: not yet, until an instant, or forever.
#[derive(Clone, Copy)]
enum Hold {
    None,
    Until(tokio::time::Instant),
    Forever,
}

impl Proxy {
    /// Listens on a free local port and forwards every connection to `upstream`, looking for
    /// `rule`'s pattern as `backend`'s statements have it.
    async fn start(upstream: String, backend: Backend, rule: Rule) -> Proxy {
        let pattern = rule.pattern.on(backend);
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().unwrap();
        let (trip, tripped) = watch::channel(false);
        let trip = Arc::new(trip);
        let used = Arc::new(AtomicBool::new(false));
        tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                let server = TcpStream::connect(&upstream)
                    .await
                    .expect("connect upstream");
                tokio::spawn(relay(
                    client,
                    server,
                    pattern,
                    rule,
                    used.clone(),
                    trip.clone(),
                ));
            }
        });
        Proxy { addr, tripped }
    }

    /// `url` (of the test server) pointing at this proxy instead.
    fn url(&self, url: &str) -> String {
        let (scheme, rest) = url.split_once("://").expect("a URL");
        let (user, host_and_path) = rest.rsplit_once('@').expect("a URL with a user");
        let path = host_and_path.split_once('/').map_or("", |(_, p)| p);
        format!("{scheme}://{user}@{}/{path}", self.addr)
    }

    /// Waits until the rule has been applied to a connection.
    async fn tripped(&self, within: Duration) {
        let mut rx = self.tripped.clone();
        tokio::time::timeout(within, rx.wait_for(|t| *t))
            .await
            .unwrap_or_else(|_| panic!("the proxy saw no matching statement within {within:?}"))
            .unwrap();
    }
}

/// `host:port` of the server behind `url`.
fn host_port(url: &str) -> String {
    let rest = url.split_once("://").expect("a URL").1;
    let host = rest.rsplit_once('@').map_or(rest, |(_, h)| h);
    let host = host.split(['/', '?']).next().unwrap();
    assert!(
        host.contains(':'),
        "the proxy needs a TCP server with an explicit port, got {url}"
    );
    host.to_owned()
}

async fn relay(
    client: TcpStream,
    server: TcpStream,
    pattern: &'static str,
    rule: Rule,
    used: Arc<AtomicBool>,
    trip: Arc<watch::Sender<bool>>,
) {
    let hold = Arc::new(Mutex::new(Hold::None));
    let (mut client_rx, mut client_tx) = client.into_split();
    let (mut server_rx, mut server_tx) = server.into_split();
    let up_hold = hold.clone();
    let up = async move {
        let mut buf = vec![0u8; 64 * 1024];
        let mut armed = false;
        loop {
            let n = match client_rx.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(n) => n,
            };
            let start_hold = |h: &Mutex<Hold>| {
                *h.lock().unwrap() = match rule.hold {
                    Some(d) => Hold::Until(tokio::time::Instant::now() + d),
                    None => Hold::Forever,
                };
                trip.send_replace(true);
            };
            if armed {
                armed = false;
                start_hold(&up_hold);
            } else if contains(&buf[..n], pattern.as_bytes()) && !used.swap(true, Ordering::SeqCst)
            {
                if rule.after_next {
                    armed = true;
                } else {
                    start_hold(&up_hold);
                }
            }
            if matches!(*up_hold.lock().unwrap(), Hold::Forever) {
                // Frozen: keep the sockets, forward nothing.
                let _keep = (client_rx, server_tx);
                std::future::pending::<()>().await;
                unreachable!();
            }
            if server_tx.write_all(&buf[..n]).await.is_err() {
                return;
            }
        }
    };
    let down = async move {
        let mut buf = vec![0u8; 64 * 1024];
        loop {
            let n = match server_rx.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(n) => n,
            };
            let h = *hold.lock().unwrap();
            match h {
                Hold::None => {}
                Hold::Until(t) => tokio::time::sleep_until(t).await,
                Hold::Forever => {
                    let _keep = (server_rx, client_tx);
                    std::future::pending::<()>().await;
                    unreachable!();
                }
            }
            if client_tx.write_all(&buf[..n]).await.is_err() {
                return;
            }
        }
    };
    tokio::join!(up, down);
}

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    haystack.windows(needle.len()).any(|w| w == needle)
}

/// A migrated database of `backend` with an `effects` table; the queue returned connects
/// through a proxy with `rule`, the effects pool directly.
async fn proxied(backend: Backend, prefix: &str, rule: Rule) -> (Queue, Queue, Effects, Proxy) {
    let (direct, effects) = fresh_queue_with_effects_on(backend, prefix).await;
    let url = plain_database_url(&direct).await;
    let proxy = Proxy::start(host_port(&url), backend, rule).await;
    let via_proxy = Queue::connect(&proxy.url(&url))
        .await
        .expect("connect via proxy");
    (direct, via_proxy, effects, proxy)
}

/// Shuts the worker down and requires it to return within `within`.
async fn stop_within(handle: &WorkerHandle, task: WorkerTask, within: Duration) {
    handle.shutdown();
    tokio::time::timeout(within, task)
        .await
        .unwrap_or_else(|_| panic!("the worker did not stop within {within:?} of shutdown"))
        .expect("the worker task does not panic")
        .expect("the worker returns Ok");
}

/// Works for `d` in small steps, returning early with an error if the job is cancelled.
async fn work(ctx: &JobContext, d: Duration) -> Result<(), JobError> {
    tokio::select! {
        _ = tokio::time::sleep(d) => Ok(()),
        _ = ctx.cancelled() => Err(format!("stopped: {:?}", ctx.cancel_reason()).into()),
    }
}

// ---------------------------------------------------------------------------------------
// 1. A statement that never gets its reply is abandoned with its connection.
// ---------------------------------------------------------------------------------------

#[job(name = "lease_frozen_write", lease = "3s")]
async fn frozen_write(ctx: JobContext, effects: Data<Effects>) -> Result<(), JobError> {
    record_effect_in(&effects, &ctx, "done").await
}

/// The connection that carries the first completion freezes (the server never sees the
/// statement, the client never gets a reply). The write is given up after its timeout, its
/// connection closed, and the completion written on a new one; shutdown returns.
async fn a_frozen_outcome_write_is_retried_on_a_new_connection_and_shutdown_returns(
    backend: Backend,
) {
    let rule = Rule {
        pattern: Sql::both("status = 'done', lease_owner = NULL"),
        after_next: false,
        hold: None,
    };
    let (direct, queue, effects_pool, proxy) = proxied(backend, "lease_frozen_write", rule).await;
    let id = direct.enqueue(FrozenWrite {}).await.unwrap().id();
    let (handle, task) = start(
        quick_worker(&queue)
            .data(effects_pool.clone())
            .build()
            .unwrap(),
    );

    proxy.tripped(Duration::from_secs(15)).await;
    let began = Instant::now();
    let r = wait_status(&direct, id, JobStatus::Done, Duration::from_secs(15)).await;
    println!(
        "frozen completion: recorded {:.1}s after its connection froze",
        began.elapsed().as_secs_f64()
    );
    assert_eq!(r.attempts, 1);
    stop_within(&handle, task, Duration::from_secs(10)).await;
    let m = handle.metrics();
    assert_eq!((m.succeeded, m.lease_lost, m.claimed), (1, 0, 1), "{m:?}");
    assert!(
        m.database_errors >= 1,
        "the timed-out write is counted: {m:?}"
    );
    assert_eq!(effects(&effects_pool).await, [(r.task_key, 1)]);
}

/// The first renewal is sent at a quarter of the lease (1.5 s) and abandoned at half of it
/// (3 s); the job would be stopped at three quarters (4.5 s). The second try has 1.5 s to
/// open a new connection and renew, which a busy machine needs; the job works past the
/// stop, so that a lease not kept shows.
#[job(name = "lease_frozen_renewal", lease = "6s")]
async fn frozen_renewal(ctx: JobContext, effects: Data<Effects>) -> Result<(), JobError> {
    record_effect_in(&effects, &ctx, "start").await?;
    work(&ctx, Duration::from_secs(6)).await?;
    record_effect_in(&effects, &ctx, "done").await
}

/// The connection that carries the first renewal freezes. The renewal is given up after a
/// quarter of the lease and sent again on a new connection, in time: the job keeps its lease
/// and runs once.
async fn a_frozen_renewal_is_abandoned_and_the_lease_kept(backend: Backend) {
    let rule = Rule {
        pattern: Sql {
            mysql: "AND cancel_requested = 0",
            postgres: "AND cancel_requested = FALSE",
        },
        after_next: false,
        hold: None,
    };
    let (direct, queue, effects_pool, proxy) = proxied(backend, "lease_frozen_renewal", rule).await;
    let id = direct.enqueue(FrozenRenewal {}).await.unwrap().id();
    let (handle, task) = start(
        quick_worker(&queue)
            .data(effects_pool.clone())
            .build()
            .unwrap(),
    );

    proxy.tripped(Duration::from_secs(15)).await;
    let r = wait_status(&direct, id, JobStatus::Done, Duration::from_secs(30)).await;
    assert_eq!(r.attempts, 1, "the lease was kept: {:?}", r.last_error);
    stop_within(&handle, task, Duration::from_secs(10)).await;
    let m = handle.metrics();
    assert_eq!((m.succeeded, m.lease_lost, m.claimed), (1, 0, 1), "{m:?}");
    assert_eq!(
        effects_of(&effects_pool, &r.task_key).await,
        [(1, "start".to_owned()), (1, "done".to_owned())]
    );
}

// ---------------------------------------------------------------------------------------
// 2. Another session's lock on one running job disturbs that job only.
// ---------------------------------------------------------------------------------------

static LOCKED_STARTED: [Mailbox<u64>; 2] = [Mailbox::new(), Mailbox::new()];

/// The lease leaves a renewal round a second of slack, so that a slow statement on a busy
/// machine does not cost an unlocked job its lease; the work outlasts the locked job's stop
/// (at most 3.25 s after its start) by seconds.
#[job(name = "lease_one_row_locked", lease = "3s")]
async fn one_row_locked(ctx: JobContext, n: u32, effects: Data<Effects>) -> Result<(), JobError> {
    let _ = n;
    record_effect_in(&effects, &ctx, "start").await?;
    LOCKED_STARTED[on(&effects)].send(ctx.id());
    work(&ctx, Duration::from_secs(6)).await?;
    record_effect_in(&effects, &ctx, "done").await
}

/// Four long jobs on one worker; a transaction holds the row of one of them. The other three
/// keep their leases and finish on their first attempt while the lock is held.
async fn a_row_locked_by_another_session_disturbs_only_its_own_job(backend: Backend) {
    let (queue, effects_pool) = fresh_queue_with_effects_on(backend, "lease_one_row_locked").await;
    let mut started = LOCKED_STARTED[slot(backend)].open();
    let mut ids = Vec::new();
    for n in 0..4 {
        ids.push(queue.enqueue(OneRowLocked { n }).await.unwrap().id());
    }
    let (handle, task) = start(
        quick_worker(&queue)
            .data(effects_pool.clone())
            .concurrency(4)
            .build()
            .unwrap(),
    );
    for _ in 0..4 {
        receive(&mut started, "four jobs to start", Duration::from_secs(10)).await;
    }

    let locked = *ids.iter().min().unwrap();
    let holder = lock_job(&queue, locked).await;
    for &id in ids.iter().filter(|&&id| id != locked) {
        let r = wait_status(&queue, id, JobStatus::Done, Duration::from_secs(15)).await;
        assert_eq!(r.attempts, 1, "job {id} kept its lease");
    }
    // The locked job could not be renewed; it was stopped, and runs again once the lock is
    // gone and its lease has expired.
    holder.release().await;
    let r = wait_status(&queue, locked, JobStatus::Done, Duration::from_secs(20)).await;
    stop_within(&handle, task, Duration::from_secs(10)).await;
    let m = handle.metrics();
    assert_eq!(m.lease_lost, 1, "only the locked job lost its lease: {m:?}");
    assert_eq!(r.attempts, 2);
    for &id in &ids {
        let key = row(&queue, id).await.task_key;
        let starts = effects_of(&effects_pool, &key)
            .await
            .into_iter()
            .filter(|(_, note)| note == "start")
            .count();
        assert_eq!(starts, if id == locked { 2 } else { 1 }, "job {id}");
    }
}

// ---------------------------------------------------------------------------------------
// 3. Job code that blocks its thread cannot starve renewals.
// ---------------------------------------------------------------------------------------

/// The lease leaves a renewal round a second of slack, so that a slow statement on a busy
/// machine is not a lost lease.
#[job(name = "lease_blocking", lease = "3s")]
async fn blocking(ctx: JobContext, effects: Data<Effects>) -> Result<(), JobError> {
    // Wrong (it belongs in `spawn_blocking`), and exactly what this test is about.
    std::thread::sleep(Duration::from_millis(7500));
    record_effect_in(&effects, &ctx, "done").await
}

/// On a single-threaded runtime, a job blocks the only thread for two and a half leases. The
/// lease is renewed from elsewhere, so the job is recorded once, on its first attempt.
async fn a_job_that_blocks_its_thread_keeps_its_lease(backend: Backend) {
    let (queue, effects_pool) = fresh_queue_with_effects_on(backend, "lease_blocking").await;
    let id = queue.enqueue(Blocking {}).await.unwrap().id();
    let (handle, task) = start(
        quick_worker(&queue)
            .data(effects_pool.clone())
            .build()
            .unwrap(),
    );

    // The test's reads run on the thread the job blocks: one in flight then (a connection
    // being opened, say) can time out when the thread comes back, and is simply read again.
    let r = tests::wait_for(
        &format!("job {id} to be done"),
        Duration::from_secs(20),
        || async {
            let r = queue.job(id).await.ok().flatten()?;
            (r.status == JobStatus::Done).then_some(r)
        },
    )
    .await;
    assert_eq!(r.attempts, 1, "{:?}", r.last_error);
    stop_within(&handle, task, Duration::from_secs(10)).await;
    let m = handle.metrics();
    assert_eq!((m.succeeded, m.lease_lost, m.claimed), (1, 0, 1), "{m:?}");
    assert_eq!(effects(&effects_pool).await, [(r.task_key, 1)]);
}

// ---------------------------------------------------------------------------------------
// 4. A busy worker sends about one renewal round per quarter of a lease.
// ---------------------------------------------------------------------------------------

#[job(name = "lease_batched", lease = "3s")]
async fn batched(ctx: JobContext, n: u32) -> Result<(), JobError> {
    let _ = n;
    work(&ctx, Duration::from_millis(4500)).await
}

/// Twelve jobs claimed a quarter of a second apart, each running one and a half leases: the
/// renewals of all of them travel together, about one round per quarter of the lease,
/// instead of one round per job and quarter of a lease.
async fn renewals_of_jobs_claimed_at_different_times_travel_together(backend: Backend) {
    let (queue, effects_pool) = fresh_queue_with_effects_on(backend, "lease_batched").await;
    let mut ids = Vec::new();
    for n in 0..12u32 {
        let delay = EnqueueOptions::default().delay(Duration::from_millis(250) * n);
        ids.push(queue.enqueue_with(Batched { n }, delay).await.unwrap().id());
    }
    let began = Instant::now();
    let (handle, task) = start(
        quick_worker(&queue)
            .data(effects_pool.clone())
            .concurrency(12)
            .build()
            .unwrap(),
    );
    for &id in &ids {
        let r = wait_status(&queue, id, JobStatus::Done, Duration::from_secs(30)).await;
        assert_eq!(r.attempts, 1);
    }
    let took = began.elapsed();
    stop_within(&handle, task, Duration::from_secs(10)).await;
    let m = handle.metrics();
    assert_eq!((m.succeeded, m.lease_lost), (12, 0), "{m:?}");
    // One round per 0.75 s (a quarter of the lease) while jobs run, and two to spare; twelve
    // jobs renewed on their own would take four times as many.
    let bound = (took.as_secs_f64() / 0.75).ceil() as u64 + 2;
    println!(
        "renewal rounds: {} in {:.1}s for 12 jobs of 4.5s with 3s leases (bound {bound})",
        m.renewals,
        took.as_secs_f64()
    );
    assert!(m.renewals >= 3, "{m:?}");
    assert!(
        m.renewals <= bound,
        "{} renewal rounds in {took:?}: renewals are not batched",
        m.renewals
    );
}

// ---------------------------------------------------------------------------------------
// 5. A completion whose reply is late is not mistaken for a lost lease.
// ---------------------------------------------------------------------------------------

/// Renewal rounds come every 1.5 s (a quarter of the lease); the job ends at 2.7 s, 1.2 s after
/// the first round and 0.3 s before the second, which lands inside the 2.4 s hold.
#[job(name = "lease_late_reply", lease = "6s")]
async fn late_reply(ctx: JobContext, effects: Data<Effects>) -> Result<(), JobError> {
    work(&ctx, Duration::from_millis(2700)).await?;
    record_effect_in(&effects, &ctx, "done").await
}

/// The job ends just after its first renewal; the server records the completion at once, but
/// its reply arrives 2.4 s later, after the next renewal round has found the row `done`. That
/// round must not count a lost lease: the completion is the worker's own.
async fn a_completion_with_a_late_reply_is_not_a_lost_lease(backend: Backend) {
    let rule = Rule {
        pattern: Sql::both("status = 'done', lease_owner = NULL"),
        after_next: true,
        hold: Some(Duration::from_millis(2400)),
    };
    let (direct, queue, effects_pool, proxy) = proxied(backend, "lease_late_reply", rule).await;
    let id = direct.enqueue(LateReply {}).await.unwrap().id();
    let (handle, task) = start(
        quick_worker(&queue)
            .data(effects_pool.clone())
            .build()
            .unwrap(),
    );

    proxy.tripped(Duration::from_secs(15)).await;
    // The completion has been sent; its reply is held from now on.
    let rounds_before_the_hold = handle.metrics().renewals;
    let r = wait_status(&direct, id, JobStatus::Done, Duration::from_secs(15)).await;
    assert_eq!(r.attempts, 1);
    // The late reply arrives; then the worker records the success.
    tests::wait_for(
        "the success to be counted",
        Duration::from_secs(10),
        || async { (handle.metrics().succeeded == 1).then_some(()) },
    )
    .await;
    // The case under test happened: a renewal round ran while the reply was held, and met
    // the row its own completion had ended.
    let m = handle.metrics();
    assert!(
        m.renewals > rounds_before_the_hold,
        "no renewal round ran while the reply was held ({rounds_before_the_hold} before): {m:?}"
    );
    stop_within(&handle, task, Duration::from_secs(10)).await;
    let m = handle.metrics();
    assert_eq!((m.succeeded, m.lease_lost), (1, 0), "{m:?}");
    assert_eq!(effects(&effects_pool).await, [(r.task_key, 1)]);
}

// ---------------------------------------------------------------------------------------
// 6. A database clock that jumps ahead is reported.
// ---------------------------------------------------------------------------------------

static SKEW_STARTED: [Mailbox<u64>; 2] = [Mailbox::new(), Mailbox::new()];

/// The first renewal comes 2 s (a quarter of the lease) after the claim: the test's `UPDATE`
/// must land before it, which leaves a busy machine time. It works past that renewal.
#[job(name = "lease_clock_skew", lease = "8s")]
async fn clock_skew(ctx: JobContext, effects: Data<Effects>) -> Result<(), JobError> {
    SKEW_STARTED[on(&effects)].send(ctx.id());
    work(&ctx, Duration::from_secs(4)).await
}

/// The row's lease is moved two seconds closer to its end, as a two-second forward step of the
/// server's clock would do. The next renewal sees less lease left than the worker can account
/// for, and says the database's clock jumped ahead.
/// One thread: the log capture is the thread's default subscriber.
async fn a_database_clock_that_jumps_ahead_is_reported(backend: Backend) {
    let (logs, _guard) = LogCapture::install("warn");
    let (queue, effects_pool) = fresh_queue_with_effects_on(backend, "lease_clock_skew").await;
    let mut started = SKEW_STARTED[slot(backend)].open();
    let id = queue.enqueue(ClockSkew {}).await.unwrap().id();
    // No maintenance: nothing may take the job back while its lease looks short.
    let (handle, task) = start(
        quick_worker(&queue)
            .data(effects_pool.clone())
            .maintenance(false)
            .build()
            .unwrap(),
    );
    receive(&mut started, "the job to start", Duration::from_secs(10)).await;
    let two_seconds = match backend {
        Backend::Postgres => "INTERVAL '2 seconds'",
        _ => "INTERVAL 2 SECOND",
    };
    let moved = sql_exec(
        &queue,
        &format!("UPDATE job_queue SET lease_until = lease_until - {two_seconds} WHERE id = ?"),
        &[Arg::Int(id as i64)],
    )
    .await;
    assert_eq!(moved, 1);

    let r = wait_status(&queue, id, JobStatus::Done, Duration::from_secs(15)).await;
    assert_eq!(r.attempts, 1);
    stop_within(&handle, task, Duration::from_secs(10)).await;
    let warned = logs.lines_with(&["database's clock ran", "ahead of this worker's"]);
    assert_eq!(warned.len(), 1, "{}", logs.text());
    assert!(warned[0].contains(&format!("job.id={id}")), "{}", warned[0]);
    assert_eq!(handle.metrics().lease_lost, 0);
}

// ---------------------------------------------------------------------------------------
// 7. A lost lease stops a job whatever it was told before.
// ---------------------------------------------------------------------------------------

static DEAF: [Mailbox<String>; 2] = [Mailbox::new(), Mailbox::new()];

/// Tells the test (its mailbox slot) when the job's future is dropped.
struct DroppedSignal(usize);

impl Drop for DroppedSignal {
    fn drop(&mut self) {
        DEAF[self.0].send("dropped".into());
    }
}

/// The lease leaves a renewal round a second of slack, so that the cancel reaches the job
/// before a slow statement on a busy machine could cost it its lease.
#[job(
    name = "lease_deaf_to_cancel",
    lease = "3s",
    concurrency = 1,
    concurrency_key = "deaf"
)]
async fn deaf_to_cancel(ctx: JobContext, effects: Data<Effects>) -> Result<(), JobError> {
    let slot = on(&effects);
    let _dropped = DroppedSignal(slot);
    let watcher = ctx.clone();
    tokio::spawn(async move {
        watcher.cancelled().await;
        DEAF[slot].send(format!("told {:?}", watcher.cancel_reason()));
    });
    DEAF[slot].send("started".into());
    // Does not watch `ctx.cancelled()`: the docs let a job decide how to stop.
    tokio::time::sleep(Duration::from_secs(60)).await;
    record_effect_in(&effects, &ctx, "end").await
}

/// A job told of an operator's cancel goes on (it decides how to stop). Then its row is locked
/// by another session past three quarters of its lease: the worker can no longer vouch for the
/// lease, and must drop the job's future as for any lost lease. If it did not, the job would
/// run on after maintenance took it back and freed its concurrency slot, next to the key's
/// next job.
async fn a_job_with_a_pending_cancel_is_stopped_when_its_lease_is_lost(backend: Backend) {
    let (queue, effects_pool) = fresh_queue_with_effects_on(backend, "lease_deaf").await;
    let mut told = DEAF[slot(backend)].open();
    let id = queue.enqueue(DeafToCancel {}).await.unwrap().id();
    let (handle, task) = start(
        quick_worker(&queue)
            .data(effects_pool.clone())
            .build()
            .unwrap(),
    );
    let first = receive(&mut told, "the job to start", Duration::from_secs(10)).await;
    assert_eq!(first, "started");
    queue.cancel(id).await.unwrap();
    let told_cancel = receive(&mut told, "the job to be told", Duration::from_secs(10)).await;
    assert_eq!(told_cancel, "told Some(Requested)");

    let holder = lock_job(&queue, id).await;
    // Stopped 2.25 s after its last renewal; the bound leaves room for a loaded machine and
    // is far below the 60 s the job would otherwise run.
    let stopped = receive(
        &mut told,
        "the job's future to be dropped",
        Duration::from_secs(15),
    )
    .await;
    assert_eq!(stopped, "dropped");
    holder.release().await;

    let r = wait_status(&queue, id, JobStatus::Cancelled, Duration::from_secs(20)).await;
    assert_eq!(r.attempts, 1);
    stop_within(&handle, task, Duration::from_secs(10)).await;
    assert_eq!(handle.metrics().lease_lost, 1);
    assert!(
        effects(&effects_pool).await.is_empty(),
        "the job never ended"
    );
}

// ---------------------------------------------------------------------------------------
// 8. An operator's cancel reaches a job whose own completion was rolled back.
// ---------------------------------------------------------------------------------------

static ROLLED_BACK: [Mailbox<String>; 2] = [Mailbox::new(), Mailbox::new()];

#[job(name = "lease_cancel_after_rollback", lease = "3s")]
async fn cancel_after_rollback(ctx: JobContext, effects: Data<Effects>) -> Result<(), JobError> {
    match &*effects {
        Effects::MySql(pool) => {
            let mut tx = pool.begin().await?;
            ctx.complete_in(&mut tx).await?;
            tx.rollback().await?;
        }
        Effects::Postgres(pool) => {
            let mut tx = pool.begin().await?;
            ctx.complete_in(&mut tx).await?;
            tx.rollback().await?;
        }
    }
    let said = &ROLLED_BACK[on(&effects)];
    said.send("rolled back".into());
    let _ = tokio::time::timeout(Duration::from_secs(30), ctx.cancelled()).await;
    said.send(format!("{:?}", ctx.cancel_reason()));
    Err(JobError::cancel("stopped on request"))
}

/// A job called `complete_in`, rolled its transaction back and went on. An operator's cancel
/// must reach it as a cancel, and its lease stay renewed meanwhile: not a stop for a lost
/// lease at three quarters of it.
async fn a_cancel_reaches_a_job_whose_completion_was_rolled_back(backend: Backend) {
    let (queue, effects_pool) =
        fresh_queue_with_effects_on(backend, "lease_cancel_rolled_back").await;
    let mut said = ROLLED_BACK[slot(backend)].open();
    let id = queue.enqueue(CancelAfterRollback {}).await.unwrap().id();
    let (handle, task) = start(
        quick_worker(&queue)
            .data(effects_pool.clone())
            .build()
            .unwrap(),
    );
    let first = receive(&mut said, "the rollback", Duration::from_secs(10)).await;
    assert_eq!(first, "rolled back");
    queue.cancel(id).await.unwrap();
    let reason = receive(&mut said, "the job to be told", Duration::from_secs(20)).await;
    assert_eq!(reason, "Some(Requested)");
    let r = wait_status(&queue, id, JobStatus::Cancelled, Duration::from_secs(15)).await;
    assert_eq!(r.attempts, 1);
    stop_within(&handle, task, Duration::from_secs(10)).await;
    assert_eq!(handle.metrics().lease_lost, 0);
}

on_every_backend!(
    a_frozen_outcome_write_is_retried_on_a_new_connection_and_shutdown_returns,
    a_frozen_renewal_is_abandoned_and_the_lease_kept,
    a_row_locked_by_another_session_disturbs_only_its_own_job,
    renewals_of_jobs_claimed_at_different_times_travel_together,
    a_completion_with_a_late_reply_is_not_a_lost_lease,
    a_job_with_a_pending_cancel_is_stopped_when_its_lease_is_lost,
    a_cancel_reaches_a_job_whose_completion_was_rolled_back;
    current_thread: a_job_that_blocks_its_thread_keeps_its_lease,
    a_database_clock_that_jumps_ahead_is_reported,
);

// =======================================================================================
// MySQL only: the two statements of MySQL's renewal transaction (a locking read, then the
// update of the rows it read). PostgreSQL renews in one autocommit statement, which has no
// gap between its read and its update and no transaction to be cut off inside.
// =======================================================================================

// ---------------------------------------------------------------------------------------
// 9. A renewal counts exactly the rows it extended, whatever the writer does meanwhile.
// ---------------------------------------------------------------------------------------

#[job(name = "lease_renew_count")]
async fn renew_count(n: u32) {
    let _ = n;
}

/// Between the renewal's locking read and its update (whose preparation is held 300 ms, as a
/// slow network would), another session finishes one of the two jobs, as the worker's own
/// outcome writer does under load. The other job's lease is extended, so the renewal must
/// count it: a renewal that counted nothing would leave the worker to stop a job whose lease
/// the server had just extended, and run it again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_finished_during_a_renewal_does_not_discount_the_others() {
    // The update is sent only once the read's reply has arrived: the trip comes after the
    // read ran on the server.
    let rule = Rule {
        pattern: Sql::both("SET lease_until = UTC_TIMESTAMP(6) + INTERVAL lease_ms"),
        after_next: false,
        hold: Some(Duration::from_millis(300)),
    };
    let (direct, queue, _effects, proxy) = proxied(Backend::MySql, "lease_renew_count", rule).await;
    for n in 0..2 {
        direct.enqueue(RenewCount { n }).await.unwrap();
    }
    let claimed = direct.store().claim("default", "w", 2).await.unwrap();
    let ids: Vec<u64> = claimed.iter().map(|c| c.id).collect();
    assert_eq!(ids.len(), 2);
    let (a, b) = (ids[0], ids[1]);
    let lease_of = |id: u64| {
        let pool = direct.mysql_pool().unwrap().clone();
        async move {
            sqlx::query_scalar::<_, chrono::NaiveDateTime>(
                "SELECT lease_until FROM job_queue WHERE id = ?",
            )
            .bind(id)
            .fetch_one(&pool)
            .await
            .unwrap()
        }
    };
    let before = lease_of(a).await;

    let finisher = {
        let pool = direct.mysql_pool().unwrap().clone();
        let tripped = proxy.tripped.clone();
        tokio::spawn(async move {
            let mut tripped = tripped;
            tokio::time::timeout(Duration::from_secs(15), tripped.wait_for(|t| *t))
                .await
                .expect("the renewal's update to be sent")
                .unwrap();
            sqlx::query(
                "UPDATE job_queue SET status = 'done', lease_owner = NULL, lease_until = NULL, \
                 finished_at = UTC_TIMESTAMP(6) WHERE id = ?",
            )
            .bind(b)
            .execute(&pool)
            .await
            .unwrap()
            .rows_affected()
        })
    };
    let renewed = queue.store().renew("w", &[a, b], false).await.unwrap();
    assert_eq!(finisher.await.unwrap(), 1, "the other session finished b");
    assert!(lease_of(a).await > before, "a's lease was extended");
    // The renewal holds the rows it read until it has extended them: the finishing session
    // waits for it, and both count. (It must never count fewer than it extended.)
    assert_eq!(renewed, 2, "every row extended is counted");
    assert_eq!(row(&direct, b).await.status, JobStatus::Done);
}

// ---------------------------------------------------------------------------------------
// 10. A renewal cut off inside its transaction does not keep its rows locked.
// ---------------------------------------------------------------------------------------

#[job(name = "lease_cut_renewal", lease = "6s")]
async fn cut_renewal(ctx: JobContext, effects: Data<Effects>) -> Result<(), JobError> {
    record_effect_in(&effects, &ctx, "start").await?;
    // Longer than the 4.5 s after which a worker stops a job it cannot renew.
    work(&ctx, Duration::from_secs(7)).await?;
    record_effect_in(&effects, &ctx, "done").await
}

/// The connection of the first renewal freezes after its locking read, inside its
/// transaction, as a worker frozen or cut off there would leave it: the server holds the row
/// locked for an idle session. It must end that transaction within seconds, so that the job,
/// stopped by its worker, is taken back and run again, instead of staying locked (and out
/// of every reclaim) for as long as the server keeps an idle session.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_renewal_cut_off_inside_its_transaction_does_not_keep_its_rows_locked() {
    let rule = Rule {
        pattern: Sql::both("SET lease_until = UTC_TIMESTAMP(6) + INTERVAL lease_ms"),
        after_next: false,
        hold: None,
    };
    let (direct, queue, effects_pool, proxy) =
        proxied(Backend::MySql, "lease_cut_renewal", rule).await;
    let id = direct.enqueue(CutRenewal {}).await.unwrap().id();
    let (handle, task) = start(
        quick_worker(&queue)
            .data(effects_pool.clone())
            .build()
            .unwrap(),
    );
    proxy.tripped(Duration::from_secs(15)).await;
    let r = wait_status(&direct, id, JobStatus::Done, Duration::from_secs(40)).await;
    assert_eq!(r.attempts, 2, "stopped once, run again: {:?}", r.last_error);
    stop_within(&handle, task, Duration::from_secs(10)).await;
    assert_eq!(handle.metrics().lease_lost, 1);
    assert_eq!(
        effects_of(&effects_pool, &r.task_key).await,
        [
            (1, "start".to_owned()),
            (2, "start".to_owned()),
            (2, "done".to_owned())
        ]
    );
}
