//! jobqueue's migrations in a database whose schema an application manages too: a history
//! table of its own beside sqlx's `_sqlx_migrations`, adoption of a database migrated by
//! 0.1, concurrent `migrate` calls, the SQL for other migration tools, and the version check
//! at worker start. Concurrent migrations, the version check and the printed SQL are tested
//! on both databases.

use std::path::Path;
use std::time::Duration;

use jobqueue::testing::TestDatabase;
use jobqueue::{job, Backend, Error, JobContext, JobStatus, Queue};
use sqlx::migrate::Migrator;
use sqlx::{Connection as _, Executor as _, MySqlConnection};
use tests::{
    fresh_database, on_every_backend, quick_worker, sql_exec, start, stop, wait_for, wait_status,
    Arg,
};

/// An application's own migration folder, with one migration of its own.
fn app_migrations() -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("temp dir");
    std::fs::write(
        dir.path().join("20250101000000_orders.sql"),
        "CREATE TABLE orders (id BIGINT NOT NULL PRIMARY KEY, total INT NOT NULL);",
    )
    .unwrap();
    dir
}

async fn app_migrator(dir: &Path) -> Migrator {
    Migrator::new(dir).await.expect("read the app's migrations")
}

async fn versions(conn: &mut MySqlConnection, table: &str) -> Vec<i64> {
    sqlx::query_scalar(&format!("SELECT version FROM {table} ORDER BY version"))
        .fetch_all(conn)
        .await
        .unwrap_or_else(|e| panic!("read {table}: {e}"))
}

/// The versions recorded in `job_queue_migrations` of the database at `url` (either
/// database), in order.
async fn recorded_versions(url: &str) -> Vec<i64> {
    let sql = "SELECT version FROM job_queue_migrations ORDER BY version";
    if url.starts_with("postgres") {
        let mut conn = sqlx::PgConnection::connect(url).await.unwrap();
        return sqlx::query_scalar(sql).fetch_all(&mut conn).await.unwrap();
    }
    let mut conn = MySqlConnection::connect(url).await.unwrap();
    versions(&mut conn, "job_queue_migrations").await
}

/// A new, empty database of `backend`: its URL.
async fn empty_database(backend: Backend, prefix: &str) -> String {
    TestDatabase::empty_on(backend, prefix)
        .await
        .unwrap_or_else(|e| panic!("cannot create a {backend} test database: {e}"))
        .keep()
}

/// Every version this library embeds for the database at `url`, in order: what a new
/// database has pending.
async fn embedded_versions(url: &str) -> Vec<i64> {
    let backend = if url.starts_with("postgres") {
        Backend::Postgres
    } else {
        Backend::MySql
    };
    let fresh = empty_database(backend, "schema_versions").await;
    let probe = Queue::connect(&fresh).await.unwrap();
    probe
        .pending_migrations()
        .await
        .unwrap()
        .into_iter()
        .map(|(v, _)| v)
        .collect()
}

#[tokio::test]
async fn app_migrator_then_jobqueue_then_app_migrator_again() {
    let url = fresh_database("app_first").await;
    let dir = app_migrations();
    let pool = sqlx::MySqlPool::connect(&url).await.unwrap();

    app_migrator(dir.path()).await.run(&pool).await.unwrap();
    let queue = Queue::connect(&url).await.unwrap();
    queue
        .migrate()
        .await
        .expect("jobqueue migrates a database that has the app's sqlx history");
    app_migrator(dir.path())
        .await
        .run(&pool)
        .await
        .expect("the app's migrator still runs after jobqueue's");
    queue.migrate().await.expect("and jobqueue's again");

    let mut conn = pool.acquire().await.unwrap();
    assert_eq!(
        versions(&mut conn, "_sqlx_migrations").await,
        [20250101000000]
    );
    assert_eq!(
        versions(&mut conn, "job_queue_migrations").await,
        embedded_versions(&url).await
    );
    assert!(queue.pending_migrations().await.unwrap().is_empty());
    queue.check_schema().await.expect("the schema is current");
}

/// On PostgreSQL, in both orders: the application's sqlx migrator and jobqueue's keep their
/// own histories, and each runs again after the other.
#[tokio::test]
async fn postgres_app_migrator_and_jobqueue_keep_separate_histories_in_either_order() {
    for app_first in [true, false] {
        let url = empty_database(Backend::Postgres, "pg_app_history").await;
        let dir = app_migrations();
        let pool = sqlx::PgPool::connect(&url).await.unwrap();
        let queue = Queue::connect(&url).await.unwrap();
        if app_first {
            app_migrator(dir.path()).await.run(&pool).await.unwrap();
        }
        queue.migrate().await.expect("jobqueue migrates");
        app_migrator(dir.path())
            .await
            .run(&pool)
            .await
            .expect("the app's migrator runs after jobqueue's");
        queue.migrate().await.expect("and jobqueue's again");
        let app: Vec<i64> = sqlx::query_scalar("SELECT version FROM _sqlx_migrations")
            .fetch_all(&pool)
            .await
            .unwrap();
        assert_eq!(app, [20250101000000], "app first: {app_first}");
        assert_eq!(
            recorded_versions(&url).await,
            embedded_versions(&url).await,
            "app first: {app_first}"
        );
        queue.check_schema().await.expect("the schema is current");
    }
}

