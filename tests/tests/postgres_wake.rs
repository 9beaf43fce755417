//! An idle worker on PostgreSQL waits on `LISTEN job_queue_ready` instead of polling: the
//! schema's triggers notify the channel with a job's queue when the job becomes ready (a
//! plain `INSERT` of an SQL producer included) or its queue is resumed, and the store's wake
//! source wakes the worker only for its own queues.
//!
//! The listener is tested through the store's wake source ([`Store::wake_source`]), and the
//! worker through what a user sees: a job inserted by SQL starts long before the worker's
//! fallback claim would have found it, a job of another queue is left alone, and an idle
//! worker does not claim while nothing happens.

use std::time::{Duration, Instant};

use jobqueue::{job, Backend, JobError, JobStatus, Queue, Worker};
use jobqueue_runtime::__store::{Listening, WakeSource, READY_CHANNEL};
use sqlx::PgPool;
use tests::{fresh_queue_on, row, start, stop, wait_for, wait_status};

/// A queue on a new PostgreSQL database, and its pool.
async fn pg_queue(prefix: &str) -> (Queue, PgPool) {
    let queue = fresh_queue_on(Backend::Postgres, prefix).await;
    let pool = queue.postgres_pool().expect("a PostgreSQL queue").clone();
    (queue, pool)
}

/// The listener of a wake source for `queues`, once it listens: its first wake-up says so.
async fn listening(queue: &Queue, queues: &[&str]) -> WakeSource {
    let queues: Vec<String> = queues.iter().map(|q| q.to_string()).collect();
    let source = queue.store().wake_source(&queues, false);
    let listener = source.listener().expect("PostgreSQL listens");
    tokio::time::timeout(Duration::from_secs(30), listener.woken())
        .await
        .expect("the listener connects and wakes once");
    assert!(listener.is_up());
    source
}

/// Waits (up to 30 s) until the listener has received `n` notifications in all.
async fn seen(listener: &Listening, n: u64) {
    wait_for(
        &format!("{n} notifications"),
        Duration::from_secs(30),
        || async { (listener.notifications_seen() >= n).then_some(()) },
    )
    .await;
}

/// A ready row, as an SQL producer writes it (the schema's defaults for the rest).
async fn insert_ready(pool: &PgPool, queue: &str, key: &str) {
    sqlx::query(
        "INSERT INTO job_queue (queue, kind, task_key, payload, status) \
         VALUES ($1, 'wake_kind', $2, '{}', 'ready')",
    )
    .bind(queue)
    .bind(key)
    .execute(pool)
    .await
    .expect("insert");
}

async fn notify(pool: &PgPool, queue: &str) {
    sqlx::query("SELECT pg_notify($1, $2)")
        .bind(READY_CHANNEL)
        .bind(queue)
        .execute(pool)
        .await
        .expect("notify");
}

/// A plain INSERT of a ready row from another connection wakes the listener as soon as it
/// commits: well within a second even on a loaded machine (it takes milliseconds).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plain_insert_of_a_ready_row_wakes_the_listener_at_once() {
    let (queue, pool) = pg_queue("wake_insert").await;
    let source = listening(&queue, &["mail"]).await;
    let listener = source.listener().unwrap();
    let wakes = listener.wakes();
    let sent = Instant::now();
    insert_ready(&pool, "mail", "k1").await;
    tokio::time::timeout(Duration::from_secs(1), source.woken())
        .await
        .expect("woken within a second of the INSERT");
    let took = sent.elapsed();
    assert_eq!(listener.wakes(), wakes + 1, "one wake-up for one job");
    eprintln!("woken {took:?} after the INSERT was sent");
}

/// Notifications for other queues are received but wake nobody; one for a served queue
/// does. They arrive in commit order on the one connection, so once the last has been
/// received every one before it has been counted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_notification_for_another_queue_does_not_wake_the_worker() {
    let (queue, pool) = pg_queue("wake_other").await;
    let source = listening(&queue, &["mail", "sms"]).await;
    let listener = source.listener().unwrap();
    let (seen0, wakes0) = (listener.notifications_seen(), listener.wakes());
    notify(&pool, "reports").await;
    insert_ready(&pool, "Mail", "k1").await;
    insert_ready(&pool, "mail ", "k2").await;
    notify(&pool, "sms").await;
    seen(listener, seen0 + 4).await;
    assert_eq!(
        listener.wakes(),
        wakes0 + 1,
        "only the served queue woke it (names compare exactly)"
    );
}

