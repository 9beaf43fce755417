//! The testing API applications use (`jobqueue::testing`): a database per test, running one
//! job with `perform`, typed assertions on enqueued jobs with their exact failure messages,
//! and `drain`. The tests that use a database run on every backend (`mysql::...`,
//! `postgres::...`); `perform` and the job context need none.

use std::future::IntoFuture;
use std::sync::Arc;
use std::time::Duration;

use jobqueue::context::CancelReason;
use jobqueue::testing::{
    assert_enqueued, drain, enqueued, perform, refute_enqueued, Performed, TestDatabase,
};
use jobqueue::{job, Data, EnqueueOptions, Error, JobContext, JobError, JobStatus, Queue};
use tests::{on_every_backend, sql_exec, sql_i64, Arg, Backend};
use tokio::sync::{mpsc, oneshot};

/// What a job saw of its context: id, task key, queue, attempt, max attempts, cancelled.
type Sight = (u64, String, String, u32, u32, bool);
/// Where a job sends what it saw.
type Seen = mpsc::UnboundedSender<Sight>;

#[job(queue = "testing_api", backoff = "constant(30s)", max_attempts = 3)]
async fn charge(ctx: JobContext, seen: Data<Seen>, order_id: u64) -> Result<(), JobError> {
    let _ = seen.send((
        ctx.id(),
        ctx.task_key().to_owned(),
        ctx.queue().to_owned(),
        ctx.attempt(),
        ctx.max_attempts(),
        ctx.is_cancelled(),
    ));
    match order_id {
        0 => Err(JobError::permanent("order 0 does not exist")),
        1 => Err(JobError::retryable("card declined")),
        2 => panic!("lost the card"),
        _ if ctx.is_cancelled() => Err(JobError::retryable("stopped before charging")),
        _ => Ok(()),
    }
}

/// Waits until it is cancelled, telling its test once it has started.
#[job(queue = "testing_api")]
async fn long_export(
    ctx: JobContext,
    started: Data<mpsc::UnboundedSender<()>>,
) -> Result<(), JobError> {
    let _ = started.send(());
    ctx.cancelled().await;
    Err(JobError::retryable(format!(
        "export stopped: {:?}",
        ctx.cancel_reason()
    )))
}

#[job(queue = "testing_api", timeout = "50ms")]
async fn hang() {
    std::future::pending::<()>().await;
}

#[job(queue = "testing_mail", key = "welcome:{user_id}")]
async fn send_welcome(user_id: u64, address: String) {
    let _ = (user_id, address);
}

#[job(queue = "testing_mail")]
async fn ask_for_review(order_id: u64) {
    let _ = order_id;
}

/// Signs a user up and enqueues their welcome mail: a follow-up job from a job.
#[job(queue = "testing_signup")]
async fn sign_up(queue: Data<Queue>, user_id: u64) -> Result<(), JobError> {
    queue
        .enqueue(SendWelcome {
            user_id,
            address: format!("user{user_id}@example.com"),
        })
        .await?;
    Ok(())
}

/// Fails until its third attempt.
#[job(queue = "testing_flaky", max_attempts = 3)]
async fn flaky(ctx: JobContext, n: u32) -> Result<(), JobError> {
    if ctx.attempt() < 3 {
        return Err(JobError::retryable(format!("flaky {n}: not yet")));
    }
    Ok(())
}

/// Always fails.
#[job(queue = "testing_flaky", max_attempts = 2)]
async fn broken() -> Result<(), JobError> {
    Err(JobError::retryable("broken for good"))
}

/// Enqueues its successor without end.
#[job(queue = "testing_loop")]
async fn forever(queue: Data<Queue>, n: u64) -> Result<(), JobError> {
    queue.enqueue(Forever { n: n + 1 }).await?;
    Ok(())
}

/// Waits for a report another system prepares: snoozes until `ready`, then returns it.
#[job(queue = "testing_report", max_snoozes = 5)]
async fn fetch_report(report_id: u64, ready: bool) -> Result<Report, JobError> {
    if !ready {
        return Err(JobError::snooze(Duration::from_secs(60)));
    }
    Ok(Report { report_id, rows: 3 })
}

/// What `fetch_report` returns.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
struct Report {
    report_id: u64,
    rows: u32,
}

/// The panic message of a task that panicked.
async fn panic_of<T: Send + 'static>(
    fut: impl std::future::Future<Output = T> + Send + 'static,
) -> String {
    let panic = tokio::spawn(fut)
        .await
        .err()
        .expect("it panics")
        .into_panic();
    panic
        .downcast_ref::<String>()
        .cloned()
        .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
        .expect("a text panic")
}

