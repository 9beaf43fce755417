//! The sessions of a real deployment on one server: server-side prepared statements of many
//! processes stay within a bound (and a low cap is reported at start-up), clients that die
//! inside a transaction release their locks, a connection returned inside a transaction (a
//! future dropped at the wrong moment) does not swallow a later enqueue, a duplicate under
//! snapshot isolation and three sessions racing for one key keep the callers' work, and a
//! pause row another session locks keeps its queue paused. Each test failed before the
//! change it guards, except where its doc comment says it confirms behaviour that already
//! held.
//!
//! Every test has its own database (or its own private server, where it changes global
//! server settings).

use std::time::{Duration, Instant};

use jobqueue::testing::TestServer;
use jobqueue::{job, Enqueued, JobContext, JobStatus, Queue, QueueConfig};
use sqlx::mysql::MySqlConnection;
use sqlx::{Connection, Executor, Row};
use tests::{
    fresh_database, fresh_queue, init_tracing, migrated_queue, quick_worker, start, stop, wait_for,
};

/// A job that does nothing; the tests look at rows, not at effects.
#[job(name = "hardening_conn_noop", queue = "conn")]
async fn noop(n: u64) {
    let _ = n;
}

/// A job that fails its first attempt, so that runs go through retries too.
#[job(
    name = "hardening_conn_flaky",
    queue = "conn",
    backoff = "constant(10ms)"
)]
async fn flaky(ctx: JobContext, n: u64) -> Result<(), JobError> {
    let _ = n;
    if ctx.attempt() == 1 {
        return Err("first attempts fail".into());
    }
    Ok(())
}

use jobqueue::JobError;

async fn global_status(conn: &mut MySqlConnection, name: &str) -> u64 {
    let row = sqlx::query("SHOW GLOBAL STATUS WHERE Variable_name = ?")
        .bind(name)
        .fetch_one(&mut *conn)
        .await
        .expect("read a status variable");
    let value: String = row
        .try_get::<String, _>(1)
        .or_else(|_| {
            row.try_get::<Vec<u8>, _>(1)
                .map(|b| String::from_utf8(b).unwrap())
        })
        .unwrap();
    value.parse().unwrap()
}

// ---------------------------------------------------------------------------------------
// Prepared statements per process are bounded
// ---------------------------------------------------------------------------------------

/// Statements one queue connection may keep prepared (the statement cache of the pool
/// `Queue::connect` opens), and one lease-store connection of a worker.
const MAIN_STATEMENTS: u64 = 24;
const LEASE_STATEMENTS: u64 = 16;
/// Statements the test's own connection prepares (the status query).
const ADMIN_STATEMENTS: u64 = 1;

/// Bulk and single enqueues with every list arity of the key lookup, through `queue`.
async fn enqueue_variety(queue: &Queue, round: u64) {
    // Bulk enqueues of every arity of the key lookup.
    let mut n = round * 1_000_000;
    for size in [1u64, 2, 9, 33, 129, 257, 513] {
        let jobs: Vec<Noop> = (n..n + size).map(|n| Noop { n }).collect();
        n += size;
        queue.enqueue_many(jobs).await.expect("bulk enqueue");
    }
    for i in 0..5 {
        let _ = queue.enqueue(Flaky { n: n + i }).await.expect("enqueue");
    }
}

/// Runs every statement of the claim protocol, with every list arity, through `queue`'s
/// store, on the jobs [`enqueue_variety`] left: no worker may serve the queue meanwhile.
async fn protocol_variety(queue: &Queue, round: u64) {
    let store = queue.store();
    // Claims of every arity, then every way to end them.
    let owner = format!("variety-{round}");
    let mut claimed = Vec::new();
    for limit in [1usize, 5, 20, 100] {
        claimed.extend(store.claim("conn", &owner, limit).await.expect("claim"));
    }
    assert!(claimed.len() >= 100, "claimed {}", claimed.len());
    let ids: Vec<u64> = claimed.iter().map(|c| c.id).collect();
    for take in [1usize, 5, 20, 100] {
        store
            .renew(&owner, &ids[..take], true)
            .await
            .expect("renew");
        store
            .renew(&owner, &ids[..take], false)
            .await
            .expect("renew");
    }
    let mut rest = claimed.as_slice();
    for take in [1usize, 5, 20] {
        let (now, later) = rest.split_at(take);
        let claims: Vec<(u64, u32)> = now.iter().map(|c| (c.id, c.attempt)).collect();
        store.complete(&owner, &claims).await.expect("complete");
        rest = later;
    }
    let hows = [
        jobqueue_runtime::__store::Finish::Retry {
            delay: Duration::from_millis(1),
            error: "again".into(),
        },
        jobqueue_runtime::__store::Finish::Fail { error: "no".into() },
        jobqueue_runtime::__store::Finish::Cancelled {
            error: "stop".into(),
        },
        jobqueue_runtime::__store::Finish::HandBack,
    ];
    for (c, how) in rest.iter().zip(hows.iter().cycle()) {
        store
            .finish(&owner, c.id, c.attempt, how)
            .await
            .expect("finish");
    }
    store.promote(500).await.expect("promote");
    store.reclaim(100).await.expect("reclaim");
    let _ = store
        .classify_empty(&["conn".to_string()])
        .await
        .expect("classify");
    queue.counts(None).await.expect("counts");
    queue
        .prune(JobStatus::Done, Duration::ZERO)
        .await
        .expect("prune");
    queue.stats().await.expect("stats");
}