/// Every way a job becomes ready notifies, once per queue and transaction; a job that
/// becomes anything else does not, nor does a row that was ready already.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_way_a_job_becomes_ready_notifies_its_queue_once_per_transaction() {
    let (queue, pool) = pg_queue("wake_ways").await;
    let source = listening(&queue, &["mail"]).await;
    let listener = source.listener().unwrap();
    // The marker: a notification for an unserved queue, sent after what is tested. When it
    // has arrived, everything committed before it has.
    let mut total = listener.notifications_seen();

    // A scheduled row: nothing.
    let wakes = listener.wakes();
    sqlx::query(
        "INSERT INTO job_queue (queue, kind, task_key, payload) \
         VALUES ('mail', 'wake_kind', 'later', '{}')",
    )
    .execute(&pool)
    .await
    .unwrap();
    notify(&pool, "marker").await;
    total += 1;
    seen(listener, total).await;
    assert_eq!(listener.wakes(), wakes, "a scheduled row wakes nobody");

    // Its promotion: one.
    sqlx::query("UPDATE job_queue SET status = 'ready' WHERE task_key = 'later'")
        .execute(&pool)
        .await
        .unwrap();
    notify(&pool, "marker").await;
    total += 2;
    seen(listener, total).await;
    assert_eq!(listener.wakes(), wakes + 1, "a promotion wakes");

    // An update that leaves it ready: nothing.
    let wakes = listener.wakes();
    sqlx::query("UPDATE job_queue SET status = 'ready', priority = 3 WHERE task_key = 'later'")
        .execute(&pool)
        .await
        .unwrap();
    // Made running: nothing.
    sqlx::query("UPDATE job_queue SET status = 'running' WHERE task_key = 'later'")
        .execute(&pool)
        .await
        .unwrap();
    notify(&pool, "marker").await;
    total += 1;
    seen(listener, total).await;
    assert_eq!(
        listener.wakes(),
        wakes,
        "ready to ready, or to running, is silent"
    );

    // A bulk insert of 50 ready rows and a retry in one transaction: one notification.
    let mut tx = pool.begin().await.unwrap();
    sqlx::query(
        "INSERT INTO job_queue (queue, kind, task_key, payload, status) \
         SELECT 'mail', 'wake_kind', 'bulk' || n, '{}', 'ready' FROM generate_series(1, 50) n",
    )
    .execute(&mut *tx)
    .await
    .unwrap();
    sqlx::query("UPDATE job_queue SET status = 'ready' WHERE task_key = 'later'")
        .execute(&mut *tx)
        .await
        .unwrap();
    tx.commit().await.unwrap();
    notify(&pool, "marker").await;
    total += 2;
    seen(listener, total).await;
    assert_eq!(
        listener.wakes(),
        wakes + 1,
        "one wake-up for the transaction"
    );

    // A rolled-back insert: nothing.
    let wakes = listener.wakes();
    let mut tx = pool.begin().await.unwrap();
    sqlx::query(
        "INSERT INTO job_queue (queue, kind, task_key, payload, status) \
         VALUES ('mail', 'wake_kind', 'undone', '{}', 'ready')",
    )
    .execute(&mut *tx)
    .await
    .unwrap();
    tx.rollback().await.unwrap();
    notify(&pool, "marker").await;
    total += 1;
    seen(listener, total).await;
    assert_eq!(listener.wakes(), wakes, "a rolled back job wakes nobody");

    // A pause wakes nobody; its resume does.
    sqlx::query("INSERT INTO job_queue_pause (queue, paused_at) VALUES ('mail', job_queue_now())")
        .execute(&pool)
        .await
        .unwrap();
    notify(&pool, "marker").await;
    total += 1;
    seen(listener, total).await;
    assert_eq!(listener.wakes(), wakes, "a pause wakes nobody");
    sqlx::query("DELETE FROM job_queue_pause WHERE queue = 'mail'")
        .execute(&pool)
        .await
        .unwrap();
    notify(&pool, "marker").await;
    total += 2;
    seen(listener, total).await;
    assert_eq!(listener.wakes(), wakes + 1, "a resume wakes");
}

