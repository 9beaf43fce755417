//! Producers in any language: jobs inserted with one plain SQL statement (no library call)
//! run, and a row with a bad value fails or waits on its own without stopping the claim of
//! its queue.

use std::time::Duration;

use jobqueue::{job, Backend, JobContext, JobError, JobStatus, Queue};
use tests::{
    fresh_queue_on, init_tracing, on_every_backend, quick_worker, start, stop, wait_for,
    wait_status, Mailbox,
};

// One mailbox per test and backend: the two backends' runs of a test run at once, each on
// queues of its own (`_pg` for PostgreSQL), and the job finds its mailbox by its queue.
static GREETED: Mailbox<(String, u64)> = Mailbox::new();
static GREETED_PG: Mailbox<(String, u64)> = Mailbox::new();
static GREETED_DESPITE_BAD_ROWS: Mailbox<(String, u64)> = Mailbox::new();
static GREETED_DESPITE_BAD_ROWS_PG: Mailbox<(String, u64)> = Mailbox::new();

/// The queue of a test's jobs on `backend`.
fn queue_name(base: &str, backend: Backend) -> String {
    match backend {
        Backend::Postgres => format!("{base}_pg"),
        _ => base.to_owned(),
    }
}

/// A kind a service in another language enqueues.
#[job(queue = "sql_producers")]
async fn greet_user(ctx: JobContext, user_id: u64) -> Result<(), JobError> {
    let mailbox = match ctx.queue() {
        "sql_bad_rows" => &GREETED_DESPITE_BAD_ROWS,
        "sql_bad_rows_pg" => &GREETED_DESPITE_BAD_ROWS_PG,
        "sql_producers_pg" => &GREETED_PG,
        _ => &GREETED,
    };
    mailbox.send((ctx.task_key().to_owned(), user_id));
    Ok(())
}

/// The id of the row with `task_key` (bytes compared as they are).
async fn id_of(queue: &Queue, task_key: &[u8]) -> u64 {
    match queue.backend() {
        Backend::Postgres => {
            let key = std::str::from_utf8(task_key).expect("PostgreSQL keys are text");
            sqlx::query_scalar::<_, i64>("SELECT id FROM job_queue WHERE task_key = $1")
                .bind(key)
                .fetch_one(queue.postgres_pool().unwrap())
                .await
                .map(|id| id as u64)
        }
        _ => {
            sqlx::query_scalar("SELECT id FROM job_queue WHERE task_key = ?")
                .bind(task_key)
                .fetch_one(queue.mysql_pool().unwrap())
                .await
        }
    }
    .expect("the row exists")
}

/// Runs `sql` (one or more statements, no parameters) as a producer would send it.
async fn raw(queue: &Queue, sql: &str) -> Result<(), sqlx::Error> {
    match queue.backend() {
        Backend::Postgres => sqlx::raw_sql(sql)
            .execute(queue.postgres_pool().unwrap())
            .await
            .map(drop),
        _ => sqlx::raw_sql(sql)
            .execute(queue.mysql_pool().unwrap())
            .await
            .map(drop),
    }
}