/// Every queue connection keeps at most a fixed number of server-side
/// prepared statements, so the number per process has a bound (pool size × per-connection
/// cache, plus a worker's two lease-store connections), and several processes (here three
/// queues with pools of their own, each with a worker, standing in for three processes)
/// keep working on a server whose `max_prepared_stmt_count` is just that bound times three.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn prepared_statements_per_process_stay_within_the_documented_bound() {
    init_tracing();
    let server = TestServer::start().expect("a private server");
    let url = server.create_database("prepared").await.unwrap();
    let mut admin = MySqlConnection::connect(server.url()).await.unwrap();
    const PROCESSES: u64 = 3;
    let per_process = MAIN_STATEMENTS + 2 * LEASE_STATEMENTS;
    // This connection and the migration's own prepare a few statements too.
    let cap = PROCESSES * per_process + 8;
    admin
        .execute(format!("SET GLOBAL max_prepared_stmt_count = {cap}").as_str())
        .await
        .unwrap();

    let config = QueueConfig::default().max_connections(1);
    let mut queues = Vec::new();
    for _ in 0..PROCESSES {
        let queue = Queue::connect_with(&url, config.clone()).await.unwrap();
        queues.push(queue);
    }
    queues[0].migrate().await.unwrap();
    assert_eq!(
        queues[0].server_info().max_prepared_stmt_count,
        Some(cap),
        "the queue reads the server's cap at start-up"
    );
    // Every kind of statement a long-lived worker process meets over hours, in a few seconds.
    for (round, queue) in queues.iter().enumerate() {
        enqueue_variety(queue, round as u64).await;
        protocol_variety(queue, round as u64).await;
    }
    // Each queue connection has now sent far more distinct statements than it may keep.
    let held = global_status(&mut admin, "Prepared_stmt_count").await;
    assert!(
        held <= PROCESSES * MAIN_STATEMENTS + ADMIN_STATEMENTS,
        "{PROCESSES} one-connection queues hold {held} prepared statements, over {MAIN_STATEMENTS} per connection"
    );

    // Now the workers, each with its lease store, on the same server.
    let mut workers = Vec::new();
    for queue in &queues {
        let worker = quick_worker(queue).queues(["conn"]).build().unwrap();
        workers.push(start(worker));
    }
    // The workers claim, renew and end these themselves (a claim of the test's own would
    // race them for the jobs).
    for (round, queue) in queues.iter().enumerate() {
        enqueue_variety(queue, 10 + round as u64).await;
    }
    wait_for("every job to end", Duration::from_secs(60), || async {
        let open: i64 = sqlx::query_scalar(
            "SELECT COUNT(*) FROM job_queue WHERE status IN ('ready', 'scheduled', 'running')",
        )
        .fetch_one(queues[0].mysql_pool().unwrap())
        .await
        .unwrap();
        (open == 0).then_some(())
    })
    .await;
    let held_with_workers = global_status(&mut admin, "Prepared_stmt_count").await;
    assert!(held_with_workers <= cap, "{held_with_workers} > {cap}");
    println!("prepared statements: {held} held by three one-connection queues, {held_with_workers} with their workers (cap {cap})");
    for (handle, task) in workers {
        stop(&handle, task).await;
        let m = handle.metrics();
        assert_eq!(m.database_errors, 0, "{m:?}");
        assert_eq!(m.lease_lost, 0, "{m:?}");
    }
}