/// The listener's connection is one of the queue's pool: it holds it for as long as it
/// listens, and gives it back when dropped (with `UNLISTEN`, so the pool's next user gets no
/// notifications).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_listener_holds_one_connection_of_the_pool_and_gives_it_back() {
    let (queue, pool) = pg_queue("wake_pool").await;
    let listeners = || async {
        let n: i64 = sqlx::query_scalar(
            "SELECT COUNT(*) FROM pg_stat_activity \
             WHERE datname = current_database() AND query = 'LISTEN \"job_queue_ready\"'",
        )
        .fetch_one(&pool)
        .await
        .unwrap();
        n
    };
    let source = listening(&queue, &["mail"]).await;
    assert_eq!(listeners().await, 1, "one session listens");
    drop(source);
    wait_for(
        "the listener's session to UNLISTEN",
        Duration::from_secs(30),
        || async { (listeners().await == 0).then_some(()) },
    )
    .await;
}

// ---------------------------------------------------------------------------------------
// The worker.
// ---------------------------------------------------------------------------------------

#[job(name = "pg_wake_job", queue = "pg_wake")]
async fn wake_job(n: u32) -> Result<(), JobError> {
    let _ = n;
    Ok(())
}

/// A job of `queue` as an SQL producer inserts it: ready, with the kind's payload.
async fn produce(pool: &PgPool, queue: &str, key: &str) -> u64 {
    let id: i64 = sqlx::query_scalar(
        "INSERT INTO job_queue (queue, kind, task_key, payload, status) \
         VALUES ($1, 'pg_wake_job', $2, '{\"n\": 1}', 'ready') RETURNING id",
    )
    .bind(queue)
    .bind(key)
    .fetch_one(pool)
    .await
    .expect("insert");
    id as u64
}

/// Claims the worker has made (each is a statement or a transaction on the server), and
/// the idle probes (none on PostgreSQL).
fn claims(m: &jobqueue::metrics::MetricsSnapshot) -> u64 {
    m.claimed
        + m.empty_idle
        + m.empty_contended
        + m.empty_leased_only
        + m.empty_paused
        + m.database_errors
}

/// A worker of `queues` whose fallback claim comes every `fallback`, once it listens and
/// its first two claims (at start, and the one the listener's connection asks for) found
/// nothing.
async fn idle_worker(
    queue: &Queue,
    queues: &[&str],
    fallback: Duration,
) -> (jobqueue::WorkerHandle, tests::WorkerTask) {
    let (handle, task) = start(
        Worker::builder(queue.clone())
            .queues(queues.iter().copied())
            // No poll before the listener listens: its claims are the first one and the one
            // the listener's connection asks for, then only those of notifications and of
            // the fallback.
            .poll_interval(Duration::from_secs(600), Duration::from_secs(600))
            .listen_fallback(fallback)
            .maintenance(false)
            .build()
            .expect("build"),
    );
    wait_for(
        "an empty claim after listening",
        Duration::from_secs(30),
        || async {
            let m = handle.metrics();
            (m.empty_idle >= 2).then_some(())
        },
    )
    .await;
    (handle, task)
}