/// Whether the server of `db` has a database `name`, read over a connection of its own.
async fn schema_exists(db: &TestDatabase, name: &str) -> bool {
    let other = Queue::connect(db.url()).await.expect("connect");
    let sql = match other.backend() {
        Backend::Postgres => "SELECT COUNT(*) FROM pg_database WHERE datname = ?",
        _ => "SELECT COUNT(*) FROM information_schema.SCHEMATA WHERE SCHEMA_NAME = ?",
    };
    sql_i64(&other, sql, &[Arg::Text(name)]).await == 1
}

// ---------------------------------------------------------------------------------------
// A database per test
// ---------------------------------------------------------------------------------------

async fn a_test_database_is_migrated_and_empty_and_dropped_with_its_guard(backend: Backend) {
    let (a, b) = tokio::join!(
        TestDatabase::new_on(backend, "api_db"),
        TestDatabase::new_on(backend, "api_db")
    );
    let (a, b) = (a.expect("first"), b.expect("second"));
    assert_ne!(a.name(), b.name());
    assert!(a.name().starts_with("jqtest_api_db_"), "{}", a.name());
    a.queue().check_schema().await.expect("migrated");
    assert_eq!(a.queue().count(&Default::default()).await.unwrap(), 0);
    a.queue()
        .enqueue(AskForReview { order_id: 1 })
        .await
        .unwrap();
    assert_eq!(
        b.queue().count(&Default::default()).await.unwrap(),
        0,
        "tests do not see each other's jobs"
    );

    let name = a.name().to_owned();
    assert!(schema_exists(&b, &name).await);
    drop(a);
    assert!(!schema_exists(&b, &name).await, "dropped with its guard");

    // `keep` leaves it, for a look after the test.
    let kept = TestDatabase::new_on(backend, "api_db_kept").await.unwrap();
    let kept_name = kept.name().to_owned();
    let url = kept.keep();
    assert!(url.ends_with(&kept_name), "{url}");
    assert!(schema_exists(&b, &kept_name).await);
    let drop_kept = match backend {
        // The kept queue's pool may not have closed its sessions yet.
        Backend::Postgres => format!("DROP DATABASE \"{kept_name}\" WITH (FORCE)"),
        _ => format!("DROP DATABASE `{kept_name}`"),
    };
    sql_exec(b.queue(), &drop_kept, &[]).await;
    assert!(!schema_exists(&b, &kept_name).await);

    // An empty one is not migrated, and says how to get a queue.
    let empty = TestDatabase::empty_on(backend, "api_db_empty")
        .await
        .unwrap();
    let unmigrated = Queue::connect(empty.url()).await.unwrap();
    assert!(matches!(
        unmigrated.check_schema().await,
        Err(Error::SchemaMissing)
    ));
    let message = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        let _ = empty.queue();
    }))
    .unwrap_err();
    assert_eq!(
        message.downcast_ref::<String>().unwrap(),
        &format!(
            "the test database `{}` was made with `TestDatabase::empty`, which connects no queue; \
             use `TestDatabase::new`, or `Queue::connect(db.url())`",
            empty.name()
        )
    );
}

/// `Drop` cannot await: the guard drops its database on a runtime of its own, which works
/// from a single-threaded test runtime too, without blocking it for good.
async fn a_test_database_is_dropped_from_a_single_threaded_runtime(backend: Backend) {
    let witness = TestDatabase::new_on(backend, "api_db_witness")
        .await
        .unwrap();
    let db = TestDatabase::new_on(backend, "api_db_current")
        .await
        .unwrap();
    db.queue()
        .enqueue(AskForReview { order_id: 1 })
        .await
        .unwrap();
    let name = db.name().to_owned();
    drop(db);
    assert!(!schema_exists(&witness, &name).await);
}

async fn only_test_databases_are_dropped(backend: Backend) {
    let server = match backend {
        Backend::Postgres => jobqueue::testing::TestServer::shared_postgres().unwrap(),
        _ => jobqueue::testing::TestServer::shared().unwrap(),
    };
    let err = server.drop_database_blocking("shop").unwrap_err();
    assert_eq!(
        err.to_string(),
        "test database server: refusing to drop the database \"shop\": only databases made by \
         TestServer::create_database (named jqtest_...) are dropped"
    );
}

// ---------------------------------------------------------------------------------------
// perform
// ---------------------------------------------------------------------------------------

