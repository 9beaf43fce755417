//! Least privilege: a worker needs only DML on the queue's tables (and `SELECT` on the
//! migration history, to see that nothing is pending); migrations need DDL. The deployment
//! guide's grants (`docs/guide/deployment.md`) are exactly the ones used here.

use std::time::Duration;

use jobqueue::{job, Error, JobStatus, Queue, Worker};
use tests::{fresh_database, init_tracing, wait_for};

#[job(name = "privileges_ping", queue = "privileges")]
async fn ping(n: u32) {
    let _ = n;
}

/// Creates `user` with `password` and the deployment guide's worker grants on `db`. Users are
/// server-wide and named after the test process's pid: on a server that outlives test runs
/// (`JOBQUEUE_TEST_DATABASE_URL`), an earlier run with the same pid may have left one.
async fn create_worker_user(root: &Queue, db: &str, user: &str, password: &str) {
    for host in ["%", "localhost", "127.0.0.1"] {
        for stmt in [
            format!("DROP USER IF EXISTS '{user}'@'{host}'"),
            format!("CREATE USER '{user}'@'{host}' IDENTIFIED BY '{password}'"),
            format!(
                "GRANT SELECT, INSERT, UPDATE, DELETE ON `{db}`.job_queue TO '{user}'@'{host}'"
            ),
            format!("GRANT SELECT, INSERT, DELETE ON `{db}`.job_queue_pause TO '{user}'@'{host}'"),
            format!("GRANT SELECT ON `{db}`.job_queue_migrations TO '{user}'@'{host}'"),
            format!("GRANT SELECT, INSERT, UPDATE ON `{db}`.job_queue_cron TO '{user}'@'{host}'"),
            format!("GRANT SELECT, INSERT, DELETE ON `{db}`.job_queue_gauges TO '{user}'@'{host}'"),
            format!("GRANT SELECT, UPDATE ON `{db}`.job_queue_gauge_refresh TO '{user}'@'{host}'"),
            format!("GRANT SELECT, UPDATE ON `{db}`.job_queue_turn TO '{user}'@'{host}'"),
            format!("GRANT SELECT, INSERT, UPDATE, DELETE ON `{db}`.job_queue_throughput TO '{user}'@'{host}'"),
            format!("GRANT SELECT, UPDATE ON `{db}`.job_queue_throughput_mark TO '{user}'@'{host}'"),
            format!("GRANT SELECT, INSERT, UPDATE, DELETE ON `{db}`.job_queue_slot TO '{user}'@'{host}'"),
            format!("GRANT SELECT, INSERT, UPDATE, DELETE ON `{db}`.job_queue_blocked TO '{user}'@'{host}'"),
            format!("GRANT SELECT, INSERT, UPDATE, DELETE ON `{db}`.job_queue_worker TO '{user}'@'{host}'"),
        ] {
            sqlx::query(&stmt).execute(root.mysql_pool().unwrap()).await.expect(&stmt);
        }
    }
}

fn url_as(url: &str, user: &str, password: &str) -> String {
    url.replacen("mysql://root@", &format!("mysql://{user}:{password}@"), 1)
}