/// (a) An idle worker sends nothing while nothing happens: over a quiet window shorter than
/// its fallback it claims nothing and probes nothing; with a short fallback it claims about
/// once per fallback interval, never more (a MySQL worker would have probed 50 times in
/// the window at its default interval).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_worker_sends_nothing_but_its_fallback_claims() {
    let (queue, _pool) = pg_queue("wake_quiet").await;
    let (handle, task) = idle_worker(&queue, &["pg_wake"], Duration::from_secs(600)).await;
    let before = handle.metrics();
    // The quiet window: what is measured is that nothing happens in it.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let after = handle.metrics();
    assert_eq!(claims(&after), claims(&before), "no claim while idle");
    assert_eq!(after.idle_probes, 0, "no probe on PostgreSQL");
    stop(&handle, task).await;

    let fallback = Duration::from_millis(500);
    let (handle, task) = idle_worker(&queue, &["pg_wake"], fallback).await;
    let before = handle.metrics();
    let window = Instant::now();
    tokio::time::sleep(Duration::from_secs(3)).await;
    let after = handle.metrics();
    let elapsed = window.elapsed();
    let made = claims(&after) - claims(&before);
    let most = (elapsed.as_millis() / fallback.as_millis()) as u64 + 1;
    assert!(
        (1..=most).contains(&made),
        "{made} claims in {elapsed:?} with a fallback every {fallback:?}"
    );
    stop(&handle, task).await;
}

/// (b) A job that an SQL producer inserts starts at once: it is done long before the
/// fallback claim or a poll (10 minutes away) would have found it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_inserted_by_sql_starts_without_waiting_for_the_fallback() {
    let (queue, pool) = pg_queue("wake_sql").await;
    let (handle, task) = idle_worker(&queue, &["pg_wake"], Duration::from_secs(600)).await;
    for n in 0..3 {
        let sent = Instant::now();
        let id = produce(&pool, "pg_wake", &format!("sql-{n}")).await;
        let done = wait_status(&queue, id, JobStatus::Done, Duration::from_secs(20)).await;
        assert_eq!(done.attempts, 1);
        eprintln!("job {n} done {:?} after its INSERT", sent.elapsed());
    }
    stop(&handle, task).await;
}

/// (c) A job of a queue the worker does not serve is left alone, whatever its notification
/// does; the worker's own queue's job, inserted after it, is done.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_of_another_queue_is_not_taken() {
    let (queue, pool) = pg_queue("wake_others").await;
    let (handle, task) = idle_worker(&queue, &["pg_wake"], Duration::from_secs(600)).await;
    let other = produce(&pool, "pg_wake_other", "other").await;
    let mine = produce(&pool, "pg_wake", "mine").await;
    wait_status(&queue, mine, JobStatus::Done, Duration::from_secs(20)).await;
    stop(&handle, task).await;
    let other = row(&queue, other).await;
    assert_eq!(other.status, JobStatus::Ready);
    assert_eq!(other.attempts, 0);
    assert_eq!(handle.metrics().claimed, 1);
}

/// A worker process at the defaults (a pool of 2) holds at most 4 sessions, idle or running
/// a job: the listener and one more of the queue's pool, and the lease store's two. One of
/// them listens.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_at_the_defaults_holds_at_most_four_connections() {
    // Empty: no queue of the test's own holds sessions there.
    let db = jobqueue::testing::TestDatabase::empty_on(Backend::Postgres, "wake_conns")
        .await
        .expect("a PostgreSQL test database");
    let queue = Queue::connect(db.url())
        .await
        .expect("connect at the defaults");
    queue.migrate().await.expect("migrate");
    // The test's own session, not named like the queue's.
    let observer = PgPool::connect(db.url()).await.expect("observer");
    let sessions = || async {
        let (all, listening): (i64, i64) = sqlx::query_as(
            "SELECT COUNT(*), COUNT(*) FILTER (WHERE query LIKE 'LISTEN %') \
             FROM pg_stat_activity \
             WHERE datname = current_database() AND application_name = 'jobqueue'",
        )
        .fetch_one(&observer)
        .await
        .expect("count sessions");
        (all, listening)
    };
    let (handle, task) = idle_worker(&queue, &["pg_wake"], Duration::from_secs(600)).await;
    let (idle, listening) = sessions().await;
    assert!(idle <= 4, "{idle} sessions while idle");
    assert_eq!(listening, 1, "one session listens");
    let pool = queue.postgres_pool().unwrap().clone();
    for n in 0..5 {
        let id = produce(&pool, "pg_wake", &format!("conn-{n}")).await;
        wait_status(&queue, id, JobStatus::Done, Duration::from_secs(20)).await;
        let (busy, _) = sessions().await;
        assert!(busy <= 4, "{busy} sessions after a job");
    }
    stop(&handle, task).await;
}