#[tokio::test]
async fn perform_gives_the_job_the_context_a_worker_would() {
    let (tx, mut rx) = mpsc::unbounded_channel::<Sight>();
    let performed = perform(Charge { order_id: 7 }).data(tx.clone()).await;
    assert_eq!(performed, Performed::Done);
    let key = jobqueue::key::derived_task_key("charge", &Charge { order_id: 7 }).unwrap();
    assert_eq!(
        rx.recv().await.unwrap(),
        (1, key, "testing_api".to_owned(), 1, 3, false),
        "attempt 1 of the kind's 3, its derived key and its queue"
    );

    let performed = perform(Charge { order_id: 7 })
        .id(42)
        .task_key("charge:seven")
        .queue("elsewhere")
        .attempt(2)
        .max_attempts(5)
        .data(tx)
        .await;
    assert_eq!(performed, Performed::Done);
    assert_eq!(
        rx.recv().await.unwrap(),
        (
            42,
            "charge:seven".to_owned(),
            "elsewhere".to_owned(),
            2,
            5,
            false
        )
    );
}

#[tokio::test]
async fn perform_returns_what_the_worker_would_record() {
    let (tx, _rx) = mpsc::unbounded_channel::<Sight>();
    // A retry after the kind's backoff (30 s, ±20 %).
    let Performed::Retry { delay, error } = perform(Charge { order_id: 1 }).data(tx.clone()).await
    else {
        panic!("not a retry");
    };
    assert_eq!(error, "card declined");
    assert!(
        delay >= Duration::from_secs(24) && delay <= Duration::from_secs(36),
        "{delay:?}"
    );
    // The last attempt fails for good.
    assert_eq!(
        perform(Charge { order_id: 1 })
            .attempt(3)
            .data(tx.clone())
            .await,
        Performed::Failed {
            error: "card declined (attempt 3 of 3)".into()
        }
    );
    // A permanent error is not retried.
    assert_eq!(
        perform(Charge { order_id: 0 }).data(tx.clone()).await,
        Performed::Failed {
            error: "order 0 does not exist (permanent error, not retried)".into()
        }
    );
    // A panic is a failed attempt.
    assert!(matches!(
        perform(Charge { order_id: 2 }).data(tx.clone()).await,
        Performed::Retry { error, .. } if error == "job panicked: lost the card"
    ));
    // The kind's timeout holds.
    assert!(matches!(
        perform(Hang {}).await,
        Performed::Retry { error, .. } if error == "timed out after 50ms"
    ));
}

#[tokio::test]
async fn perform_cancels_before_the_start_or_on_a_signal() {
    let (tx, mut rx) = mpsc::unbounded_channel::<Sight>();
    assert_eq!(
        perform(Charge { order_id: 7 })
            .cancel_before_start()
            .data(tx)
            .await,
        Performed::Cancelled {
            error: "stopped before charging".into()
        }
    );
    assert!(
        rx.recv().await.unwrap().5,
        "the job saw itself cancelled from its start"
    );

    // Cancelled once it has started, when the test says so.
    let (started_tx, mut started) = mpsc::unbounded_channel::<()>();
    let (cancel, cancelled) = oneshot::channel::<()>();
    let job = tokio::spawn(
        perform(LongExport {})
            .data(started_tx.clone())
            .cancel_on(async move {
                let _ = cancelled.await;
            })
            .into_future(),
    );
    started.recv().await.expect("the job started");
    cancel.send(()).unwrap();
    assert_eq!(
        job.await.unwrap(),
        Performed::Cancelled {
            error: "export stopped: Some(Requested)".into()
        }
    );

    // Or after a while.
    assert_eq!(
        perform(LongExport {})
            .data(started_tx)
            .cancel_after(Duration::from_millis(20))
            .await,
        Performed::Cancelled {
            error: "export stopped: Some(Requested)".into()
        }
    );
}

#[tokio::test]
async fn perform_names_what_is_missing() {
    assert_eq!(
        panic_of(perform(Charge { order_id: 7 }).into_future()).await,
        "perform: job `charge` needs `Data<Seen>`; give it with `.data(value)`"
    );
    let (tx, _rx) = mpsc::unbounded_channel::<Sight>();
    assert_eq!(
        panic_of(
            perform(Charge { order_id: 7 })
                .data(tx)
                .attempt(4)
                .into_future()
        )
        .await,
        "perform: attempt 4 of 3 cannot happen; attempts count from 1 up to `max_attempts`"
    );
}

/// A hand-written kind that nobody registered.
#[derive(serde::Serialize, serde::Deserialize)]
struct Unregistered {
    fail: bool,
}

impl jobqueue::Job for Unregistered {
    const KIND: &'static str = "testing_api_unregistered";
    const OPTIONS: jobqueue::JobOptions = jobqueue::JobOptions::DEFAULT.max_attempts(2);
    async fn run(self, ctx: JobContext) -> Result<(), JobError> {
        if self.fail {
            return Err(JobError::retryable(format!(
                "failed attempt {}",
                ctx.attempt()
            )));
        }
        Ok(())
    }
}

