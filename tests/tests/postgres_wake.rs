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

use jobqueue::{Backend, Queue};
use jobqueue_runtime::__store::{Listening, WakeSource, READY_CHANNEL};
use sqlx::PgPool;
use tests::fresh_queue_on;

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
    let deadline = Instant::now() + Duration::from_secs(30);
    while listener.notifications_seen() < n {
        assert!(
            Instant::now() < deadline,
            "{} of {n} notifications received",
            listener.notifications_seen()
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
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
    let deadline = Instant::now() + Duration::from_secs(30);
    while listeners().await != 0 {
        assert!(
            Instant::now() < deadline,
            "the listener's session UNLISTENs"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}
