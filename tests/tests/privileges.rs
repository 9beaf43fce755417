//! Least privilege: a worker needs only DML on the queue's tables; migrations need DDL. The
//! README's grants are exactly the ones used here.

use std::time::Duration;

use jobqueue::{job, Error, JobStatus, Queue, Worker};
use tests::{fresh_database, init_tracing, wait_for};

#[job(name = "privileges_ping", queue = "privileges")]
async fn ping(n: u32) {
    let _ = n;
}

/// Creates `user` with `password` and the README's worker grants on `db`.
async fn create_worker_user(root: &Queue, db: &str, user: &str, password: &str) {
    for host in ["%", "localhost", "127.0.0.1"] {
        for stmt in [
            format!("CREATE USER '{user}'@'{host}' IDENTIFIED BY '{password}'"),
            format!(
                "GRANT SELECT, INSERT, UPDATE, DELETE ON `{db}`.job_queue TO '{user}'@'{host}'"
            ),
            format!("GRANT SELECT, INSERT, DELETE ON `{db}`.job_queue_pause TO '{user}'@'{host}'"),
            format!("GRANT SELECT, INSERT, UPDATE ON `{db}`.job_queue_cron TO '{user}'@'{host}'"),
            format!("GRANT SELECT, INSERT, DELETE ON `{db}`.job_queue_gauges TO '{user}'@'{host}'"),
            format!("GRANT SELECT, UPDATE ON `{db}`.job_queue_gauge_refresh TO '{user}'@'{host}'"),
            format!("GRANT SELECT, INSERT, UPDATE, DELETE ON `{db}`.job_queue_slot TO '{user}'@'{host}'"),
            format!("GRANT SELECT, INSERT, UPDATE, DELETE ON `{db}`.job_queue_blocked TO '{user}'@'{host}'"),
            format!("GRANT SELECT, INSERT, UPDATE, DELETE ON `{db}`.job_queue_worker TO '{user}'@'{host}'"),
        ] {
            sqlx::query(&stmt).execute(root.pool()).await.expect(&stmt);
        }
    }
}

fn url_as(url: &str, user: &str, password: &str) -> String {
    url.replacen("mysql://root@", &format!("mysql://{user}:{password}@"), 1)
}

#[tokio::test(flavor = "multi_thread")]
async fn a_dml_only_user_runs_jobs_but_cannot_migrate() {
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

    // ...but cannot migrate, and is told why and what to do.
    let err = queue.migrate().await.unwrap_err();
    let msg = err.to_string();
    assert!(matches!(err, Error::MigratePermission { .. }), "{err:?}");
    assert!(msg.contains("migrate needs DDL rights"), "{msg}");
    assert!(msg.contains("run `migrate` as the migration user"), "{msg}");
    assert!(!msg.contains("s3cret-pw"), "the password leaked: {msg}");
}