#[tokio::test]
async fn perform_runs_a_kind_that_is_not_registered() {
    assert!(jobqueue::registry::lookup("testing_api_unregistered").is_none());
    assert_eq!(perform(Unregistered { fail: false }).await, Performed::Done);
    assert_eq!(
        perform(Unregistered { fail: true }).attempt(2).await,
        Performed::Failed {
            error: "failed attempt 2 (attempt 2 of 2)".into()
        }
    );
}

#[test]
fn a_context_built_outside_a_worker_has_its_attempt_and_cancellation() {
    let builder = JobContext::builder(9, "k:9")
        .kind("charge")
        .queue("payments")
        .attempt(2)
        .max_attempts(4)
        .data(Arc::new(5u8));
    let canceller = builder.canceller();
    let ctx = builder.build();
    assert_eq!(
        (
            ctx.id(),
            ctx.task_key(),
            ctx.kind(),
            ctx.queue(),
            ctx.attempt(),
            ctx.max_attempts()
        ),
        (9, "k:9", "charge", "payments", 2, 4)
    );
    assert_eq!(ctx.data::<Arc<u8>>().map(|v| **v), Some(5));
    assert!(!ctx.is_cancelled());
    canceller.cancel(CancelReason::Requested);
    canceller.cancel(CancelReason::Shutdown);
    assert!(ctx.is_cancelled());
    assert_eq!(
        ctx.cancel_reason(),
        Some(CancelReason::Requested),
        "the first reason stays"
    );

    let ctx = JobContext::builder(1, "k")
        .cancelled(CancelReason::Shutdown)
        .build();
    assert_eq!(ctx.cancel_reason(), Some(CancelReason::Shutdown));
    // `detached` keeps working: attempt 1 of 1.
    let ctx = JobContext::detached(3, "k:3");
    assert_eq!(
        (ctx.attempt(), ctx.max_attempts(), ctx.is_cancelled()),
        (1, 1, false)
    );
}

// ---------------------------------------------------------------------------------------
// Assertions on enqueued jobs
// ---------------------------------------------------------------------------------------

async fn enqueued_jobs_are_read_back_as_their_structs(backend: Backend) {
    let db = TestDatabase::new_on(backend, "api_enqueued").await.unwrap();
    let queue = db.queue();
    queue
        .enqueue(SendWelcome {
            user_id: 1,
            address: "ada@example.com".into(),
        })
        .await
        .unwrap();
    queue
        .enqueue_with(
            SendWelcome {
                user_id: 2,
                address: "bob@example.com".into(),
            },
            EnqueueOptions::default()
                .delay(Duration::from_secs(3600))
                .priority(-5),
        )
        .await
        .unwrap();
    queue.enqueue(AskForReview { order_id: 7 }).await.unwrap();

    let welcomes = enqueued::<SendWelcome>(queue).await;
    let users: Vec<(u64, &str, Duration)> = welcomes
        .iter()
        .map(|j| (j.args.user_id, j.record.task_key.as_str(), j.delay()))
        .collect();
    assert_eq!(
        users,
        [
            (1, "welcome:1", Duration::ZERO),
            (2, "welcome:2", Duration::from_secs(3600))
        ]
    );

    let found = assert_enqueued::<SendWelcome>(queue)
        .matching(|j| j.address == "bob@example.com")
        .queue("testing_mail")
        .priority(-5)
        .delay(Duration::from_secs(3600))
        .await;
    assert_eq!(found.len(), 1);
    assert_eq!(found[0].record.status, JobStatus::Scheduled);
    assert_eq!(assert_enqueued::<SendWelcome>(queue).await.len(), 2);
    assert_eq!(
        assert_enqueued::<SendWelcome>(queue)
            .delay(Duration::ZERO)
            .await[0]
            .args
            .user_id,
        1
    );
    refute_enqueued::<SendWelcome>(queue)
        .matching(|j| j.user_id == 3)
        .await;
    refute_enqueued::<SendWelcome>(queue).queue("other").await;
    refute_enqueued::<Flaky>(queue).await;
}