#[tokio::test]
async fn jobqueue_then_app_migrator_then_jobqueue_again() {
    let url = fresh_database("jobqueue_first").await;
    let dir = app_migrations();
    let pool = sqlx::MySqlPool::connect(&url).await.unwrap();

    let queue = Queue::connect(&url).await.unwrap();
    queue.migrate().await.unwrap();
    app_migrator(dir.path())
        .await
        .run(&pool)
        .await
        .expect("the app's migrator runs on a database jobqueue migrated");
    queue.migrate().await.expect("jobqueue migrates again");
    app_migrator(dir.path()).await.run(&pool).await.unwrap();

    let mut conn = pool.acquire().await.unwrap();
    assert_eq!(
        versions(&mut conn, "_sqlx_migrations").await,
        [20250101000000]
    );
    let mut tables: Vec<String> = sqlx::query_scalar(
        "SELECT CAST(table_name AS CHAR) FROM information_schema.tables \
         WHERE table_schema = DATABASE()",
    )
    .fetch_all(&mut *conn)
    .await
    .unwrap();
    tables.sort();
    assert_eq!(
        tables,
        [
            "_sqlx_migrations",
            "job_queue",
            "job_queue_audit",
            "job_queue_blocked",
            "job_queue_cron",
            "job_queue_gauge_refresh",
            "job_queue_gauges",
            "job_queue_kind_stats",
            "job_queue_migrations",
            "job_queue_pause",
            "job_queue_slot",
            "job_queue_throughput",
            "job_queue_throughput_mark",
            "job_queue_turn",
            "job_queue_worker",
            "orders"
        ]
    );
}

#[tokio::test]
async fn a_database_migrated_by_0_1_is_adopted_without_running_its_ddl_again() {
    let url = fresh_database("adopt_0_1").await;
    // What 0.1 did: sqlx's migrator with jobqueue's first migration, history in
    // `_sqlx_migrations`.
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("20261130000001_job_queue.sql"),
        include_str!("../../jobqueue-runtime/migrations/mysql/20261130000001_job_queue.sql"),
    )
    .unwrap();
    let pool = sqlx::MySqlPool::connect(&url).await.unwrap();
    app_migrator(dir.path()).await.run(&pool).await.unwrap();
    sqlx::query(
        "INSERT INTO job_queue (queue, kind, task_key, payload, status, run_at, max_attempts, \
         lease_ms, created_at, updated_at) VALUES ('default', 'old_job', 'from-0.1', '{}', \
         'failed', UTC_TIMESTAMP(6), 1, 30000, UTC_TIMESTAMP(6), UTC_TIMESTAMP(6))",
    )
    .execute(&pool)
    .await
    .unwrap();

    let queue = Queue::connect(&url).await.unwrap();
    let pending: Vec<i64> = queue
        .pending_migrations()
        .await
        .unwrap()
        .into_iter()
        .map(|(v, _)| v)
        .collect();
    assert!(
        !pending.contains(&20261130000001),
        "0.1's migration counts as applied: {pending:?}"
    );
    queue
        .migrate()
        .await
        .expect("migrate adopts the 0.1 history");

    let mut conn = pool.acquire().await.unwrap();
    let adopted = versions(&mut conn, "job_queue_migrations").await;
    assert_eq!(adopted[0], 20261130000001, "{adopted:?}");
    assert_eq!(adopted, embedded_versions(&url).await);
    // The table was not created again: the 0.1 job is still there.
    let old = queue.job_by_key("from-0.1").await.unwrap().expect("kept");
    assert_eq!(old.kind, "old_job");
    // The 0.1 row stays where it was, for an application migrator that lists it.
    assert_eq!(
        versions(&mut conn, "_sqlx_migrations").await,
        [20261130000001]
    );
    queue.check_schema().await.unwrap();
}

async fn four_concurrent_migrate_calls_apply_each_migration_once(backend: Backend) {
    let url = empty_database(backend, "concurrent_migrate").await;
    let mut queues = Vec::new();
    for _ in 0..4 {
        queues.push(Queue::connect(&url).await.unwrap());
    }
    let barrier = std::sync::Arc::new(tokio::sync::Barrier::new(4));
    let tasks: Vec<_> = queues
        .into_iter()
        .map(|q| {
            let barrier = barrier.clone();
            tokio::spawn(async move {
                barrier.wait().await;
                q.migrate().await
            })
        })
        .collect();
    for (i, task) in tasks.into_iter().enumerate() {
        task.await
            .unwrap()
            .unwrap_or_else(|e| panic!("migrate call {i} failed: {e}"));
    }
    assert_eq!(recorded_versions(&url).await, embedded_versions(&url).await);
}

