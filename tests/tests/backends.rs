//! What holds for the choice of database itself: a queue connects, migrates and checks its
//! schema on each backend, a URL of no supported database is refused with the schemes that
//! work, and a connection of one database handed to a queue on the other is refused.

use jobqueue::testing::TestDatabase;
use jobqueue::{Backend, Error, Queue};
use tests::{on_every_backend, sql_i64};

async fn migrate_creates_the_schema_and_check_schema_passes(backend: Backend) {
    let db = TestDatabase::empty_on(backend, "backend_migrate")
        .await
        .expect("a database");
    let queue = Queue::connect(db.url()).await.expect("connect");
    assert_eq!(queue.backend(), backend);
    assert_eq!(queue.server_info().backend, backend);
    let pending = queue.pending_migrations().await.expect("pending");
    assert!(
        !pending.is_empty(),
        "an empty database has every migration pending"
    );
    assert!(matches!(
        queue.check_schema().await,
        Err(Error::SchemaMissing)
    ));

    queue.migrate().await.expect("migrate");
    queue.check_schema().await.expect("the schema is current");
    assert!(queue
        .pending_migrations()
        .await
        .expect("pending")
        .is_empty());
    let recorded = sql_i64(&queue, "SELECT COUNT(*) FROM job_queue_migrations", &[]).await;
    assert_eq!(
        recorded as usize,
        pending.len(),
        "one history row per migration"
    );
    // A second migrate finds nothing to do and records nothing twice.
    queue.migrate().await.expect("migrate again");
    let again = sql_i64(&queue, "SELECT COUNT(*) FROM job_queue_migrations", &[]).await;
    assert_eq!(again, recorded);
    assert_eq!(
        sql_i64(&queue, "SELECT COUNT(*) FROM job_queue", &[]).await,
        0
    );
}

on_every_backend!(migrate_creates_the_schema_and_check_schema_passes);

#[tokio::test]
async fn a_url_of_no_supported_database_names_the_schemes_that_work() {
    let err = Queue::connect("sqlite://jobs.db").await.unwrap_err();
    let Error::InvalidUrl { reason, .. } = &err else {
        panic!("expected InvalidUrl, got {err:?}");
    };
    assert!(
        reason.contains("postgres://") && reason.contains("mysql://"),
        "{reason}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_print_sql_of_each_backend_is_its_own() {
    let mysql = Queue::migration_sql_for(Backend::MySql);
    let postgres = Queue::migration_sql_for(Backend::Postgres);
    assert!(mysql.contains("ENGINE = InnoDB"), "MySQL DDL");
    assert!(
        !postgres.contains("ENGINE"),
        "no MySQL DDL in the PostgreSQL script"
    );
    assert!(postgres.contains("CREATE TABLE job_queue ("));
    assert!(postgres.contains("INSERT INTO job_queue_migrations"));
    assert_eq!(Queue::migration_sql(), mysql);
}

/// A database whose sessions default to REPEATABLE READ (set with `ALTER DATABASE`, as a DBA
/// might): the queue's own sessions still run at READ COMMITTED, set once per session with
/// the connection rather than by a statement per transaction, and its claims work; a pool of
/// the application's keeps the database's level.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_queue_sessions_run_at_read_committed_whatever_the_database_default() {
    let db = TestDatabase::empty_on(Backend::Postgres, "pg_isolation")
        .await
        .expect("a PostgreSQL database");
    let admin = sqlx::PgPool::connect(db.url()).await.expect("connect");
    sqlx::query(&format!(
        "ALTER DATABASE \"{}\" SET default_transaction_isolation = 'repeatable read'",
        db.name()
    ))
    .execute(&admin)
    .await
    .expect("set the database's default");
    let app = sqlx::postgres::PgPoolOptions::new()
        .max_connections(1)
        .connect(db.url())
        .await
        .expect("connect");
    let level = |pool: sqlx::PgPool| async move {
        let level: String = sqlx::query_scalar("SHOW transaction_isolation")
            .fetch_one(&pool)
            .await
            .expect("show");
        level
    };
    assert_eq!(level(app.clone()).await, "repeatable read");

    let queue = Queue::connect(db.url()).await.expect("connect the queue");
    queue.migrate().await.expect("migrate");
    let pool = queue.postgres_pool().expect("a PostgreSQL queue").clone();
    assert_eq!(level(pool).await, "read committed");
    assert_eq!(
        level(app).await,
        "repeatable read",
        "the app's pool keeps its level"
    );
}