async fn jobs_inserted_with_plain_sql_run(backend: Backend) {
    init_tracing();
    let queue = fresh_queue_on(backend, "sql_producers").await;
    let name = queue_name("sql_producers", backend);
    let mut greeted = match backend {
        Backend::Postgres => GREETED_PG.open(),
        _ => GREETED.open(),
    };

    // The getting-started guide's statements, as a Java, Python, PHP or Go service would send
    // them, in each database's form.
    let statements = &match backend {
        Backend::Postgres => {
            format!(
                "INSERT INTO job_queue (queue, kind, task_key, payload) \
             VALUES ('{name}', 'greet_user', 'welcome:42', '{{\"user_id\": 42}}') \
             ON CONFLICT (task_key) DO NOTHING;
             INSERT INTO job_queue (queue, kind, task_key, payload, run_at, priority) \
             VALUES ('{name}', 'greet_user', 'reminder:42', '{{\"user_id\": 43}}', \
                     job_queue_now() + INTERVAL '2 seconds', -5) \
             ON CONFLICT (task_key) DO NOTHING;"
            )
        }
        _ => {
            format!(
                "INSERT INTO job_queue (queue, kind, task_key, payload) \
             VALUES ('{name}', 'greet_user', 'welcome:42', '{{\"user_id\": 42}}');
             INSERT INTO job_queue (queue, kind, task_key, payload, run_at, priority) \
             VALUES ('{name}', 'greet_user', 'reminder:42', '{{\"user_id\": 43}}', \
                     UTC_TIMESTAMP(6) + INTERVAL 2 SECOND, -5);"
            )
        }
    };
    raw(&queue, statements)
        .await
        .expect("a plain INSERT naming four columns is a complete job");
    let now_id = id_of(&queue, b"welcome:42").await;
    let later_id = id_of(&queue, b"reminder:42").await;
    let later = queue.job(later_id).await.unwrap().unwrap();
    assert_eq!(later.status, JobStatus::Scheduled);
    assert_eq!((later.priority, later.max_attempts), (-5, 25));

    let (handle, task) = start(
        quick_worker(&queue)
            .queues([name.as_str()])
            .build()
            .unwrap(),
    );
    let done = wait_status(&queue, now_id, JobStatus::Done, Duration::from_secs(20)).await;
    assert_eq!(done.attempts, 1);
    let first = tests::receive(&mut greeted, "the first job", Duration::from_secs(5)).await;
    assert_eq!(first, ("welcome:42".to_owned(), 42));
    let done = wait_status(&queue, later_id, JobStatus::Done, Duration::from_secs(20)).await;
    let second = tests::receive(&mut greeted, "the delayed job", Duration::from_secs(5)).await;
    assert_eq!(second, ("reminder:42".to_owned(), 43));
    let waited = (done.finished_at.expect("finished") - done.created_at)
        .num_microseconds()
        .expect("a short wait");
    assert!(
        waited >= 2_000_000,
        "the delayed job ran after its run_at ({waited} us)"
    );
    stop(&handle, task).await;
}

