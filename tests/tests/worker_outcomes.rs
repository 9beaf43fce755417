//! Every path that ends an attempt keeps to `max_attempts` and loses no job: a hand-back at
//! shutdown, a claim whose commit reply was lost, a job no worker of this version can run
//! (rolling deploys), a job that crashes every worker that runs it, a job task that panics
//! outside the job's code, a row that cannot be decoded, and the claim's locking read.
//!
//! Tests that need a fault between the worker and the server put a small TCP proxy of their
//! own in between ([`Proxy`]), which reads MySQL packets or PostgreSQL messages. The first
//! tests run on MySQL/MariaDB and on PostgreSQL (`mysql::name`, `postgres::name`); the rest,
//! in a section of their own, on MySQL only: tests that need a worker process start
//! `test-worker`, which speaks MySQL only, and a key that is not UTF-8 can be stored only in
//! MySQL's binary column.
//! In-process jobs record their side effects through the pool their worker is given
//! (`.data(effects.clone())`, a `Data<Effects>` parameter); every in-process worker gets one,
//! since the kinds share the default queue and a worker must hold what each kind takes.
//!
//! ```text
//! cargo test -p tests --test worker_outcomes
//! ```

use std::net::SocketAddr;
use std::process::Stdio;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use jobqueue::{job, Data, EnqueueOptions, JobContext, JobError, JobStatus, Queue};
use sqlx::mysql::MySqlPool;
use sqlx::types::chrono::NaiveDateTime;
use tests::{
    effects_of, fresh_queue_on, fresh_queue_with_effects, fresh_queue_with_effects_on,
    migrated_queue, on_every_backend, quick_worker, receive, record_effect_in, row, slot, start,
    stop, wait_for, wait_status, Backend, Effects, Mailbox,
};
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::{TcpListener, TcpStream};
use tokio::process::{Child, Command};
use tokio_util::sync::CancellationToken;

/// The worker binary of this package.
const WORKER_BIN: &str = env!("CARGO_BIN_EXE_test-worker");

// ---------------------------------------------------------------------------------------
// 1. A hand-back at shutdown on the last attempt fails the job instead of running it again.
// ---------------------------------------------------------------------------------------

/// One mailbox per backend: a test's two runs run at once.
static LAST_ATTEMPT_STARTED: [Mailbox<u64>; 2] = [Mailbox::new(), Mailbox::new()];

/// Starts, then works for a minute without looking at its context.
#[job(name = "outcomes_last_attempt", max_attempts = 1, lease = "5s")]
async fn last_attempt(ctx: JobContext, n: u32, effects: Data<Effects>) -> Result<(), JobError> {
    let _ = n;
    record_effect_in(&effects, &ctx, "start").await?;
    let slot = match &*effects {
        Effects::Postgres(_) => 1,
        Effects::MySql(_) => 0,
    };
    LAST_ATTEMPT_STARTED[slot].send(ctx.id());
    tokio::time::sleep(Duration::from_secs(60)).await;
    Ok(())
}

async fn a_shutdown_on_the_last_attempt_fails_the_job_instead_of_running_it_again(
    backend: Backend,
) {
    let (queue, effects_pool) = fresh_queue_with_effects_on(backend, "outcomes_handback").await;
    let mut started = LAST_ATTEMPT_STARTED[slot(backend)].open();
    let id = queue.enqueue(LastAttempt { n: 1 }).await.unwrap().id();

    let (handle, task) = start(
        quick_worker(&queue)
            .data(effects_pool.clone())
            .shutdown_grace(Duration::from_millis(200))
            .cancel_grace(Duration::from_millis(200))
            .build()
            .unwrap(),
    );
    assert_eq!(
        receive(&mut started, "the job to start", Duration::from_secs(10)).await,
        id
    );
    stop(&handle, task).await;

    let r = row(&queue, id).await;
    assert_eq!(
        (r.status, r.attempts, r.max_attempts),
        (JobStatus::Failed, 1, 1),
        "its one attempt is used: {r:?}"
    );
    let error = r.last_error.unwrap_or_default();
    assert!(
        error.contains("shut down") && error.contains("1 of 1"),
        "{error}"
    );
    assert!(r.finished_at.is_some());

    // A second worker finds nothing to run.
    let (handle, task) = start(
        quick_worker(&queue)
            .data(effects_pool.clone())
            .build()
            .unwrap(),
    );
    wait_for("an idle poll", Duration::from_secs(10), || async {
        (handle.metrics().empty_idle > 0).then_some(())
    })
    .await;
    stop(&handle, task).await;
    assert_eq!(handle.metrics().claimed, 0);
    assert_eq!(effects_of(&effects_pool, &r.task_key).await.len(), 1);
}