/// A queue that connects to a server where few more processes fit under
/// `max_prepared_stmt_count` says so at start-up, with the figures, before renewals start
/// failing with error 1461.
#[tokio::test(flavor = "current_thread")]
async fn a_low_prepared_statement_cap_is_reported_at_start_up() {
    let (logs, _guard) = tests::LogCapture::install("jobqueue_runtime=info");
    let server = TestServer::start().expect("a private server");
    let url = server.create_database("prepared_warn").await.unwrap();
    let mut admin = MySqlConnection::connect(server.url()).await.unwrap();
    admin
        .execute("SET GLOBAL max_prepared_stmt_count = 1000")
        .await
        .unwrap();
    // 1000 / (2 × 24 + 2 × 16) = 12 processes of the default shape.
    let queue = Queue::connect(&url).await.unwrap();
    assert_eq!(queue.server_info().max_prepared_stmt_count, Some(1000));
    let warned = logs.lines_with(&["WARN", "max_prepared_stmt_count", "processes_that_fit=12"]);
    assert_eq!(warned.len(), 1, "{}", logs.text());

    // With the server's default cap, no warning.
    admin
        .execute("SET GLOBAL max_prepared_stmt_count = 16382")
        .await
        .unwrap();
    let _quiet = Queue::connect(&url).await.unwrap();
    assert_eq!(logs.lines_with(&["WARN"]).len(), 1, "{}", logs.text());
}

// ---------------------------------------------------------------------------------------
// A session that goes silent inside a transaction releases its locks
// ---------------------------------------------------------------------------------------

/// A library session (a connection of the queue's own pool) that
/// stops talking in the middle of a transaction holding claimed rows, as a crashed or
/// partitioned host would, loses them within the queue's idle-transaction bound (30 s by
/// default): the server ends the session and another claimer gets the rows.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rows_locked_by_a_silent_session_become_claimable_within_the_bound() {
    init_tracing();
    let queue = fresh_queue("conn_silent").await;
    for n in 0..5 {
        let _ = queue.enqueue(Noop { n }).await.unwrap();
    }
    let mut silent = queue.mysql_pool().unwrap().acquire().await.unwrap();
    silent.execute("BEGIN").await.unwrap();
    let locked: Vec<u64> = sqlx::query_scalar(
        "SELECT id FROM job_queue WHERE queue = 'conn' AND status = 'ready' \
         ORDER BY priority, id LIMIT 5 FOR UPDATE SKIP LOCKED",
    )
    .fetch_all(&mut *silent)
    .await
    .unwrap();
    assert_eq!(locked.len(), 5);

    let store = queue.store();
    assert!(store.claim("conn", "other", 10).await.unwrap().is_empty());
    let t0 = Instant::now();
    let claimed = wait_for(
        "the silent session's rows to be claimable",
        Duration::from_secs(30 + 20),
        || async {
            let c = store.claim("conn", "other", 10).await.unwrap();
            (!c.is_empty()).then_some(c)
        },
    )
    .await;
    let waited = t0.elapsed();
    assert_eq!(claimed.len(), 5);
    // The margin leaves a busy machine room for the server's kill and the claims after it,
    // and still tells the 30 s timeout from none or a longer one.
    assert!(waited <= Duration::from_secs(30 + 10), "waited {waited:?}");
    println!("rows came free after {waited:?}");
    drop(silent);
}

// ---------------------------------------------------------------------------------------
// A duplicate inside a snapshot-isolation transaction
// ---------------------------------------------------------------------------------------

/// Confirms a guarantee that already held (on MariaDB 10.11; the variable is on by default
/// from 11.6.2). With `innodb_snapshot_isolation=ON`, a duplicate
/// `enqueue_in` whose existing row was committed after the caller's snapshot began
/// reports the duplicate, and the caller's transaction still commits its own rows.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_duplicate_under_snapshot_isolation_keeps_the_callers_transaction() {
    init_tracing();
    let url = fresh_database("conn_snapshot").await;
    let queue = migrated_queue(&url).await;
    let mut app = MySqlConnection::connect(&url).await.unwrap();
    app.execute("CREATE TABLE orders (id INT PRIMARY KEY)")
        .await
        .unwrap();
    app.execute("SET SESSION innodb_snapshot_isolation = ON")
        .await
        .unwrap();
    let (level, snapshot): (String, i64) =
        sqlx::query_as("SELECT CAST(@@tx_isolation AS CHAR), @@innodb_snapshot_isolation + 0")
            .fetch_one(&mut app)
            .await
            .unwrap();
    assert_eq!((level.as_str(), snapshot), ("REPEATABLE-READ", 1));

    let mut tx = app.begin().await.unwrap();
    let _: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM job_queue")
        .fetch_one(&mut *tx)
        .await
        .unwrap();
    let late = queue.enqueue(Noop { n: 1 }).await.unwrap();
    sqlx::query("INSERT INTO orders (id) VALUES (1)")
        .execute(&mut *tx)
        .await
        .unwrap();
    let seen = queue.enqueue_in(&mut tx, Noop { n: 1 }).await;
    match seen {
        Ok(e) => assert_eq!(e.duplicate_of(), Some(late.id())),
        Err(e) => panic!("a duplicate under snapshot isolation failed: {e}"),
    }
    let fresh = queue.enqueue_in(&mut tx, Noop { n: 2 }).await.unwrap();
    assert!(fresh.is_new());
    tx.commit().await.unwrap();
    let orders: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM orders")
        .fetch_one(&mut app)
        .await
        .unwrap();
    assert_eq!(orders, 1, "the caller's own row was committed");
    assert!(queue.job(fresh.id()).await.unwrap().is_some());
}