async fn a_failed_assertion_lists_what_was_enqueued_instead(backend: Backend) {
    let db = TestDatabase::new_on(backend, "api_assert_message")
        .await
        .unwrap();
    let queue = db.queue().clone();
    assert_eq!(
        panic_of(assert_enqueued::<SendWelcome>(&queue).into_future()).await,
        "expected a `send_welcome` job; found no job enqueued at all"
    );

    let a = queue
        .enqueue(SendWelcome {
            user_id: 1,
            address: "ada@example.com".into(),
        })
        .await
        .unwrap()
        .id();
    let b = queue
        .enqueue_with(
            AskForReview { order_id: 7 },
            EnqueueOptions::default().delay(Duration::from_secs(3600)),
        )
        .await
        .unwrap()
        .id();
    assert_eq!(
        panic_of(
            assert_enqueued::<SendWelcome>(&queue)
                .matching(|j| j.user_id == 2)
                .queue("testing_mail")
                .priority(3)
                .delay(Duration::from_secs(60))
                .into_future()
        )
        .await,
        format!(
            "expected a `send_welcome` job in queue `testing_mail`, with priority 3, delayed 60s (within 1s), matching the predicate; found none among the 2 jobs enqueued:\n  \
             job {a}: `send_welcome` in queue `testing_mail`, priority 0, due at once, ready, {{\"address\":\"ada@example.com\",\"user_id\":1}}\n  \
             job {b}: `ask_for_review` in queue `testing_mail`, priority 0, delayed 3600s, scheduled, {{\"order_id\":7}}"
        )
    );
    assert_eq!(
        panic_of(
            refute_enqueued::<SendWelcome>(&queue)
                .matching(|j| j.user_id == 1)
                .into_future()
        )
        .await,
        format!(
            "expected no `send_welcome` job matching the predicate; found 1:\n  \
             job {a}: `send_welcome` in queue `testing_mail`, priority 0, due at once, ready, {{\"address\":\"ada@example.com\",\"user_id\":1}}"
        )
    );
}

// ---------------------------------------------------------------------------------------
// drain
// ---------------------------------------------------------------------------------------

async fn drain_runs_due_jobs_and_the_jobs_they_enqueue(backend: Backend) {
    let db = TestDatabase::new_on(backend, "api_drain").await.unwrap();
    let queue = db.queue();
    for user_id in [1, 2] {
        queue.enqueue(SignUp { user_id }).await.unwrap();
    }
    let later = queue
        .enqueue_with(
            AskForReview { order_id: 9 },
            EnqueueOptions::default().delay(Duration::from_secs(3600)),
        )
        .await
        .unwrap()
        .id();

    let summary = drain(queue)
        .queues(["testing_signup", "testing_mail"])
        .await
        .unwrap();
    assert_eq!(summary.kind("sign_up").done, 2);
    assert_eq!(
        summary.kind("send_welcome").done,
        2,
        "follow-ups drained too"
    );
    assert_eq!(summary.kind("ask_for_review").runs(), 0, "not due yet");
    assert_eq!(summary.total.runs(), 4);
    assert_eq!(
        queue.job(later).await.unwrap().unwrap().status,
        JobStatus::Scheduled
    );
    let welcomed: Vec<u64> = enqueued::<SendWelcome>(queue)
        .await
        .iter()
        .filter(|j| j.record.status == JobStatus::Done)
        .map(|j| j.args.user_id)
        .collect();
    assert_eq!(welcomed, [1, 2]);

    // Moving time forward runs it.
    let summary = drain(queue)
        .queues(["testing_mail"])
        .with_scheduled()
        .await
        .unwrap();
    assert_eq!(summary.kind("ask_for_review").done, 1);
    assert_eq!(
        queue.job(later).await.unwrap().unwrap().status,
        JobStatus::Done
    );
}

async fn drain_with_scheduled_runs_retries_to_the_end(backend: Backend) {
    let db = TestDatabase::new_on(backend, "api_drain_retries")
        .await
        .unwrap();
    let queue = db.queue();
    let flaky = queue.enqueue(Flaky { n: 1 }).await.unwrap().id();
    let broken = queue.enqueue(Broken {}).await.unwrap().id();

    let first = drain(queue).queues(["testing_flaky"]).await.unwrap();
    assert_eq!(
        (first.total.retried, first.total.runs()),
        (2, 2),
        "{first:?}"
    );

    let rest = drain(queue)
        .queues(["testing_flaky"])
        .with_scheduled()
        .await
        .unwrap();
    assert_eq!(rest.kind("flaky").retried, 1, "{rest:?}");
    assert_eq!(rest.kind("flaky").done, 1, "{rest:?}");
    assert_eq!(rest.kind("broken").failed, 1, "{rest:?}");
    let flaky = queue.job(flaky).await.unwrap().unwrap();
    assert_eq!((flaky.status, flaky.attempts), (JobStatus::Done, 3));
    let broken = queue.job(broken).await.unwrap().unwrap();
    assert_eq!(broken.status, JobStatus::Failed);
    assert_eq!(
        broken.last_error.as_deref(),
        Some("broken for good (attempt 2 of 2)")
    );
}