#[tokio::test(flavor = "multi_thread")]
async fn a_dml_only_user_runs_jobs_and_migrates_only_an_up_to_date_schema() {
    init_tracing();
    let url = fresh_database("privileges").await;
    let db = url.rsplit('/').next().unwrap().to_owned();
    let root = Queue::connect(&url).await.unwrap();
    root.migrate().await.unwrap();
    let user = format!("w{}", std::process::id());
    create_worker_user(&root, &db, &user, "s3cret-pw").await;

    // The worker user enqueues and runs jobs.
    let queue = Queue::connect(&url_as(&url, &user, "s3cret-pw"))
        .await
        .unwrap();
    let id = queue.enqueue(Ping { n: 1 }).await.unwrap().id();
    let worker = Worker::builder(queue.clone())
        .queues(["privileges"])
        .build()
        .unwrap();
    let handle = worker.handle();
    let run = tokio::spawn(worker.run());
    let status = wait_for("the job to finish", Duration::from_secs(20), || async {
        let job = queue.job(id).await.unwrap().unwrap();
        (job.status == JobStatus::Done).then_some(job.status)
    })
    .await;
    assert_eq!(status, JobStatus::Done);
    let workers = root.workers().await.unwrap();
    assert!(
        workers.iter().any(|w| w.queues == ["privileges"]),
        "the worker user writes its heartbeat: {workers:?}"
    );
    queue.pause("privileges").await.unwrap();
    queue.resume("privileges").await.unwrap();
    handle.shutdown();
    run.await.unwrap().unwrap();
    assert_eq!(handle.metrics().database_errors, 0);

    // Every replica may call `migrate` at start-up: on an up-to-date schema it only reads.
    queue.migrate().await.unwrap();

    // ...but it cannot apply a pending migration, and is told why and what to do.
    let newest: i64 = sqlx::query_scalar("SELECT MAX(version) FROM job_queue_migrations")
        .fetch_one(root.mysql_pool().unwrap())
        .await
        .unwrap();
    sqlx::query("DELETE FROM job_queue_migrations WHERE version = ?")
        .bind(newest)
        .execute(root.mysql_pool().unwrap())
        .await
        .unwrap();
    let err = queue.migrate().await.unwrap_err();
    let msg = err.to_string();
    assert!(matches!(err, Error::MigratePermission { .. }), "{err:?}");
    assert!(msg.contains("migrate needs DDL rights"), "{msg}");
    assert!(msg.contains("run `migrate` as the migration user"), "{msg}");
    assert!(!msg.contains("s3cret-pw"), "the password leaked: {msg}");
}

#[job(name = "privileges_fails_once", queue = "privileges")]
async fn fails_once(ctx: jobqueue::JobContext, n: u32) -> Result<(), jobqueue::JobError> {
    let _ = n;
    if ctx.attempt() == 1 {
        return Err(jobqueue::JobError::retryable("the first attempt fails"));
    }
    Ok(())
}

#[job(name = "privileges_answer", queue = "privileges")]
async fn answer(n: u32) -> Result<u32, jobqueue::JobError> {
    Ok(n + 1)
}

static LIMITED_GO: tokio::sync::Notify = tokio::sync::Notify::const_new();
static LIMITED_STARTED: tests::Mailbox<u64> = tests::Mailbox::new();

#[job(
    name = "privileges_limited",
    queue = "privileges",
    concurrency = 1,
    concurrency_key = "privileges"
)]
async fn limited(ctx: jobqueue::JobContext) -> Result<(), jobqueue::JobError> {
    LIMITED_STARTED.send(ctx.id());
    LIMITED_GO.notified().await;
    Err(jobqueue::JobError::retryable(
        "fails, so that its slot is freed by the outcome",
    ))
}

/// Whether every job of `ids` is done.
async fn all_done(queue: &Queue, ids: &[u64]) -> Option<()> {
    for &id in ids {
        if queue.job(id).await.unwrap().unwrap().status != JobStatus::Done {
            return None;
        }
    }
    Some(())
}