// ---------------------------------------------------------------------------------------
// A connection returned with an open transaction does not swallow a later enqueue
// ---------------------------------------------------------------------------------------

/// A pooled connection that comes back to the pool with a
/// transaction the driver does not know about (what dropping `run_until` in the middle of
/// `BEGIN` can leave) does not make a later autocommit enqueue vanish.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_enqueue_after_a_leaked_transaction_is_committed() {
    init_tracing();
    let url = fresh_database("conn_leaked_tx").await;
    migrated_queue(&url).await;
    let queue = Queue::connect_with(&url, QueueConfig::default().max_connections(1))
        .await
        .unwrap();
    let mut conn = queue.mysql_pool().unwrap().acquire().await.unwrap();
    conn.execute("START TRANSACTION").await.unwrap();
    drop(conn);

    let id = queue.enqueue(Noop { n: 7 }).await.unwrap();
    assert!(id.is_new());
    queue.mysql_pool().unwrap().close().await;

    let again = Queue::connect(&url).await.unwrap();
    assert!(
        again.job(id.id()).await.unwrap().is_some(),
        "job {} was reported enqueued but is not in the table",
        id.id()
    );
}

// ---------------------------------------------------------------------------------------
// Three sessions racing for one key
// ---------------------------------------------------------------------------------------

/// Two plain enqueues of one key, both waiting on a third session's
/// uncommitted insert of it, deadlock when that session rolls back (InnoDB's documented
/// three-session duplicate-key deadlock). The enqueue chosen as the victim is retried, so
/// one reports `New` and the other `Duplicate`, and neither fails.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn racing_enqueues_of_one_key_survive_the_duplicate_key_deadlock() {
    init_tracing();
    // A private server: the count of row lock waits read below is server-wide, and no other
    // test may add to it meanwhile.
    let server = tokio::task::spawn_blocking(TestServer::start)
        .await
        .unwrap()
        .expect("a private server");
    let url = server.create_database("conn_dup_deadlock").await.unwrap();
    let queue = migrated_queue(&url).await;
    // The racers' lock waits outlast the wait for them below (the server's default is 50 s),
    // so that a wait that never sees them fails saying so, not with the racers' 1205.
    let racing = Queue::from_pool(
        tests::pool_with_session(&url, 4, "SET SESSION innodb_lock_wait_timeout = 300").await,
    )
    .await
    .expect("the racers' queue");
    let mut first = MySqlConnection::connect(&url).await.unwrap();
    let mut tx = first.begin().await.unwrap();
    assert!(queue
        .enqueue_in(&mut tx, Noop { n: 13 })
        .await
        .unwrap()
        .is_new());

    let racers: Vec<_> = (0..2)
        .map(|_| {
            let q = racing.clone();
            tokio::spawn(async move { q.enqueue(Noop { n: 13 }).await })
        })
        .collect();
    let watch = sqlx::MySqlPool::connect(&url).await.unwrap();
    // Both signals are read live: `PROCESSLIST` is built for each query, and the status
    // counter is the lock system's own. (InnoDB's `INNODB_TRX` is not: it is a snapshot that
    // is refreshed only after 100 ms without readers, so frequent polls keep seeing the
    // first one.) Nothing else on this server waits for a row lock, so two waits are the
    // two inserts, each waiting on the first session's row.
    tests::wait_for_every(
        "both enqueues to wait on the first session's insert of their key",
        Duration::from_secs(30),
        Duration::from_millis(50),
        || {
            let w = watch.clone();
            // An enqueue that ended before the race (an error) is reported below, not as a
            // time-out here.
            let ended = racers.iter().any(|r| r.is_finished());
            async move {
                if ended {
                    return Some(());
                }
                let inserting: i64 = sqlx::query_scalar(
                    "SELECT COUNT(*) FROM information_schema.PROCESSLIST \
                     WHERE DB = DATABASE() AND ID <> CONNECTION_ID() \
                       AND INFO LIKE 'INSERT INTO job_queue%'",
                )
                .fetch_one(&w)
                .await
                .unwrap();
                let waiting = tests::global_status(&w, "Innodb_row_lock_current_waits").await;
                (inserting == 2 && waiting == 2).then_some(())
            }
        },
    )
    .await;
    tx.rollback().await.unwrap();

    let mut outcomes = Vec::new();
    for r in racers {
        outcomes.push(r.await.unwrap());
    }
    let outcomes: Vec<Enqueued> = outcomes
        .into_iter()
        .map(|o| o.unwrap_or_else(|e| panic!("an enqueue failed: {e}")))
        .collect();
    let new: Vec<_> = outcomes.iter().filter(|o| o.is_new()).collect();
    assert_eq!(new.len(), 1, "{outcomes:?}");
    assert!(
        outcomes.iter().all(|o| o.id() == new[0].id()),
        "{outcomes:?}"
    );
    let rows: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM job_queue")
        .fetch_one(queue.mysql_pool().unwrap())
        .await
        .unwrap();
    assert_eq!(rows, 1);
    // The race ran as intended: the deadlock happened, and its victim was retried.
    let metrics = racing.metrics();
    assert!(
        metrics.conflict_retries >= 1,
        "no deadlock was retried: {metrics:?}"
    );
}