// ---------------------------------------------------------------------------------------
// 2. A job task that panics outside the job's code does not keep its lease forever.
// ---------------------------------------------------------------------------------------

struct PanicOnDrop;

impl Drop for PanicOnDrop {
    fn drop(&mut self) {
        panic!("a destructor that panics");
    }
}

#[job(
    name = "outcomes_drop_panics",
    timeout = "300ms",
    max_attempts = 1,
    lease = "2s"
)]
async fn drop_panics(n: u32) -> Result<(), JobError> {
    let _ = n;
    let _guard = PanicOnDrop;
    tokio::time::sleep(Duration::from_secs(30)).await;
    Ok(())
}

async fn a_job_whose_destructor_panics_after_a_timeout_is_recorded_and_released(backend: Backend) {
    let (queue, effects_pool) = fresh_queue_with_effects_on(backend, "outcomes_drop_panic").await;
    tests::init_tracing();
    let id = queue.enqueue(DropPanics { n: 1 }).await.unwrap().id();
    let (handle, task) = start(
        quick_worker(&queue)
            .data(effects_pool.clone())
            .build()
            .unwrap(),
    );
    let r = wait_status(&queue, id, JobStatus::Failed, Duration::from_secs(10)).await;
    let error = r.last_error.unwrap_or_default();
    assert!(error.contains("timed out after 300ms"), "{error}");
    assert_eq!((r.attempts, r.lease_owner), (1, None));
    stop(&handle, task).await;
}

// ---------------------------------------------------------------------------------------
// A proxy between the library and the server
// ---------------------------------------------------------------------------------------

/// A TCP proxy in front of a test server that reads the messages the client sends, as MySQL
/// packets or as PostgreSQL messages. It can drop the reply to the next `COMMIT` (the server
/// commits, the client never hears so), and it counts the bytes the server sends while a
/// transaction is open.
struct Proxy {
    addr: SocketAddr,
    backend: Backend,
    state: Arc<ProxyState>,
}

/// A statement's text in a client's message.
enum Sql {
    /// A plain query (MySQL `COM_QUERY`, PostgreSQL `Query`): BEGIN and COMMIT travel so.
    Query(Vec<u8>),
    /// A statement prepared (MySQL `COM_STMT_PREPARE`, PostgreSQL `Parse`).
    Prepare(Vec<u8>),
}

/// Reads the client's next message: its bytes as they go on to the server, and the SQL it
/// carries, if any. `None` once the client has gone.
async fn next_message(
    from: &mut (impl tokio::io::AsyncRead + Unpin),
    backend: Backend,
    started: &mut bool,
) -> Option<(Vec<u8>, Option<Sql>)> {
    match backend {
        Backend::Postgres => {
            // The startup message has no type byte; every later one starts with one.
            let mut head = vec![0u8; if *started { 5 } else { 4 }];
            from.read_exact(&mut head).await.ok()?;
            let at = head.len() - 4;
            let len = u32::from_be_bytes(head[at..].try_into().unwrap()) as usize;
            let mut body = vec![0u8; len.checked_sub(4)?];
            from.read_exact(&mut body).await.ok()?;
            let sql = if !*started {
                *started = true;
                None
            } else {
                match head[0] {
                    b'Q' => Some(Sql::Query(
                        body.split(|&b| b == 0).next().unwrap_or(&[]).to_vec(),
                    )),
                    // A statement's name, then its text.
                    b'P' => Some(Sql::Prepare(
                        body.split(|&b| b == 0).nth(1).unwrap_or(&[]).to_vec(),
                    )),
                    _ => None,
                }
            };
            head.extend_from_slice(&body);
            Some((head, sql))
        }
        _ => {
            let mut header = [0u8; 4];
            from.read_exact(&mut header).await.ok()?;
            let len = u32::from_le_bytes([header[0], header[1], header[2], 0]) as usize;
            let mut body = vec![0u8; len];
            from.read_exact(&mut body).await.ok()?;
            // A command starts a new sequence (id 0); COM_QUERY is 0x03, COM_STMT_PREPARE
            // 0x16.
            let sql = match (header[3], body.first()) {
                (0, Some(&0x03)) => Some(Sql::Query(body[1..].to_vec())),
                (0, Some(&0x16)) => Some(Sql::Prepare(body[1..].to_vec())),
                _ => None,
            };
            let mut bytes = header.to_vec();
            bytes.extend_from_slice(&body);
            Some((bytes, sql))
        }
    }
}