#[job(queue = "schema_history")]
async fn schema_probe(ctx: JobContext) {
    let _ = ctx;
}

async fn a_worker_refuses_a_missing_or_older_schema_and_says_how_to_fix_it(backend: Backend) {
    let url = empty_database(backend, "schema_missing").await;
    let queue = Queue::connect(&url).await.expect("connect needs no schema");
    let e = queue.check_schema().await.unwrap_err();
    assert!(matches!(e, Error::SchemaMissing), "{e:?}");
    let message = e.to_string();
    assert!(message.contains("no jobqueue schema"), "{message}");
    assert!(message.contains("jobqueue migrate"), "{message}");
    assert!(message.contains("--print-sql"), "{message}");
    let worker = quick_worker(&queue)
        .queues(["schema_history"])
        .build()
        .unwrap();
    let e = worker.run().await.unwrap_err();
    assert!(e.to_string().contains("no jobqueue schema"), "{e}");

    queue.migrate().await.unwrap();
    let latest = *embedded_versions(&url).await.last().unwrap();
    sql_exec(
        &queue,
        "DELETE FROM job_queue_migrations WHERE version = ?",
        &[Arg::Int(latest)],
    )
    .await;
    let e = queue.check_schema().await.unwrap_err();
    assert!(
        matches!(e, Error::SchemaTooOld { version, needed } if needed == latest && version < latest),
        "{e:?}"
    );
    let message = e.to_string();
    assert!(
        message.contains(&format!("needs {latest}")),
        "names the version needed: {message}"
    );
    assert!(message.contains("jobqueue migrate"), "{message}");
}

async fn sql_printed_for_other_tools_gives_a_schema_workers_accept(backend: Backend) {
    let url = empty_database(backend, "print_sql").await;
    let sql = Queue::migration_sql_for(backend);
    assert!(sql.contains("CREATE TABLE job_queue ("), "{sql}");
    // As Flyway or Liquibase would: the script, run by a tool that is not jobqueue.
    if backend == Backend::Postgres {
        let mut conn = sqlx::PgConnection::connect(&url).await.unwrap();
        sqlx::raw_sql(&sql)
            .execute(&mut conn)
            .await
            .expect("the script runs");
    } else {
        let mut conn = MySqlConnection::connect(&url).await.unwrap();
        conn.execute(sql.as_str()).await.expect("the script runs");
    }

    let queue = Queue::connect(&url).await.unwrap();
    assert!(queue.pending_migrations().await.unwrap().is_empty());
    queue
        .check_schema()
        .await
        .expect("the recorded schema is current");
    queue
        .migrate()
        .await
        .expect("and `migrate` finds nothing to do");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_that_starts_during_a_migration_waits_for_it() {
    let url = fresh_database("worker_waits").await;
    let queue = Queue::connect(&url).await.unwrap();
    // Another process is migrating: it holds the lock and has not created anything yet.
    let mut migrator = MySqlConnection::connect(&url).await.unwrap();
    let locked: i64 =
        sqlx::query_scalar("SELECT GET_LOCK(CONCAT('jobqueue:migrate:', SHA1(DATABASE())), 5)")
            .fetch_one(&mut migrator)
            .await
            .unwrap();
    assert_eq!(locked, 1);

    let (handle, task) = start(
        quick_worker(&queue)
            .queues(["schema_history"])
            .build()
            .unwrap(),
    );
    wait_for(
        "the worker to wait for the migration lock",
        Duration::from_secs(20),
        || async {
            let waiting: i64 = sqlx::query_scalar(
                "SELECT COUNT(*) FROM information_schema.processlist \
                 WHERE info LIKE 'SELECT GET_LOCK%' AND db = DATABASE()",
            )
            .fetch_one(queue.mysql_pool().unwrap())
            .await
            .unwrap();
            (waiting > 0).then_some(())
        },
    )
    .await;
    assert!(!task.is_finished(), "the worker waits instead of failing");
    migrator
        .execute(Queue::migration_sql().as_str())
        .await
        .unwrap();
    sqlx::query("SELECT RELEASE_LOCK(CONCAT('jobqueue:migrate:', SHA1(DATABASE())))")
        .execute(&mut migrator)
        .await
        .unwrap();

    let id = queue.enqueue(SchemaProbe {}).await.unwrap().id();
    wait_status(&queue, id, JobStatus::Done, Duration::from_secs(20)).await;
    stop(&handle, task).await;
}

on_every_backend!(
    four_concurrent_migrate_calls_apply_each_migration_once,
    a_worker_refuses_a_missing_or_older_schema_and_says_how_to_fix_it,
    sql_printed_for_other_tools_gives_a_schema_workers_accept,
);