#[job(
    queue = "testing_rate",
    rate_limit = "2/1h",
    rate_key = "sms:{provider}"
)]
async fn send_sms(provider: String, n: u32) {
    let _ = (provider, n);
}

async fn a_drain_names_the_jobs_a_rate_limit_left_blocked_and_with_scheduled_runs_them(
    backend: Backend,
) {
    let db = TestDatabase::new_on(backend, "api_drain_rate")
        .await
        .unwrap();
    let queue = db.queue();
    let mut ids = Vec::new();
    for n in 0..4 {
        let sms = SendSms {
            provider: "acme".into(),
            n,
        };
        ids.push(queue.enqueue(sms).await.unwrap().id());
    }
    let statuses = || async {
        let mut out = Vec::new();
        for id in &ids {
            out.push(queue.job(*id).await.unwrap().unwrap().status);
        }
        out
    };

    // Two starts per hour: the drain runs two and says why it left the others.
    let err = drain(queue).queues(["testing_rate"]).await.unwrap_err();
    assert_eq!(
        err.to_string(),
        format!(
            "testing: drain ended with jobs still blocked by their limits: job {} (`send_sms`, \
             queue `testing_rate`) waits for the rate key \"sms:acme\"; job {} (`send_sms`, \
             queue `testing_rate`) waits for the rate key \"sms:acme\"; a rate limit holds \
             them until its window passes: drain `.with_scheduled()` to move time forward, or \
             assert on them as `blocked`",
            ids[2], ids[3]
        )
    );
    assert_eq!(
        statuses().await,
        [
            JobStatus::Done,
            JobStatus::Done,
            JobStatus::Blocked,
            JobStatus::Blocked
        ]
    );

    // Moving time forward, the windows pass and the rest run.
    let rest = drain(queue)
        .queues(["testing_rate"])
        .with_scheduled()
        .await
        .unwrap();
    assert_eq!(rest.kind("send_sms").done, 2, "{rest:?}");
    assert_eq!(statuses().await, [JobStatus::Done; 4]);
}

async fn a_drain_that_never_ends_stops_at_its_bound(backend: Backend) {
    let db = TestDatabase::new_on(backend, "api_drain_bound")
        .await
        .unwrap();
    let queue = db.queue();
    queue.enqueue(Forever { n: 0 }).await.unwrap();
    let err = drain(queue)
        .queues(["testing_loop"])
        .max_runs(5)
        .await
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        "testing: drain stopped after 5 runs (its bound) with 1 jobs of queue `testing_loop` \
         still ready: a job that enqueues another without end? If the work is finite, raise \
         the bound with `.max_runs(n)`"
    );
    assert_eq!(
        enqueued::<Forever>(queue).await.len(),
        6,
        "five ran, the sixth waits"
    );
}

async fn a_drain_stops_at_a_job_it_cannot_run_and_keeps_it(backend: Backend) {
    let db = TestDatabase::new_on(backend, "api_drain_unknown")
        .await
        .unwrap();
    let queue = db.queue();
    sql_exec(
        queue,
        "INSERT INTO job_queue (queue, kind, task_key, payload) \
         VALUES ('testing_mail', 'no_such_kind', 'unknown:1', '{}')",
        &[],
    )
    .await;
    // Rows written by SQL start `scheduled`; the drain promotes them as maintenance would.
    let err = drain(queue).queues(["testing_mail"]).await.unwrap_err();
    let message = err.to_string();
    assert!(
        message.starts_with("testing: drain cannot run job 1 (`no_such_kind`), which was put back to wait for a worker that can: job kind `no_such_kind` is not registered in this worker"),
        "{message}"
    );
    let row = queue.job(1).await.unwrap().unwrap();
    assert_eq!(row.status, JobStatus::Scheduled, "nothing is lost");
}

/// A reminder due later, of a queue of its own.
#[job(queue = "testing_bulk")]
async fn remind(n: u32) {
    let _ = n;
}