#[derive(Default)]
struct ProxyState {
    /// Drop the reply to the next COMMIT and close that connection.
    lose_next_commit_reply: AtomicBool,
    /// COMMITs whose reply was dropped.
    commit_replies_lost: AtomicU64,
    /// Of those, COMMITs on a connection that had sent the claim's locking read.
    claim_commit_replies_lost: AtomicU64,
    /// Bytes from the server to the client between a BEGIN and its COMMIT or ROLLBACK.
    bytes_in_transactions: AtomicU64,
}

/// One proxied connection's view of its client.
#[derive(Default)]
struct Conn {
    in_transaction: AtomicBool,
    lose_reply: AtomicBool,
    /// The client sent the claim's locking read on this connection (its text travels when
    /// the statement is prepared, once per connection, or with each plain query).
    sent_claim: AtomicBool,
}

impl Proxy {
    /// A proxy in front of the test server of `backend`.
    async fn start(backend: Backend) -> Proxy {
        let url = match backend {
            Backend::Postgres => jobqueue::testing::TestServer::shared_postgres()
                .unwrap_or_else(|e| panic!("{e}"))
                .url()
                .to_owned(),
            _ => tests::server().url().to_owned(),
        };
        let server: SocketAddr = server_addr(&url).parse().expect("a host:port");
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("local addr");
        let state = Arc::new(ProxyState::default());
        let shared = state.clone();
        tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                let Ok(upstream) = TcpStream::connect(server).await else {
                    continue;
                };
                tokio::spawn(pipe(client, upstream, backend, shared.clone()));
            }
        });
        Proxy {
            addr,
            backend,
            state,
        }
    }

    /// A queue on `queue`'s database, through this proxy.
    async fn queue_like(&self, queue: &Queue) -> Queue {
        Queue::connect(&self.url(&tests::plain_database_url(queue).await))
            .await
            .expect("connect through the proxy")
    }

    /// `url` (a database URL of the test server) through this proxy, without TLS (the proxy
    /// reads the packets).
    fn url(&self, url: &str) -> String {
        let (scheme, rest) = url.split_once("://").expect("a URL");
        let (authority, path) = rest.split_once('/').expect("a database");
        let user = authority.rsplit_once('@').map(|(u, _)| u);
        let at = user.map(|u| format!("{u}@")).unwrap_or_default();
        let no_tls = match self.backend {
            Backend::Postgres if path.contains("sslmode=") => "",
            Backend::Postgres => "sslmode=disable",
            _ => "ssl-mode=disabled",
        };
        let sep = match (no_tls, path.contains('?')) {
            ("", _) => "",
            (_, true) => "&",
            (_, false) => "?",
        };
        format!("{scheme}://{at}{}/{path}{sep}{no_tls}", self.addr)
    }
}

/// The server address of a test server URL.
fn server_addr(url: &str) -> String {
    let rest = url.split_once("://").expect("a URL").1;
    let authority = rest.split('/').next().expect("an authority");
    authority
        .rsplit_once('@')
        .map_or(authority, |(_, a)| a)
        .to_owned()
}