// ---------------------------------------------------------------------------------------
// A paused queue stays paused while its pause row is locked
// ---------------------------------------------------------------------------------------

/// Confirms a guarantee that already held: a claim reads a queue's pause row without
/// locking it, so a pause row locked by another session (an operator's transaction) is
/// not skipped by SKIP LOCKED, and two claimers and two workers claim nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_queue_stays_paused_while_its_pause_row_is_locked() {
    init_tracing();
    let url = fresh_database("conn_pause").await;
    let queue = migrated_queue(&url).await;
    for n in 0..20 {
        let _ = queue.enqueue(Noop { n }).await.unwrap();
    }
    queue.pause("conn").await.unwrap();
    let mut operator = MySqlConnection::connect(&url).await.unwrap();
    let mut tx = operator.begin().await.unwrap();
    let locked: i64 =
        sqlx::query_scalar("SELECT COUNT(*) FROM job_queue_pause WHERE queue = 'conn' FOR UPDATE")
            .fetch_one(&mut *tx)
            .await
            .unwrap();
    assert_eq!(locked, 1);

    // Bounded: a claim that locked the pause row would wait for the server's lock wait
    // timeout, and be retried, for minutes.
    let store = queue.store();
    let (a, b) = tokio::time::timeout(Duration::from_secs(10), async {
        tokio::join!(
            store.claim("conn", "claimer-a", 10),
            store.claim("conn", "claimer-b", 10)
        )
    })
    .await
    .expect("claims that do not wait for the locked pause row");
    assert!(a.unwrap().is_empty() && b.unwrap().is_empty());

    let workers: Vec<_> = (0..2)
        .map(|_| {
            // Claims are under test, so no idle probe stands in for them (the probe's read
            // of the pause table is a plain one too).
            let worker = quick_worker(&queue).queues(["conn"]).idle_probe(None);
            start(worker.build().unwrap())
        })
        .collect();
    // Each worker polls several times and finds the queue paused each time.
    for (handle, _) in &workers {
        wait_for("paused polls", Duration::from_secs(20), || async {
            (handle.metrics().empty_paused >= 5).then_some(())
        })
        .await;
    }
    assert_eq!(tests::count_status(&queue, JobStatus::Ready).await, 20);
    for (handle, _) in &workers {
        assert_eq!(handle.metrics().claimed, 0);
    }
    tx.rollback().await.unwrap();
    queue.resume("conn").await.unwrap();
    wait_for(
        "the resumed queue to drain",
        Duration::from_secs(20),
        || async { (tests::count_status(&queue, JobStatus::Done).await == 20).then_some(()) },
    )
    .await;
    for (handle, task) in workers {
        stop(&handle, task).await;
    }
}
