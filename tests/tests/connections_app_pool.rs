//! One pool for the application and the queue: `jobqueue::pool_options` gives the pool the
//! session safety of the queue's own pool (a `ROLLBACK` before each use, a bound on idle
//! transactions) without switching the application's transactions to READ COMMITTED.

use std::time::Duration;

use jobqueue::{job, JobStatus, Queue};
use sqlx::mysql::MySqlPool;
use sqlx::{Connection, Executor};
use tests::{fresh_database, init_tracing, quick_worker, start, stop, wait_status};

#[job(name = "app_pool_ping", queue = "app_pool")]
async fn ping(n: u32) {
    let _ = n;
}

/// A session variable of `conn`, or `None` where the server does not know it.
async fn variable(conn: &mut sqlx::MySqlConnection, name: &str) -> Option<String> {
    sqlx::query_scalar::<_, String>(&format!("SELECT CAST(@@{name} AS CHAR)"))
        .fetch_one(conn)
        .await
        .ok()
}

/// The isolation level of a session: `transaction_isolation` on MySQL 8 and MariaDB 11.1+,
/// `tx_isolation` before.
async fn isolation(conn: &mut sqlx::MySqlConnection, scope: &str) -> String {
    match variable(conn, &format!("{scope}.transaction_isolation")).await {
        Some(level) => level,
        None => variable(conn, &format!("{scope}.tx_isolation"))
            .await
            .expect("the server names its isolation level"),
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_pool_from_pool_options_runs_jobs_and_keeps_the_applications_isolation() {
    init_tracing();
    let url = fresh_database("app_pool").await;
    let pool: MySqlPool = jobqueue::pool_options()
        .max_connections(4)
        .connect(&url)
        .await
        .unwrap();
    let queue = Queue::from_pool(pool.clone()).await.unwrap();
    queue.migrate().await.unwrap();
    let id = queue.enqueue(Ping { n: 1 }).await.unwrap().id();
    let (handle, task) = start(quick_worker(&queue).queues(["app_pool"]).build().unwrap());
    wait_status(&queue, id, JobStatus::Done, Duration::from_secs(20)).await;
    stop(&handle, task).await;

    // The application's sessions keep the server's isolation level...
    let mut conn = pool.acquire().await.unwrap();
    let global = isolation(&mut conn, "GLOBAL").await;
    assert_eq!(isolation(&mut conn, "SESSION").await, global);
    // ...and have a bound on idle transactions: MariaDB's own setting, or MySQL's
    // `wait_timeout`.
    match variable(&mut conn, "SESSION.idle_transaction_timeout").await {
        Some(secs) => assert_eq!(secs, "30"),
        None => assert_eq!(
            variable(&mut conn, "SESSION.wait_timeout").await.as_deref(),
            Some("300")
        ),
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_connection_left_inside_a_transaction_is_rolled_back_before_its_next_use() {
    init_tracing();
    let url = fresh_database("app_pool_rollback").await;
    let pool: MySqlPool = jobqueue::pool_options()
        .max_connections(1)
        .connect(&url)
        .await
        .unwrap();
    let mut other = sqlx::MySqlConnection::connect(&url).await.unwrap();
    other
        .execute("CREATE TABLE orders (id INT PRIMARY KEY) ENGINE = InnoDB")
        .await
        .unwrap();

    // A transaction the driver does not know about (as a future dropped between `BEGIN`
    // and the driver's bookkeeping leaves one), back in the pool with a write in it.
    let mut conn = pool.acquire().await.unwrap();
    conn.execute("BEGIN").await.unwrap();
    conn.execute("INSERT INTO orders (id) VALUES (1)")
        .await
        .unwrap();
    drop(conn);

    // The same connection (the pool has one), handed out again: its autocommit write is
    // visible to others at once, and the abandoned one is gone.
    let mut conn = pool.acquire().await.unwrap();
    conn.execute("INSERT INTO orders (id) VALUES (2)")
        .await
        .unwrap();
    let ids: Vec<i32> = sqlx::query_scalar("SELECT id FROM orders ORDER BY id")
        .fetch_all(&mut other)
        .await
        .unwrap();
    assert_eq!(ids, [2]);
}