async fn pipe(client: TcpStream, upstream: TcpStream, backend: Backend, state: Arc<ProxyState>) {
    let (mut client_read, mut client_write) = client.into_split();
    let (mut server_read, mut server_write) = upstream.into_split();
    let conn = Arc::new(Conn::default());
    let stop = CancellationToken::new();
    let to_server = {
        let (conn, state, stop) = (conn.clone(), state.clone(), stop.clone());
        async move {
            let claim = match backend {
                Backend::Postgres => jobqueue_runtime::__store::statements::pg_claim_sql(),
                _ => jobqueue_runtime::__store::statements::CLAIM_SELECT.to_owned(),
            };
            let claim = claim.as_bytes();
            let mut started = false;
            loop {
                let Some((bytes, sql)) =
                    next_message(&mut client_read, backend, &mut started).await
                else {
                    return;
                };
                let text = match &sql {
                    Some(Sql::Query(t) | Sql::Prepare(t)) => t.as_slice(),
                    None => &[],
                };
                if text.windows(claim.len()).any(|w| w == claim) {
                    conn.sent_claim.store(true, Ordering::SeqCst);
                }
                if let Some(Sql::Query(t)) = &sql {
                    let text = String::from_utf8_lossy(t).trim().to_ascii_uppercase();
                    if text.starts_with("BEGIN") || text.starts_with("START TRANSACTION") {
                        conn.in_transaction.store(true, Ordering::SeqCst);
                    } else if text.starts_with("COMMIT") || text.starts_with("ROLLBACK") {
                        if text.starts_with("COMMIT")
                            && state.lose_next_commit_reply.swap(false, Ordering::SeqCst)
                        {
                            conn.lose_reply.store(true, Ordering::SeqCst);
                        }
                        conn.in_transaction.store(false, Ordering::SeqCst);
                    }
                }
                if server_write.write_all(&bytes).await.is_err() {
                    return;
                }
                if stop.is_cancelled() {
                    return;
                }
            }
        }
    };
    let to_client = {
        let (conn, state, stop) = (conn.clone(), state.clone(), stop.clone());
        async move {
            let mut buf = vec![0u8; 64 * 1024];
            loop {
                let n = match server_read.read(&mut buf).await {
                    Ok(0) | Err(_) => return,
                    Ok(n) => n,
                };
                if conn.lose_reply.load(Ordering::SeqCst) {
                    // The server has answered the COMMIT, so it has committed: the client
                    // never hears it, and the connection dies.
                    state.commit_replies_lost.fetch_add(1, Ordering::SeqCst);
                    if conn.sent_claim.load(Ordering::SeqCst) {
                        state
                            .claim_commit_replies_lost
                            .fetch_add(1, Ordering::SeqCst);
                    }
                    stop.cancel();
                    return;
                }
                if conn.in_transaction.load(Ordering::SeqCst) {
                    state
                        .bytes_in_transactions
                        .fetch_add(n as u64, Ordering::SeqCst);
                }
                if client_write.write_all(&buf[..n]).await.is_err() {
                    return;
                }
            }
        }
    };
    tokio::select! {
        _ = to_server => {}
        _ = to_client => {}
        _ = stop.cancelled() => {}
    }
}

// ---------------------------------------------------------------------------------------
// 3. A claim whose COMMIT succeeded but whose reply was lost still runs its job.
// ---------------------------------------------------------------------------------------

#[job(name = "outcomes_lost_ack", max_attempts = 1, lease = "3s")]
async fn lost_ack(ctx: JobContext, n: u32, effects: Data<Effects>) -> Result<(), JobError> {
    let _ = n;
    record_effect_in(&effects, &ctx, "done").await
}

async fn a_claim_whose_commit_reply_is_lost_still_runs_its_job_once(backend: Backend) {
    let (queue, effects_pool) = fresh_queue_with_effects_on(backend, "outcomes_lost_ack").await;
    let proxy = Proxy::start(backend).await;
    let proxied = proxy.queue_like(&queue).await;
    let id = queue.enqueue(LostAck { n: 1 }).await.unwrap().id();

    // The first COMMIT this worker sends is its claim's (maintenance, whose passes commit
    // too, is off): the server commits it, and the worker never hears back.
    proxy
        .state
        .lose_next_commit_reply
        .store(true, Ordering::SeqCst);
    let (handle, task) = start(
        quick_worker(&proxied)
            .data(effects_pool.clone())
            .maintenance(false)
            .build()
            .unwrap(),
    );
    let r = wait_for(
        "the job to be done or to fail",
        Duration::from_secs(15),
        || async {
            let r = row(&queue, id).await;
            matches!(r.status, JobStatus::Done | JobStatus::Failed).then_some(r)
        },
    )
    .await;
    stop(&handle, task).await;
    assert_eq!(
        proxy.state.commit_replies_lost.load(Ordering::SeqCst),
        1,
        "the fault happened"
    );
    assert_eq!(
        proxy.state.claim_commit_replies_lost.load(Ordering::SeqCst),
        1,
        "the lost reply was a claim's: its connection had sent the claim's locking read"
    );
    assert_eq!((r.status, r.attempts), (JobStatus::Done, 1), "{r:?}");
    assert_eq!(
        effects_of(&effects_pool, &r.task_key).await,
        [(1, "done".into())]
    );
}