/// A worker user kept from a release before limits has no rights on the limits' tables. Jobs
/// without limits still run, retry and are recorded: their outcomes touch only `job_queue`.
#[tokio::test(flavor = "multi_thread")]
async fn a_worker_user_without_rights_on_the_limits_tables_records_unlimited_outcomes() {
    init_tracing();
    let url = fresh_database("privileges_nolimits").await;
    let db = url.rsplit('/').next().unwrap().to_owned();
    let root = Queue::connect(&url).await.unwrap();
    root.migrate().await.unwrap();
    let user = format!("n{}", std::process::id());
    create_worker_user(&root, &db, &user, "s3cret-pw").await;
    for host in ["%", "localhost", "127.0.0.1"] {
        for table in ["job_queue_slot", "job_queue_blocked"] {
            let revoke = format!(
                "REVOKE SELECT, INSERT, UPDATE, DELETE ON `{db}`.{table} FROM '{user}'@'{host}'"
            );
            sqlx::query(&revoke)
                .execute(root.mysql_pool().unwrap())
                .await
                .expect(&revoke);
        }
    }
    let queue = Queue::connect(&url_as(&url, &user, "s3cret-pw"))
        .await
        .unwrap();
    let mut ids = Vec::new();
    for n in 0..10 {
        ids.push(queue.enqueue(FailsOnce { n }).await.unwrap().id());
    }
    for n in 0..20 {
        ids.push(queue.enqueue(Ping { n }).await.unwrap().id());
    }
    // Jobs that return a value are recorded with it, by a statement of their own.
    for n in 0..5 {
        ids.push(queue.enqueue(Answer { n }).await.unwrap().id());
    }
    let worker = Worker::builder(queue.clone())
        .queues(["privileges"])
        .poll_interval(Duration::from_millis(20), Duration::from_millis(200))
        .maintenance_interval(Duration::from_millis(100))
        .build()
        .unwrap();
    let handle = worker.handle();
    let run = tokio::spawn(worker.run());
    wait_for("every job to be done", Duration::from_secs(60), || {
        all_done(&root, &ids)
    })
    .await;
    handle.shutdown();
    run.await.unwrap().unwrap();
    for &id in &ids[..10] {
        assert_eq!(root.job(id).await.unwrap().unwrap().attempts, 2);
    }
    let m = handle.metrics();
    assert_eq!((m.succeeded, m.retried), (35, 10), "{m:?}");
    assert_eq!(root.output::<Answer>(ids[30]).await.unwrap(), Some(1));
}

/// The server refuses a job's outcome for good (here: the right to update the limits' slots
/// was taken away while the job ran). The worker gives up on that one outcome, says why, and
/// goes on recording the others instead of retrying it for ever ahead of them.
// One thread: the log capture is the thread's default subscriber, which the worker's lease
// thread takes from the thread that starts it.
#[tokio::test(flavor = "current_thread")]
async fn an_outcome_the_server_refuses_does_not_hold_back_the_others() {
    let (logs, _guard) = tests::LogCapture::install("error");
    let url = fresh_database("privileges_refused").await;
    let db = url.rsplit('/').next().unwrap().to_owned();
    let root = Queue::connect(&url).await.unwrap();
    root.migrate().await.unwrap();
    let user = format!("r{}", std::process::id());
    create_worker_user(&root, &db, &user, "s3cret-pw").await;
    let queue = Queue::connect(&url_as(&url, &user, "s3cret-pw"))
        .await
        .unwrap();
    let mut started = LIMITED_STARTED.open();
    let limited = queue.enqueue(Limited {}).await.unwrap().id();
    let worker = Worker::builder(queue.clone())
        .queues(["privileges"])
        .poll_interval(Duration::from_millis(20), Duration::from_millis(200))
        .maintenance(false)
        .concurrency(4)
        .build()
        .unwrap();
    let handle = worker.handle();
    let run = tokio::spawn(worker.run());
    tests::receive(
        &mut started,
        "the limited job to start",
        Duration::from_secs(20),
    )
    .await;
    for host in ["%", "localhost", "127.0.0.1"] {
        let revoke = format!("REVOKE UPDATE ON `{db}`.job_queue_slot FROM '{user}'@'{host}'");
        sqlx::query(&revoke)
            .execute(root.mysql_pool().unwrap())
            .await
            .expect(&revoke);
    }
    LIMITED_GO.notify_one();
    let mut ids = Vec::new();
    for n in 0..20 {
        ids.push(queue.enqueue(Ping { n }).await.unwrap().id());
    }
    wait_for(
        "the later jobs to be recorded done",
        Duration::from_secs(60),
        || all_done(&root, &ids),
    )
    .await;
    handle.shutdown();
    run.await.unwrap().unwrap();
    let refused = logs.lines_with(&[
        "refuses to record this job's outcome",
        &format!("job.id={limited}"),
    ]);
    assert_eq!(refused.len(), 1, "{}", logs.text());
    assert_eq!(handle.metrics().succeeded, 20);
    // Not written: the job is still `running`, for its lease to expire and maintenance to
    // decide.
    let job = root.job(limited).await.unwrap().unwrap();
    assert_eq!((job.status, job.attempts), (JobStatus::Running, 1));
}