async fn rows_with_bad_values_never_stop_the_claim_of_their_queue(backend: Backend) {
    init_tracing();
    let queue = fresh_queue_on(backend, "sql_bad_rows").await;
    let name = queue_name("sql_bad_rows", backend);
    let mut greeted = match backend {
        Backend::Postgres => GREETED_DESPITE_BAD_ROWS_PG.open(),
        _ => GREETED_DESPITE_BAD_ROWS.open(),
    };
    // The bad rows come first (lower ids, higher priority), so every claim meets them before
    // the good one. A key that is not UTF-8 can be stored on MySQL/MariaDB only (a VARBINARY
    // column); PostgreSQL's text refuses it, checked below.
    let binary_row = match backend {
        Backend::Postgres => String::new(),
        _ => format!("('{name}', 'greet_user', X'FF00FE', '{{\"user_id\": 1}}', -9), "),
    };
    raw(
        &queue,
        &format!(
            "INSERT INTO job_queue (queue, kind, task_key, payload, priority) VALUES \
               {binary_row}\
               ('{name}', 'no_such_kind', 'unknown-kind', '{{}}', -8), \
               ('{name}', 'greet_user', 'bad-payload', '{{\"user_id\": \"one\"}}', -7), \
               ('nobody_serves_this', 'greet_user', 'unknown-queue', '{{\"user_id\": 3}}', -6), \
               ('{name}', 'greet_user', 'good', '{{\"user_id\": 4}}', 0);"
        ),
    )
    .await
    .unwrap();
    // JSON that is not JSON at all never gets in.
    let not_json = raw(
        &queue,
        "INSERT INTO job_queue (queue, kind, task_key, payload) \
         VALUES ('sql_bad_rows', 'greet_user', 'not-json', '{user_id: 5')",
    )
    .await;
    assert!(not_json.is_err(), "the JSON column refuses it");
    let binary_key = match backend {
        Backend::Postgres => {
            let refused = raw(
                &queue,
                "INSERT INTO job_queue (queue, kind, task_key, payload) \
                 VALUES ('sql_bad_rows', 'greet_user', convert_from('\\xff00fe'::bytea, 'UTF8'), '{}')",
            )
            .await;
            assert!(
                refused.is_err(),
                "a text key cannot hold bytes that are not UTF-8"
            );
            None
        }
        _ => Some(id_of(&queue, b"\xFF\x00\xFE").await),
    };
    let unknown_kind = id_of(&queue, b"unknown-kind").await;
    let bad_payload = id_of(&queue, b"bad-payload").await;
    let unknown_queue = id_of(&queue, b"unknown-queue").await;
    let good = id_of(&queue, b"good").await;

    // One slot: a claim that chokes on one row would take nothing else, ever.
    let (handle, task) = start(
        quick_worker(&queue)
            .queues([name.as_str(), "default"])
            .concurrency(1)
            .build()
            .unwrap(),
    );
    wait_status(&queue, good, JobStatus::Done, Duration::from_secs(30)).await;
    // A payload that does not fit the kind's arguments may fit those of another release:
    // it waits for a worker that can run it, naming the field, and spends no attempt.
    let payload_wait = wait_for(
        "the bad-payload job to be put back for another worker",
        Duration::from_secs(10),
        || async {
            let job = queue.job(bad_payload).await.unwrap().unwrap();
            job.last_error
                .as_deref()
                .is_some_and(|e| e.starts_with("waiting for a worker that can run it"))
                .then_some(job)
        },
    )
    .await;
    assert!(
        payload_wait
            .last_error
            .as_deref()
            .is_some_and(|e| e.contains("user_id")),
        "{:?}",
        payload_wait.last_error
    );
    assert!(
        payload_wait.max_attempts > payload_wait.attempts,
        "no attempt spent: {payload_wait:?}"
    );
    // A key that is not UTF-8 cannot be handed to the job as its `task_key`: that row fails
    // alone, saying why, and its queue goes on (the good job above ran).
    if let Some(binary_key) = binary_key {
        let binary = wait_status(
            &queue,
            binary_key,
            JobStatus::Failed,
            Duration::from_secs(10),
        )
        .await;
        assert!(
            binary
                .last_error
                .as_deref()
                .is_some_and(|e| e.contains("task_key") && e.contains("UTF-8")),
            "{:?}",
            binary.last_error
        );
        // It still reads, lists and shows, its key decoded lossily.
        assert_eq!(binary.task_key, "\u{FFFD}\0\u{FFFD}");
    }
    let seen = tests::receive(&mut greeted, "the good job's run", Duration::from_secs(5)).await;
    assert_eq!(seen, ("good".to_owned(), 4));
    // A kind no worker knows waits for a retry (another deployment may know it). Between a
    // claim and its put-back it is `running` for a moment, which a read can meet; under load
    // its first put-back may come after the good job has run, so it is awaited.
    let unknown = wait_for(
        "the unknown kind's job to be put back",
        Duration::from_secs(10),
        || async {
            let job = queue.job(unknown_kind).await.unwrap().unwrap();
            job.last_error.is_some().then_some(job)
        },
    )
    .await;
    assert!(
        matches!(
            unknown.status,
            JobStatus::Scheduled | JobStatus::Ready | JobStatus::Running
        ),
        "{unknown:?}"
    );
    assert!(
        unknown
            .last_error
            .as_deref()
            .is_some_and(|e| e.contains("no_such_kind")),
        "{unknown:?}"
    );
    // A queue nobody serves just waits.
    assert_eq!(
        queue.job(unknown_queue).await.unwrap().unwrap().status,
        JobStatus::Ready
    );
    stop(&handle, task).await;
}

on_every_backend!(
    jobs_inserted_with_plain_sql_run,
    rows_with_bad_values_never_stop_the_claim_of_their_queue,
);