// ---------------------------------------------------------------------------------------
// 4. The claim reads payloads after its COMMIT, not while it holds the rows locked.
// ---------------------------------------------------------------------------------------

#[job(name = "outcomes_big")]
async fn big(blob: String, n: u32) -> Result<(), JobError> {
    let _ = (blob, n);
    Ok(())
}

async fn the_claim_holds_its_locks_without_reading_payloads(backend: Backend) {
    let queue = fresh_queue_on(backend, "outcomes_payload_after").await;
    let proxy = Proxy::start(backend).await;
    let proxied = proxy.queue_like(&queue).await;
    let blob = "x".repeat(200 * 1024);
    queue
        .enqueue_many((0..20).map(|n| Big {
            blob: blob.clone(),
            n,
        }))
        .await
        .unwrap();

    let before = proxy.state.bytes_in_transactions.load(Ordering::SeqCst);
    let claimed = proxied
        .store()
        .claim("default", "outcomes-reader", 20)
        .await
        .unwrap();
    let in_transaction = proxy.state.bytes_in_transactions.load(Ordering::SeqCst) - before;
    assert_eq!(claimed.len(), 20);
    for c in &claimed {
        let payload = c.payload.as_ref().expect("a readable payload");
        assert_eq!(payload["blob"].as_str().map(str::len), Some(blob.len()));
    }
    println!("bytes received inside the claim's transaction: {in_transaction} (payloads 4 MB)");
    assert!(
        in_transaction > 0,
        "the proxy saw the claim's transaction and its replies"
    );
    assert!(
        in_transaction < 64 * 1024,
        "{in_transaction} bytes were read while the rows were locked"
    );
}

on_every_backend!(
    a_shutdown_on_the_last_attempt_fails_the_job_instead_of_running_it_again,
    a_job_whose_destructor_panics_after_a_timeout_is_recorded_and_released,
    a_claim_whose_commit_reply_is_lost_still_runs_its_job_once,
    the_claim_holds_its_locks_without_reading_payloads,
    an_old_worker_leaves_jobs_it_cannot_run_to_a_newer_one_without_spending_attempts,
    a_job_that_crashes_its_worker_again_and_again_ends_failed,
);

// =======================================================================================
// Worker processes (`test-worker`, on either database), and a task key that is not UTF-8
// (MySQL only: PostgreSQL's text column cannot hold one).
// =======================================================================================

// ---------------------------------------------------------------------------------------
// Worker processes and raw rows
// ---------------------------------------------------------------------------------------

/// A new database of `backend` with the queue's tables and `test-worker`'s `effects`
/// table: its URL and a queue on it.
async fn process_database(backend: Backend, prefix: &str) -> (String, Queue) {
    tests::init_tracing();
    let url = jobqueue::testing::TestDatabase::empty_on(backend, prefix)
        .await
        .unwrap_or_else(|e| panic!("cannot create a {backend} test database: {e}"))
        .keep();
    let queue = migrated_queue(&url).await;
    let table = match backend {
        Backend::Postgres => tests::WORKER_EFFECTS_TABLE_POSTGRES,
        _ => tests::WORKER_EFFECTS_TABLE,
    };
    tests::sql_exec(&queue, table, &[]).await;
    (url, queue)
}

/// `test-worker`'s effects as (task_key, attempt, phase, at), in the order recorded.
async fn process_effects(queue: &Queue) -> Vec<(String, u32, String, NaiveDateTime)> {
    const SQL: &str = "SELECT task_key, attempt, phase, at FROM effects ORDER BY seq";
    if let Some(pool) = queue.postgres_pool() {
        let rows: Vec<(String, i32, String, NaiveDateTime)> = sqlx::query_as(SQL)
            .fetch_all(pool)
            .await
            .expect("read effects");
        return rows
            .into_iter()
            .map(|(k, a, p, at)| (k, a as u32, p, at))
            .collect();
    }
    let rows: Vec<(Vec<u8>, u32, String, NaiveDateTime)> = sqlx::query_as(SQL)
        .fetch_all(queue.mysql_pool().expect("a MySQL queue"))
        .await
        .expect("read effects");
    rows.into_iter()
        .map(|(k, a, p, at)| (String::from_utf8(k).expect("UTF-8 keys"), a, p, at))
        .collect()
}