/// Moving time forward brings every scheduled job of the drained queue forward, however
/// many there are: the store moves them in rounds of 500, each after the last one the
/// previous round read (they stay `scheduled` until promoted, so a round that started over
/// would read the same jobs again, without end). Scheduled jobs of other queues keep their
/// time.
async fn drain_with_scheduled_brings_forward_every_scheduled_job(backend: Backend) {
    const N: u32 = 1_200;
    let db = TestDatabase::new_on(backend, "api_drain_many")
        .await
        .unwrap();
    let queue = db.queue();
    // Three priorities of 400 jobs each, so that a round of 500 spans two priorities and
    // ends inside one.
    for n in 0..N {
        let options = EnqueueOptions::default()
            .delay(Duration::from_secs(3600))
            .priority((n % 3) as i16 - 1);
        assert!(queue
            .enqueue_with(Remind { n }, options)
            .await
            .unwrap()
            .is_new());
    }
    let other = queue
        .enqueue_with(
            AskForReview { order_id: 1 },
            EnqueueOptions::default().delay(Duration::from_secs(3600)),
        )
        .await
        .unwrap()
        .id();
    let other_run_at = queue.job(other).await.unwrap().unwrap().run_at;

    let later = match backend {
        Backend::Postgres => {
            "SELECT COUNT(*) FROM job_queue \
             WHERE queue = ? AND status = 'scheduled' AND run_at > job_queue_now()"
        }
        _ => {
            "SELECT COUNT(*) FROM job_queue \
             WHERE queue = ? AND status = 'scheduled' AND run_at > UTC_TIMESTAMP(6)"
        }
    };
    assert_eq!(
        sql_i64(queue, later, &[Arg::Text("testing_bulk")]).await,
        i64::from(N)
    );
    let moved = tokio::time::timeout(
        Duration::from_secs(60),
        queue.store().bring_forward("testing_bulk"),
    )
    .await
    .expect("bringing the jobs forward ends")
    .unwrap();
    assert_eq!(moved, u64::from(N), "each job moved once");
    assert_eq!(
        sql_i64(queue, later, &[Arg::Text("testing_bulk")]).await,
        0,
        "none left in the future"
    );

    // What a test does: drain, moving time forward. The drain brings them forward again
    // (they are still `scheduled`: all 1,200 go through its rounds once more) and promotes
    // them; with a bound of no runs, it stops and says how many are ready, which is all of
    // them. (Running them is the other drain tests' subject: here it would only take time.)
    let err = tokio::time::timeout(
        Duration::from_secs(60),
        drain(queue)
            .queues(["testing_bulk"])
            .with_scheduled()
            .max_runs(0)
            .into_future(),
    )
    .await
    .expect("the drain ends")
    .unwrap_err();
    assert_eq!(
        err.to_string(),
        format!(
            "testing: drain stopped after 0 runs (its bound) with {N} jobs of queue \
             `testing_bulk` still ready: a job that enqueues another without end? If the work \
             is finite, raise the bound with `.max_runs(n)`"
        )
    );
    let ready = sql_i64(
        queue,
        "SELECT COUNT(*) FROM job_queue WHERE queue = ? AND status = 'ready' AND attempts = 0",
        &[Arg::Text("testing_bulk")],
    )
    .await;
    assert_eq!(ready, i64::from(N));

    // The other queue's job was not drained, and kept its time.
    let r = queue.job(other).await.unwrap().unwrap();
    assert_eq!((r.status, r.run_at), (JobStatus::Scheduled, other_run_at));
}

#[tokio::test]
async fn perform_reports_a_snooze_and_an_output() {
    assert_eq!(
        perform(FetchReport {
            report_id: 7,
            ready: false
        })
        .await,
        Performed::Snoozed {
            delay: Duration::from_secs(60)
        }
    );
    assert_eq!(
        perform(FetchReport {
            report_id: 7,
            ready: true
        })
        .await,
        Performed::DoneWithOutput(serde_json::json!({ "report_id": 7, "rows": 3 }))
    );
}

async fn drain_counts_snoozes_apart_and_keeps_outputs(backend: Backend) {
    let db = TestDatabase::new_on(backend, "api_drain_snooze")
        .await
        .unwrap();
    let queue = db.queue();
    let waiting = queue
        .enqueue(FetchReport {
            report_id: 1,
            ready: false,
        })
        .await
        .unwrap()
        .id();
    let ready = queue
        .enqueue(FetchReport {
            report_id: 2,
            ready: true,
        })
        .await
        .unwrap()
        .id();

    let summary = drain(queue).queues(["testing_report"]).await.unwrap();
    let counts = summary.kind("fetch_report");
    assert_eq!(
        (counts.done, counts.snoozed, counts.retried, counts.runs()),
        (1, 1, 0, 2),
        "{summary:?}"
    );
    // The snoozed job spent no attempt: its budget grew by one.
    let waiting = queue.job(waiting).await.unwrap().unwrap();
    assert_eq!(
        (
            waiting.status,
            waiting.attempts,
            waiting.max_attempts,
            waiting.snoozes
        ),
        (JobStatus::Scheduled, 1, 26, 1)
    );
    // The other one's output is stored, readable typed.
    assert_eq!(
        queue.output::<FetchReport>(ready).await.unwrap(),
        Some(Report {
            report_id: 2,
            rows: 3
        })
    );
}