/// `postgres_pool_options` gives an application's `PgPool` the bound on transactions left
/// idle that the queue's own pool has (30 s), and a queue shares that pool.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_pool_options_bound_idle_transactions_and_serve_a_queue() {
    let db = TestDatabase::new_on(Backend::Postgres, "pg_pool_options")
        .await
        .expect("a PostgreSQL database");
    let pool = jobqueue::postgres_pool_options()
        .max_connections(3)
        .connect(db.url())
        .await
        .expect("connect");
    let bound: String = sqlx::query_scalar("SHOW idle_in_transaction_session_timeout")
        .fetch_one(&pool)
        .await
        .expect("show");
    assert_eq!(bound, "30s");
    let queue = Queue::from_pool(pool)
        .await
        .expect("a queue on the app's pool");
    let done = sql_i64(&queue, "SELECT COUNT(*) FROM job_queue", &[]).await;
    assert_eq!(done, 0, "the queue reads its table through the app's pool");
}

/// On PostgreSQL a role with only DML on the queue's tables (what the deployment guide
/// grants workers) enqueues and runs jobs, maintenance included; `migrate` as that role
/// says it lacks DDL rights, and changes nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_a_worker_role_with_dml_grants_only_runs_jobs_and_cannot_migrate() {
    let db = TestDatabase::empty_on(Backend::Postgres, "pg_grants")
        .await
        .expect("an empty PostgreSQL database");
    let admin = Queue::connect(db.url())
        .await
        .expect("connect as the owner");
    let admin_pool = admin.postgres_pool().expect("PostgreSQL").clone();
    // Roles are the server's, not the database's: one of this test's own.
    let role = format!("jq_worker_{}", std::process::id());
    for sql in [
        format!("DROP ROLE IF EXISTS {role}"),
        format!("CREATE ROLE {role} LOGIN"),
        format!("GRANT USAGE ON SCHEMA public TO {role}"),
    ] {
        sqlx::query(&sql).execute(&admin_pool).await.expect(&sql);
    }
    let (scheme, rest) = db.url().split_once("://").expect("a URL");
    let host = rest.split_once('@').map_or(rest, |(_, host)| host);
    let url = format!("{scheme}://{role}@{host}");

    let queue = Queue::connect(&url)
        .await
        .expect("the worker role connects");
    let e = queue.migrate().await.unwrap_err();
    assert!(matches!(e, Error::MigratePermission { .. }), "{e:?}");
    assert!(e.to_string().contains("DDL rights"), "{e}");
    let tables = sql_i64(
        &admin,
        "SELECT COUNT(*) FROM pg_tables WHERE tablename LIKE 'job_queue%'",
        &[],
    )
    .await;
    assert_eq!(tables, 0, "a refused migrate leaves nothing behind");

    // The owner migrates; the worker role gets DML on the tables, as the guide says.
    admin.migrate().await.expect("migrate as the owner");
    let grant =
        format!("GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA public TO {role}");
    sqlx::query(&grant)
        .execute(&admin_pool)
        .await
        .expect("grant");
    queue
        .check_schema()
        .await
        .expect("the worker role reads the schema version");
    let id = queue
        .enqueue(GrantProbe { n: 1 })
        .await
        .expect("enqueue as the worker role")
        .id();
    let (handle, task) = tests::start(
        tests::quick_worker(&queue)
            .queues(["pg_grants"])
            .build()
            .expect("build"),
    );
    tests::wait_status(
        &queue,
        id,
        jobqueue::JobStatus::Done,
        std::time::Duration::from_secs(30),
    )
    .await;
    tests::stop(&handle, task).await;
    let heartbeats = sql_i64(&admin, "SELECT COUNT(*) FROM job_queue_worker", &[]).await;
    assert_eq!(
        heartbeats, 0,
        "the stopped worker took its heartbeat row away"
    );
    drop(queue);
    for sql in [
        format!("DROP OWNED BY {role}"),
        format!("DROP ROLE IF EXISTS {role}"),
    ] {
        let _ = sqlx::query(&sql).execute(&admin_pool).await;
    }
}

#[jobqueue::job(queue = "pg_grants")]
async fn grant_probe(n: u32) -> Result<(), jobqueue::JobError> {
    let _ = n;
    Ok(())
}