/// Starts a `test-worker` process on `url` with quick polling and maintenance.
fn worker_process(url: &str, extra: &[&str]) -> Child {
    Command::new(WORKER_BIN)
        .arg("--database-url")
        .arg(url)
        .args([
            "--poll-min-ms",
            "20",
            "--poll-max-ms",
            "200",
            "--maintenance-ms",
            "100",
        ])
        .args(extra)
        .env("RUST_LOG", "warn")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .unwrap_or_else(|e| panic!("cannot start {WORKER_BIN}: {e}"))
}

/// Inserts a ready job by SQL, as another version of the program (or a person) would.
async fn insert_raw(
    queue: &Queue,
    kind: &str,
    key: &[u8],
    payload: &str,
    max_attempts: u32,
    lease_ms: u32,
) -> u64 {
    if let Some(pool) = queue.postgres_pool() {
        let id: i64 = sqlx::query_scalar(
            "INSERT INTO job_queue (queue, kind, task_key, payload, status, priority, run_at, \
               attempts, max_attempts, lease_ms, created_at, updated_at) \
             VALUES ('default', $1, $2, CAST($3 AS JSONB), 'ready', 0, job_queue_now(), 0, $4, \
               $5, job_queue_now(), job_queue_now()) RETURNING id",
        )
        .bind(kind)
        .bind(std::str::from_utf8(key).expect("PostgreSQL keys are text"))
        .bind(payload)
        .bind(max_attempts as i32)
        .bind(lease_ms as i32)
        .fetch_one(pool)
        .await
        .expect("insert a raw job");
        return id as u64;
    }
    let pool = queue.mysql_pool().expect("a MySQL queue");
    sqlx::query(
        "INSERT INTO job_queue (queue, kind, task_key, payload, status, priority, run_at, \
           attempts, max_attempts, lease_ms, created_at, updated_at) \
         VALUES ('default', ?, ?, ?, 'ready', 0, UTC_TIMESTAMP(6), 0, ?, ?, \
           UTC_TIMESTAMP(6), UTC_TIMESTAMP(6))",
    )
    .bind(kind)
    .bind(key)
    .bind(payload)
    .bind(max_attempts)
    .bind(lease_ms)
    .execute(pool)
    .await
    .expect("insert a raw job")
    .last_insert_id()
}

/// (status, attempts, max_attempts, last_error) of job `id`, read by SQL (so that rows the
/// library cannot decode can be read too).
async fn raw_state(pool: &MySqlPool, id: u64) -> (String, u32, u32, String) {
    sqlx::query_as(
        "SELECT CAST(status AS CHAR), attempts, max_attempts, COALESCE(CAST(last_error AS CHAR), '') \
         FROM job_queue WHERE id = ?",
    )
    .bind(id)
    .fetch_one(pool)
    .await
    .expect("read the job")
}

// ---------------------------------------------------------------------------------------
// 5. Rolling deploy: an old worker leaves jobs it cannot run to a worker that can, without
//    spending their attempts.
// ---------------------------------------------------------------------------------------

/// The old version of `test-worker`'s `effect` kind: it still requires a `format` field
/// that the new version dropped, so it cannot read the new version's payloads.
#[job(name = "effect", key = "{name}")]
async fn old_effect(
    name: String,
    sleep_ms: u64,
    fail_first: u32,
    format: String,
) -> Result<(), JobError> {
    let _ = (name, sleep_ms, fail_first, format);
    Err("the old version must never run a new payload".into())
}