/// The application's own migrations, as a `sqlx::migrate!` of its `migrations/` folder (one
/// per database: the same table in each one's SQL).
static APP_MIGRATOR: sqlx::migrate::Migrator = sqlx::migrate!("./fixtures/app_migrations");
static APP_MIGRATOR_POSTGRES: sqlx::migrate::Migrator =
    sqlx::migrate!("./fixtures/app_migrations_postgres");

/// A test that returns the queue's `Result` takes the test server's errors with `?` too, and
/// has the application's tables beside the queue's.
async fn a_test_database_runs_the_applications_migrations(
    backend: Backend,
) -> jobqueue::Result<()> {
    let db = TestDatabase::new_on(backend, "testing_app_migrations").await?;
    let migrator = match backend {
        Backend::Postgres => &APP_MIGRATOR_POSTGRES,
        _ => &APP_MIGRATOR,
    };
    db.migrate_with(migrator).await?;
    // Again: nothing is pending, nothing is run twice.
    db.migrate_with(migrator).await?;
    let queue = db.queue();
    // The application's statements, whose errors convert with `?` as well.
    let insert = "INSERT INTO orders (id, total) VALUES (1, 1250)";
    let select = "SELECT total FROM orders WHERE id = 1";
    let versions = "SELECT version FROM _sqlx_migrations";
    let (total, versions): (i64, Vec<i64>) = match backend {
        Backend::Postgres => {
            let pool = queue.postgres_pool().unwrap();
            sqlx::query(insert).execute(pool).await?;
            (
                sqlx::query_scalar(select).fetch_one(pool).await?,
                sqlx::query_scalar(versions).fetch_all(pool).await?,
            )
        }
        _ => {
            let pool = queue.mysql_pool().unwrap();
            sqlx::query(insert).execute(pool).await?;
            (
                sqlx::query_scalar(select).fetch_one(pool).await?,
                sqlx::query_scalar(versions).fetch_all(pool).await?,
            )
        }
    };
    assert_eq!(total, 1250);
    queue.check_schema().await?;
    assert_eq!(versions, [20260101000000]);

    // A test server's error becomes the queue's `Error::Testing`, with its message.
    let unreachable = jobqueue::testing::Error::Server("the server has gone".into());
    let converted: Error = unreachable.into();
    assert!(matches!(converted, Error::Testing(_)), "{converted:?}");
    assert!(
        converted.to_string().contains("the server has gone"),
        "{converted}"
    );
    Ok(())
}

on_every_backend!(
    a_test_database_is_migrated_and_empty_and_dropped_with_its_guard,
    only_test_databases_are_dropped,
    enqueued_jobs_are_read_back_as_their_structs,
    a_failed_assertion_lists_what_was_enqueued_instead,
    drain_runs_due_jobs_and_the_jobs_they_enqueue,
    drain_with_scheduled_runs_retries_to_the_end,
    a_drain_names_the_jobs_a_rate_limit_left_blocked_and_with_scheduled_runs_them,
    a_drain_that_never_ends_stops_at_its_bound,
    a_drain_stops_at_a_job_it_cannot_run_and_keeps_it,
    drain_with_scheduled_brings_forward_every_scheduled_job,
    drain_counts_snoozes_apart_and_keeps_outputs,
);

/// The tests whose subject needs a single-threaded runtime (a guard dropped from one), or
/// that run as an application's plain `#[tokio::test]` returning the queue's `Result`, on
/// every backend.
mod single_threaded {
    mod mysql {
        #[tokio::test(flavor = "current_thread")]
        async fn a_test_database_is_dropped_from_a_single_threaded_runtime() {
            super::super::a_test_database_is_dropped_from_a_single_threaded_runtime(
                tests::Backend::MySql,
            )
            .await
        }

        #[tokio::test(flavor = "current_thread")]
        async fn a_test_database_runs_the_applications_migrations() -> jobqueue::Result<()> {
            super::super::a_test_database_runs_the_applications_migrations(tests::Backend::MySql)
                .await
        }
    }

    mod postgres {
        #[tokio::test(flavor = "current_thread")]
        async fn a_test_database_is_dropped_from_a_single_threaded_runtime() {
            super::super::a_test_database_is_dropped_from_a_single_threaded_runtime(
                tests::Backend::Postgres,
            )
            .await
        }

        #[tokio::test(flavor = "current_thread")]
        async fn a_test_database_runs_the_applications_migrations() -> jobqueue::Result<()> {
            super::super::a_test_database_runs_the_applications_migrations(tests::Backend::Postgres)
                .await
        }
    }
}