async fn an_old_worker_leaves_jobs_it_cannot_run_to_a_newer_one_without_spending_attempts(
    backend: Backend,
) {
    let (url, queue) = process_database(backend, "outcomes_deploy").await;
    // Written by the new version: `effect` with its new arguments (one attempt: spending it
    // would lose the job), and `slow`, a kind the old version does not have (three).
    let new_shape = insert_raw(
        &queue,
        "effect",
        b"deploy-new-shape",
        r#"{"name": "deploy-new-shape", "sleep_ms": 0, "fail_first": 0}"#,
        1,
        10_000,
    )
    .await;
    let new_kind = insert_raw(
        &queue,
        "slow",
        b"deploy-new-kind",
        r#"{"name": "deploy-new-kind", "ms": 0}"#,
        3,
        2_000,
    )
    .await;

    // The old worker claims both, twice or more, and leaves them waiting. Its other kinds
    // take `Data<Effects>`, so it is given one; none of them runs here.
    let effects = match queue.postgres_pool() {
        Some(pool) => Effects::Postgres(pool.clone()),
        None => Effects::MySql(queue.mysql_pool().unwrap().clone()),
    };
    let (handle, task) = start(quick_worker(&queue).data(effects).build().unwrap());
    for (id, budget) in [(new_shape, 1), (new_kind, 3)] {
        let (_, attempts, max, error) = wait_for(
            "the job to be put back twice",
            Duration::from_secs(15),
            || async {
                let r = row(&queue, id).await;
                let error = r.last_error.clone().unwrap_or_default();
                assert_ne!(r.status, JobStatus::Failed, "job {id} failed: {error}");
                (r.status == JobStatus::Scheduled && r.attempts >= 2).then_some((
                    r.status,
                    r.attempts,
                    r.max_attempts,
                    error,
                ))
            },
        )
        .await;
        assert_eq!(
            max - attempts,
            budget,
            "no attempt spent ({attempts} of {max})"
        );
        assert!(
            error.starts_with("waiting for a worker that can run it"),
            "{error}"
        );
        let why = if id == new_kind {
            "job kind `slow` is not registered in this worker"
        } else {
            "missing field `format`"
        };
        assert!(error.contains(why), "{error}");
    }
    // Each put-back waits longer than the last (about 1 s, 2 s, 4 s...).
    for id in [new_shape, new_kind] {
        let r = row(&queue, id).await;
        if r.status != JobStatus::Scheduled {
            continue;
        }
        let (attempts, wait_us) = (
            r.attempts,
            (r.run_at - r.updated_at).num_microseconds().unwrap(),
        );
        let base = 1_000_000i64 << (attempts - 1).min(8);
        assert!(
            wait_us >= base * 8 / 10,
            "attempt {attempts} waits {wait_us} µs"
        );
    }
    stop(&handle, task).await;

    // The new version runs both, once.
    let mut new = worker_process(&url, &[]);
    for id in [new_shape, new_kind] {
        wait_status(&queue, id, JobStatus::Done, Duration::from_secs(30)).await;
    }
    new.start_kill().unwrap();
    let mut done: Vec<(String, String)> = process_effects(&queue)
        .await
        .into_iter()
        .map(|(key, _, phase, _)| (key, phase))
        .collect();
    // By key, and by the order recorded within a key.
    done.sort_by(|a, b| a.0.cmp(&b.0));
    assert_eq!(
        done,
        [
            ("deploy-new-kind".into(), "start".into()),
            ("deploy-new-kind".into(), "done".into()),
            ("deploy-new-shape".into(), "done".into()),
        ]
    );
}

// ---------------------------------------------------------------------------------------
// 6. A job that crashes every worker that runs it ends failed after a bounded number of
//    crashes, coming back later each time.
// ---------------------------------------------------------------------------------------

async fn a_job_that_crashes_its_worker_again_and_again_ends_failed(backend: Backend) {
    let (url, queue) = process_database(backend, "outcomes_poison").await;
    // `crash` aborts its process; its lease is 1 s.
    let poison = insert_raw(
        &queue,
        "crash",
        b"poison",
        r#"{"name": "poison"}"#,
        25,
        1_000,
    )
    .await;

    let mut crashes = 0;
    let status = loop {
        let mut worker = worker_process(&url, &["--concurrency", "2"]);
        let ended = tokio::select! {
            exit = worker.wait() => Some(exit.expect("wait for the worker")),
            _ = wait_status(&queue, poison, JobStatus::Failed, Duration::from_secs(60)) => None,
        };
        match ended {
            Some(exit) => {
                assert!(!exit.success(), "the worker died of the job");
                crashes += 1;
                assert!(
                    crashes <= 5,
                    "still crashing workers after {crashes} crashes"
                );
            }
            None => {
                worker.start_kill().unwrap();
                break row(&queue, poison).await;
            }
        }
    };
    assert_eq!(crashes, 3, "three crashes, then no more");
    assert_eq!(status.attempts, 3);
    let error = status.last_error.unwrap_or_default();
    assert!(error.contains("lease expired 3 times"), "{error}");
    let effects = process_effects(&queue).await;
    let first = effects.iter().map(|e| e.3).min().expect("an effect");
    let starts: Vec<(u32, f64)> = effects
        .iter()
        .map(|e| (e.1, (e.3 - first).num_microseconds().unwrap() as f64 / 1e6))
        .collect();
    assert_eq!(
        starts.iter().map(|s| s.0).collect::<Vec<_>>(),
        [1, 2, 3],
        "{starts:?}"
    );
    // The first expiry brings it back at once (after its lease); the second after one more
    // lease (1 s, ±20 %). Read from the job's history, by the server's clock: from the
    // reclaim that recorded an expiry to the next claim. (The gaps between starts also
    // hold a new worker process's start-up, which a busy machine stretches by seconds.)
    let history = queue.attempts(poison).await.unwrap();
    assert_eq!(
        history
            .iter()
            .map(|a| (a.attempt, a.outcome))
            .collect::<Vec<_>>(),
        [1, 2, 3].map(|n| (n, jobqueue::admin::AttemptOutcome::LeaseExpired)),
        "{history:?}"
    );
    let put_back = |i: usize| {
        let next_claim = history[i + 1].started_at.expect("a claim time");
        (next_claim - history[i].ended_at)
            .num_microseconds()
            .unwrap() as f64
            / 1e6
    };
    let (first_wait, second_wait) = (put_back(0), put_back(1));
    println!(
        "from an expiry to the next claim: {first_wait:.2}s, then {second_wait:.2}s \
         (crash-to-crash: {:.2}s, then {:.2}s)",
        starts[1].1 - starts[0].1,
        starts[2].1 - starts[1].1
    );
    assert!(
        second_wait >= 0.8,
        "the second expiry put the job back for 1 s ± 20 %: {history:?}"
    );

    // An operator's retry (after a fix is deployed) starts the count again.
    assert!(queue.retry(poison).await.unwrap());
    let after = row(&queue, poison).await;
    assert_eq!((after.status, after.lease_expiries), (JobStatus::Ready, 0));
}

// ---------------------------------------------------------------------------------------
// 7. A row whose task key is not UTF-8 fails on its own; the queue goes on.
// ---------------------------------------------------------------------------------------

#[job(name = "outcomes_utf8")]
async fn utf8(ctx: JobContext, n: u32, effects: Data<Effects>) -> Result<(), JobError> {
    let _ = n;
    record_effect_in(&effects, &ctx, "done").await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_row_with_a_key_that_is_not_utf8_fails_alone_and_the_queue_goes_on() {
    let (queue, effects_pool) = fresh_queue_with_effects("outcomes_utf8").await;
    let bad = insert_raw(
        &queue,
        "outcomes_utf8",
        b"bad-\xff\xfe-key",
        r#"{"n": 1}"#,
        5,
        10_000,
    )
    .await;
    let good = queue
        .enqueue_with(Utf8 { n: 2 }, EnqueueOptions::default())
        .await
        .unwrap()
        .id();
    let (handle, task) = start(
        quick_worker(&queue)
            .data(effects_pool.clone())
            .build()
            .unwrap(),
    );
    wait_status(&queue, good, JobStatus::Done, Duration::from_secs(10)).await;
    let (status, attempts, _, error) =
        wait_for("the bad row to fail", Duration::from_secs(10), || async {
            let s = raw_state(queue.mysql_pool().unwrap(), bad).await;
            (s.0 == "failed").then_some(s)
        })
        .await;
    stop(&handle, task).await;
    assert_eq!((status.as_str(), attempts), ("failed", 1));
    assert!(
        error.contains("task_key") && error.contains("UTF-8"),
        "{error}"
    );
    assert_eq!(
        tests::effects(&effects_pool).await.len(),
        1,
        "the good job ran once"
    );
    // The row can still be read and listed, its key as near as text can say it.
    let r = row(&queue, bad).await;
    assert_eq!(r.task_key, "bad-\u{fffd}\u{fffd}-key");
    let all = queue
        .list(&jobqueue::admin::JobFilter::default(), None, 10)
        .await
        .expect("list every job")
        .jobs;
    assert_eq!(all.len(), 2);
}
