//! The enqueue side of a job's life against a real server: how long a task key blocks
//! another enqueue (`Uniqueness`), under races of many enqueuers on several pools; a key
//! held by a job of another kind, an error rather than a duplicate; the metadata a job
//! carries and the filters over it; the progress a running job reports.

use std::sync::Arc;
use std::time::Duration;

use jobqueue::admin::JobFilter;
use jobqueue::testing::{enqueued, refute_enqueued};
use jobqueue::{
    job, Backend, DbErrorKind, EnqueueOptions, Enqueued, Error, Job, JobContext, JobError,
    JobOptions, JobStatus, Queue, Uniqueness,
};
use serde::{Deserialize, Serialize};
use tests::{
    fresh_database, fresh_queue_on, migrated_queue, on_every_backend, quick_worker, receive, row,
    sql_exec, sql_i64, start, stop, wait_for, wait_status, Arg, Mailbox,
};
use tokio::sync::oneshot;

/// A job of the default policy: its key blocks while its row exists.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct Plain {
    n: u32,
}

impl Job for Plain {
    const KIND: &'static str = "lifecycle_plain";
    const OPTIONS: JobOptions = JobOptions::DEFAULT;

    async fn run(self, _ctx: JobContext) -> Result<(), JobError> {
        Ok(())
    }
}

/// A job whose key blocks only while it waits or runs (the kind's policy).
#[derive(Debug, Clone, Serialize, Deserialize)]
struct Sync {
    account: u32,
}

impl Job for Sync {
    const KIND: &'static str = "lifecycle_sync";
    const OPTIONS: JobOptions = JobOptions::DEFAULT.unique(Uniqueness::WhileActive);

    fn task_key(&self) -> jobqueue::Result<String> {
        Ok(format!("sync:{}", self.account))
    }

    async fn run(self, _ctx: JobContext) -> Result<(), JobError> {
        Ok(())
    }
}

fn keyed(key: &str) -> EnqueueOptions {
    EnqueueOptions::default().key(key)
}

/// The database's clock in SQL: `UTC_TIMESTAMP(6)` on MySQL/MariaDB, the schema's
/// `job_queue_now()` on PostgreSQL.
fn now_sql(queue: &Queue) -> &'static str {
    match queue.backend() {
        Backend::Postgres => "job_queue_now()",
        _ => "UTC_TIMESTAMP(6)",
    }
}

/// Whether the condition `cond` (SQL over the columns of job `id`) holds, on either
/// database.
async fn holds(queue: &Queue, cond: &str, id: u64) -> bool {
    let sql = format!("SELECT COUNT(*) FROM job_queue WHERE id = ? AND {cond}");
    sql_i64(queue, &sql, &[Arg::Int(id as i64)]).await == 1
}

/// Jobs that hold `key` now, and jobs of `key` that are scheduled, ready or running.
async fn live(queue: &Queue, key: &str) -> (i64, i64) {
    (
        sql_i64(
            queue,
            "SELECT COUNT(*) FROM job_queue WHERE task_key = ?",
            &[Arg::Text(key)],
        )
        .await,
        sql_i64(
            queue,
            "SELECT COUNT(*) FROM job_queue WHERE COALESCE(released_key, task_key) = ? \
             AND status IN ('scheduled', 'ready', 'running')",
            &[Arg::Text(key)],
        )
        .await,
    )
}

// ---------------------------------------------------------------------------------------
// 1. Uniqueness, one enqueuer
// ---------------------------------------------------------------------------------------

async fn by_default_a_finished_job_still_blocks_its_key(backend: Backend) {
    let queue = fresh_queue_on(backend, "life_default").await;
    let first = queue
        .enqueue_with(Plain { n: 1 }, keyed("k"))
        .await
        .unwrap();
    queue.cancel(first.id()).await.unwrap();
    let again = queue
        .enqueue_with(Plain { n: 2 }, keyed("k"))
        .await
        .unwrap();
    assert_eq!(again.duplicate_of(), Some(first.id()));
    let record = row(&queue, first.id()).await;
    assert_eq!(record.unique, Uniqueness::UntilPruned);
    assert!(!record.key_released);
}

/// A duplicate says what its holder is doing; one of a finished job runs nothing, and is
/// logged at WARN with the key and how to run the key again.
// One thread: the log capture is the thread's default subscriber.
#[tokio::test(flavor = "current_thread")]
async fn a_duplicate_of_a_finished_job_carries_its_status_and_warns() {
    let (logs, _guard) = tests::LogCapture::install("jobqueue_runtime=info");
    let queue = migrated_queue(&fresh_database("life_dup_status").await).await;
    let first = queue
        .enqueue_with(Plain { n: 1 }, keyed("nightly-report"))
        .await
        .unwrap();
    let waiting = queue
        .enqueue_with(Plain { n: 2 }, keyed("nightly-report"))
        .await
        .unwrap();
    assert_eq!(waiting.duplicate_of(), Some(first.id()));
    assert_eq!(waiting.holder_status(), Some(JobStatus::Ready));
    assert!(
        logs.lines_with(&["WARN", "nightly-report"]).is_empty(),
        "a duplicate of a waiting job is expected, not a warning: {}",
        logs.text()
    );

    queue.cancel(first.id()).await.unwrap();
    let finished = queue
        .enqueue_with(Plain { n: 3 }, keyed("nightly-report"))
        .await
        .unwrap();
    assert!(
        matches!(
            finished,
            Enqueued::Duplicate { id, status: Some(JobStatus::Cancelled), .. } if id == first.id()
        ),
        "{finished:?}"
    );
    let warned = logs.lines_with(&[
        "WARN",
        "task key \"nightly-report\" is cancelled and still holds the key",
        "unique = \"while_active\"",
        "put the period in the key",
    ]);
    assert_eq!(warned.len(), 1, "{}", logs.text());

    // In a batch too, read with the keys the batch looks up.
    let derived = queue.enqueue(Plain { n: 4 }).await.unwrap();
    queue.cancel(derived.id()).await.unwrap();
    let batch = queue
        .enqueue_many([Plain { n: 5 }, Plain { n: 4 }])
        .await
        .unwrap();
    assert!(batch[0].is_new(), "{batch:?}");
    assert_eq!(batch[1].duplicate_of(), Some(derived.id()));
    assert_eq!(batch[1].holder_status(), Some(JobStatus::Cancelled));
}

async fn while_active_frees_the_key_when_the_job_ends_and_keeps_the_old_row(backend: Backend) {
    let queue = fresh_queue_on(backend, "life_active").await;
    let opts = || keyed("report:7").unique(Uniqueness::WhileActive);
    let first = queue.enqueue_with(Plain { n: 1 }, opts()).await.unwrap();
    assert!(first.is_new());
    // Waiting: a duplicate, whatever the new enqueue asks for.
    let dup = queue.enqueue_with(Plain { n: 2 }, opts()).await.unwrap();
    assert_eq!(dup.duplicate_of(), Some(first.id()));
    let dup = queue
        .enqueue_with(Plain { n: 2 }, keyed("report:7"))
        .await
        .unwrap();
    assert_eq!(dup.duplicate_of(), Some(first.id()));

    queue.cancel(first.id()).await.unwrap();
    let second = queue.enqueue_with(Plain { n: 3 }, opts()).await.unwrap();
    assert!(second.is_new(), "{second:?}");
    assert_ne!(second.id(), first.id());

    let old = row(&queue, first.id()).await;
    assert_eq!(old.status, JobStatus::Cancelled);
    assert_eq!(old.task_key, "report:7", "the old job still shows its key");
    assert!(old.key_released);
    assert_eq!(old.unique, Uniqueness::WhileActive);
    let new = row(&queue, second.id()).await;
    assert_eq!(new.status, JobStatus::Ready);
    assert!(!new.key_released);

    // The key finds the newest job; every job of the key is reachable, newest first.
    let by_key = queue.job_by_key("report:7").await.unwrap().unwrap();
    assert_eq!(by_key.id, second.id());
    let history: Vec<u64> = queue
        .jobs_by_key("report:7", 10)
        .await
        .unwrap()
        .iter()
        .map(|j| j.id)
        .collect();
    assert_eq!(history, vec![second.id(), first.id()]);
    assert_eq!(live(&queue, "report:7").await, (1, 1));
}

async fn the_kinds_policy_applies_and_an_enqueue_can_override_it(backend: Backend) {
    let queue = fresh_queue_on(backend, "life_kind").await;
    let first = queue.enqueue(Sync { account: 1 }).await.unwrap();
    assert_eq!(
        row(&queue, first.id()).await.unique,
        Uniqueness::WhileActive
    );
    queue.cancel(first.id()).await.unwrap();
    let second = queue.enqueue(Sync { account: 1 }).await.unwrap();
    assert!(second.is_new());

    // Overridden to the default: this one blocks after it ends.
    let held = queue
        .enqueue_with(
            Sync { account: 2 },
            EnqueueOptions::default().unique(Uniqueness::UntilPruned),
        )
        .await
        .unwrap();
    queue.cancel(held.id()).await.unwrap();
    assert_eq!(
        queue
            .enqueue(Sync { account: 2 })
            .await
            .unwrap()
            .duplicate_of(),
        Some(held.id())
    );
}

async fn unique_for_a_period_frees_the_key_once_it_has_passed_even_if_the_job_waits(
    backend: Backend,
) {
    let queue = fresh_queue_on(backend, "life_period").await;
    let opts = || keyed("digest:42").unique(Uniqueness::For(Duration::from_secs(2)));
    let first = queue.enqueue_with(Plain { n: 1 }, opts()).await.unwrap();
    let record = row(&queue, first.id()).await;
    assert_eq!(record.unique, Uniqueness::For(Duration::from_secs(2)));
    // Within the period: a duplicate. Judged after the fact, by the server's clock: an
    // enqueue that a stalled test sent after the period is rightly new, and then its row
    // was made no earlier than the period's end.
    let dup = queue.enqueue_with(Plain { n: 2 }, opts()).await.unwrap();
    // The job whose period holds the key now.
    let holder = if let Enqueued::New(id) = dup {
        let (made, until) = (
            row(&queue, id).await.created_at,
            row(&queue, first.id()).await.created_at + chrono_period(Duration::from_secs(2)),
        );
        let after = sql_i64(
            &queue,
            "SELECT COUNT(*) FROM job_queue n, job_queue f \
             WHERE n.id = ? AND f.id = ? AND n.created_at >= f.unique_until",
            &[Arg::Int(id as i64), Arg::Int(first.id() as i64)],
        )
        .await;
        assert!(
            after == 1,
            "a second job was made at {made}, within the period that ends at {until}"
        );
        id
    } else {
        assert_eq!(dup.duplicate_of(), Some(first.id()));
        first.id()
    };
    let passed = format!("unique_until <= {}", now_sql(&queue));
    wait_for("the period to pass", Duration::from_secs(10), || async {
        holds(&queue, &passed, holder).await.then_some(())
    })
    .await;
    let next = queue.enqueue_with(Plain { n: 3 }, opts()).await.unwrap();
    assert!(next.is_new(), "{next:?}");
    let old = row(&queue, holder).await;
    assert_eq!(old.status, JobStatus::Ready, "the old job still runs");
    assert!(old.key_released);
    assert_eq!(
        queue.job_by_key("digest:42").await.unwrap().unwrap().id,
        next.id()
    );
}

/// A worker of an older release finishes a `while_active` job without knowing the policy
/// (it only sets the status): the next enqueue still finds the key free.
async fn a_job_finished_by_an_older_worker_frees_its_key_at_the_next_enqueue(backend: Backend) {
    let queue = fresh_queue_on(backend, "life_upgrade").await;
    let first = queue.enqueue(Sync { account: 9 }).await.unwrap();
    // What an older worker writes when a job succeeds: nothing about keys.
    let now = now_sql(&queue);
    sql_exec(
        &queue,
        &format!(
            "UPDATE job_queue SET status = 'done', finished_at = {now}, updated_at = {now} \
             WHERE id = ?"
        ),
        &[Arg::Int(first.id() as i64)],
    )
    .await;
    let next = queue.enqueue(Sync { account: 9 }).await.unwrap();
    assert!(next.is_new(), "{next:?}");
    assert!(row(&queue, first.id()).await.key_released);
}

/// An operator's retry of a job that gave its key up puts it back without the key: two
/// jobs of one key may then run, which the retry asked for.
async fn a_key_freed_by_a_failed_job_blocks_again_if_the_job_is_retried_first(backend: Backend) {
    let queue = fresh_queue_on(backend, "life_retry").await;
    let first = queue.enqueue(Sync { account: 3 }).await.unwrap();
    queue.cancel(first.id()).await.unwrap();
    assert!(queue.retry(first.id()).await.unwrap());
    // Back to ready before anyone enqueued again: it still holds the key and blocks.
    assert_eq!(
        queue
            .enqueue(Sync { account: 3 })
            .await
            .unwrap()
            .duplicate_of(),
        Some(first.id())
    );
}

async fn a_uniqueness_period_under_a_millisecond_is_refused(backend: Backend) {
    let queue = fresh_queue_on(backend, "life_badperiod").await;
    let err = queue
        .enqueue_with(
            Plain { n: 1 },
            EnqueueOptions::default().unique(Uniqueness::For(Duration::ZERO)),
        )
        .await
        .unwrap_err();
    assert!(
        matches!(
            &err,
            Error::InvalidSetting {
                setting: "unique_for",
                ..
            }
        ),
        "{err:?}"
    );
    assert!(err.to_string().contains("at least 1 ms"), "{err}");
}

// ---------------------------------------------------------------------------------------
// 2. Uniqueness, racing enqueuers
// ---------------------------------------------------------------------------------------

/// Several pools on one database of `backend`, as several processes would have.
async fn pools(backend: Backend, prefix: &str, n: usize) -> Vec<Queue> {
    let url = jobqueue::testing::TestDatabase::new_on(backend, prefix)
        .await
        .expect("a test database")
        .keep();
    let mut queues = Vec::new();
    for _ in 0..n {
        queues.push(migrated_queue(&url).await);
    }
    queues
}

/// A transaction of the queue's own database.
enum BackendTx {
    MySql(sqlx::Transaction<'static, sqlx::MySql>),
    Postgres(sqlx::Transaction<'static, sqlx::Postgres>),
}

impl BackendTx {
    async fn begin(queue: &Queue) -> BackendTx {
        match queue.backend() {
            Backend::Postgres => {
                BackendTx::Postgres(queue.postgres_pool().unwrap().begin().await.expect("begin"))
            }
            _ => BackendTx::MySql(queue.mysql_pool().unwrap().begin().await.expect("begin")),
        }
    }

    async fn enqueue_many(
        &mut self,
        queue: &Queue,
        jobs: Vec<Sync>,
        options: EnqueueOptions,
    ) -> jobqueue::Result<Vec<Enqueued>> {
        match self {
            BackendTx::MySql(tx) => queue.enqueue_many_in(tx, jobs, options).await,
            BackendTx::Postgres(tx) => queue.enqueue_many_in(tx, jobs, options).await,
        }
    }

    async fn commit(self) -> sqlx::Result<()> {
        match self {
            BackendTx::MySql(tx) => tx.commit().await,
            BackendTx::Postgres(tx) => tx.commit().await,
        }
    }

    async fn rollback(self) -> sqlx::Result<()> {
        match self {
            BackendTx::MySql(tx) => tx.rollback().await,
            BackendTx::Postgres(tx) => tx.rollback().await,
        }
    }
}

/// 12 enqueuers over 3 pools enqueue `key` at once, single or in batches; returns their
/// outcomes.
async fn race(queues: &[Queue], key: &str, options: EnqueueOptions, bulk: bool) -> Vec<Enqueued> {
    const RACERS: usize = 12;
    let start = Arc::new(tokio::sync::Barrier::new(RACERS));
    let mut tasks = Vec::new();
    for n in 0..RACERS {
        let queue = queues[n % queues.len()].clone();
        let (start, key, options) = (start.clone(), key.to_owned(), options.clone());
        tasks.push(tokio::spawn(async move {
            start.wait().await;
            if bulk && n % 2 == 0 {
                // A batch of this key and of one key of its own, in the caller's
                // transaction, retried whole after a deadlock as its caller must.
                loop {
                    let mut tx = BackendTx::begin(&queue).await;
                    let jobs = vec![
                        Sync { account: 0 },
                        Sync {
                            account: 1000 + n as u32,
                        },
                    ];
                    match tx.enqueue_many(&queue, jobs, options.clone()).await {
                        Ok(out) => {
                            tx.commit().await.expect("commit");
                            break out[0];
                        }
                        Err(e)
                            if matches!(
                                e.database_class(),
                                Some(DbErrorKind::Deadlock | DbErrorKind::LockWaitTimeout)
                            ) =>
                        {
                            tx.rollback().await.expect("rollback");
                        }
                        Err(e) => panic!("enqueue_many_in: {e}"),
                    }
                }
            } else {
                queue
                    .enqueue_with(Sync { account: 0 }, options.key(key))
                    .await
                    .expect("enqueue")
            }
        }));
    }
    let mut out = Vec::new();
    for t in tasks {
        out.push(t.await.expect("racer"));
    }
    out
}

/// Runs `rounds` release cycles of one key: each round all racers enqueue at once, and one
/// job holds the key after it (with `one_live`, the only job of the key still waiting or
/// running); then `end` makes that job stop blocking.
///
/// With `one_live` (the key is freed only by `end`), each round has exactly one `New` and
/// the others are `Duplicate`s of it. Without (a period that may pass during the race on a
/// loaded machine), a round may have more than one `New`, but each later one was inserted
/// only after the period of the one before it had passed: one `New` per release of the key.
async fn release_cycles<F, Fut>(
    queues: &[Queue],
    options: EnqueueOptions,
    bulk: bool,
    one_live: bool,
    end: F,
) where
    F: Fn(Queue, u64) -> Fut,
    Fut: std::future::Future<Output = ()>,
{
    let key = "sync:0";
    let mut ids: Vec<u64> = Vec::new();
    for round in 0..4 {
        let outcomes = race(queues, key, options.clone(), bulk).await;
        let mut new: Vec<u64> = outcomes
            .iter()
            .filter(|o| o.is_new())
            .map(|o| o.id())
            .collect();
        new.sort_unstable();
        if one_live {
            assert_eq!(new.len(), 1, "round {round}: one new job: {outcomes:?}");
        } else {
            assert!(!new.is_empty(), "round {round}: a new job: {outcomes:?}");
            for pair in new.windows(2) {
                let after = sql_i64(
                    &queues[0],
                    "SELECT COUNT(*) FROM job_queue a, job_queue b \
                     WHERE a.id = ? AND b.id = ? AND b.created_at >= a.unique_until",
                    &[Arg::Int(pair[0] as i64), Arg::Int(pair[1] as i64)],
                )
                .await
                    == 1;
                assert!(
                    after,
                    "round {round}: job {} was enqueued within the period of job {}: {outcomes:?}",
                    pair[1], pair[0]
                );
            }
        }
        assert!(
            outcomes.iter().all(|o| new.contains(&o.id())),
            "round {round}: every duplicate names a new job of the round {new:?}: {outcomes:?}"
        );
        let (holders, waiting) = live(&queues[0], key).await;
        assert_eq!(holders, 1, "round {round}: one job holds the key");
        if one_live {
            assert_eq!(waiting, 1, "round {round}: the holder is the only live job");
        }
        ids.extend(&new);
        end(queues[0].clone(), *new.last().unwrap()).await;
    }
    let mut history: Vec<u64> = queues[0]
        .jobs_by_key(key, 100)
        .await
        .unwrap()
        .iter()
        .map(|j| j.id)
        .collect();
    history.reverse();
    assert_eq!(
        history, ids,
        "every new job, and no other, is a job of the key"
    );
}

async fn racing_enqueuers_after_the_job_ends_give_one_new_job_per_cycle(backend: Backend) {
    let queues = pools(backend, "life_race_active", 3).await;
    release_cycles(
        &queues,
        EnqueueOptions::default(),
        false,
        true,
        |q, id| async move {
            q.cancel(id).await.unwrap();
        },
    )
    .await;
}

async fn racing_single_and_bulk_enqueuers_give_one_new_job_per_cycle(backend: Backend) {
    let queues = pools(backend, "life_race_bulk", 3).await;
    release_cycles(
        &queues,
        EnqueueOptions::default(),
        true,
        true,
        |q, id| async move {
            q.cancel(id).await.unwrap();
        },
    )
    .await;
}

async fn racing_enqueuers_after_the_period_give_one_new_job_per_cycle(backend: Backend) {
    let queues = pools(backend, "life_race_period", 3).await;
    let options = EnqueueOptions::default().unique(Uniqueness::For(Duration::from_millis(500)));
    release_cycles(&queues, options, true, false, |q, id| async move {
        let passed = format!("unique_until <= {}", now_sql(&q));
        wait_for("the period to pass", Duration::from_secs(10), || async {
            holds(&q, &passed, id).await.then_some(())
        })
        .await;
    })
    .await;
}

async fn racing_enqueuers_of_the_default_policy_give_one_job_ever(backend: Backend) {
    let queues = pools(backend, "life_race_default", 3).await;
    let options = EnqueueOptions::default().unique(Uniqueness::UntilPruned);
    let mut first = None;
    for round in 0..3 {
        let outcomes = race(&queues, "sync:0", options.clone(), true).await;
        let news = outcomes.iter().filter(|o| o.is_new()).count();
        assert_eq!(news, usize::from(round == 0), "round {round}: {outcomes:?}");
        let id = *first.get_or_insert(outcomes[0].id());
        assert!(outcomes.iter().all(|o| o.id() == id), "{outcomes:?}");
        queues[0].cancel(id).await.unwrap();
    }
}

// ---------------------------------------------------------------------------------------
// 3. Bulk enqueue
// ---------------------------------------------------------------------------------------

async fn a_bulk_enqueue_frees_keys_whose_jobs_ended_and_keeps_the_others(backend: Backend) {
    let queue = fresh_queue_on(backend, "life_bulk").await;
    let ended = queue.enqueue(Sync { account: 1 }).await.unwrap();
    queue.cancel(ended.id()).await.unwrap();
    let waiting = queue.enqueue(Sync { account: 2 }).await.unwrap();
    let out = queue
        .enqueue_many(vec![
            Sync { account: 1 },
            Sync { account: 2 },
            Sync { account: 3 },
            Sync { account: 1 },
        ])
        .await
        .unwrap();
    assert!(out[0].is_new(), "{out:?}");
    assert_eq!(out[1].duplicate_of(), Some(waiting.id()));
    assert!(out[2].is_new());
    assert_eq!(out[3].duplicate_of(), Some(out[0].id()));
    assert!(row(&queue, ended.id()).await.key_released);
    assert_eq!(live(&queue, "sync:1").await, (1, 1));
}

// ---------------------------------------------------------------------------------------
// 4. Metadata
// ---------------------------------------------------------------------------------------

async fn metadata_is_stored_returned_and_filtered_on(backend: Backend) {
    let queue = fresh_queue_on(backend, "life_meta").await;
    let acme = queue
        .enqueue_with(
            Plain { n: 1 },
            EnqueueOptions::default()
                .meta("tenant", "acme")
                .meta("batch", 42),
        )
        .await
        .unwrap();
    let globex = queue
        .enqueue_with(
            Plain { n: 2 },
            EnqueueOptions::default()
                .metadata(serde_json::json!({"tenant": "globex", "urgent": true})),
        )
        .await
        .unwrap();
    let none = queue.enqueue(Plain { n: 3 }).await.unwrap();

    assert_eq!(
        row(&queue, acme.id()).await.metadata,
        Some(serde_json::json!({"tenant": "acme", "batch": 42}))
    );
    assert_eq!(row(&queue, none.id()).await.metadata, None);

    let ids = |f: JobFilter| {
        let queue = queue.clone();
        async move {
            queue
                .list(&f, None, 100)
                .await
                .unwrap()
                .jobs
                .iter()
                .map(|j| j.id)
                .collect::<Vec<_>>()
        }
    };
    assert_eq!(
        ids(JobFilter::default().meta("tenant", "acme")).await,
        vec![acme.id()]
    );
    assert_eq!(
        ids(JobFilter::default().meta("batch", "42")).await,
        vec![acme.id()]
    );
    assert_eq!(
        ids(JobFilter::default().meta("urgent", "true")).await,
        vec![globex.id()]
    );
    assert_eq!(
        ids(JobFilter::default().meta("tenant", "nobody")).await,
        Vec::<u64>::new()
    );
    assert_eq!(
        ids(JobFilter::default()
            .meta("tenant", "globex")
            .status(JobStatus::Ready))
        .await,
        vec![globex.id()]
    );
    assert_eq!(
        queue
            .count(&JobFilter::default().meta("tenant", "acme"))
            .await
            .unwrap(),
        1
    );
    // A key that no metadata may hold matches nothing (and is not spliced into the path).
    assert!(ids(JobFilter::default().meta("x\" OR 1=1", "a"))
        .await
        .is_empty());
}

async fn bad_metadata_is_refused_with_the_fix(backend: Backend) {
    let queue = fresh_queue_on(backend, "life_badmeta").await;
    let refused = |opts: EnqueueOptions| {
        let queue = queue.clone();
        async move {
            let err = queue.enqueue_with(Plain { n: 1 }, opts).await.unwrap_err();
            assert!(
                matches!(
                    &err,
                    Error::InvalidSetting {
                        setting: "metadata",
                        ..
                    }
                ),
                "{err:?}"
            );
            err.to_string()
        }
    };
    let msg = refused(EnqueueOptions::default().metadata(serde_json::json!([1, 2]))).await;
    assert!(msg.contains("must be a JSON object"), "{msg}");
    let msg = refused(EnqueueOptions::default().meta("a b", 1)).await;
    assert!(msg.contains("\"a b\" is not allowed"), "{msg}");
    let msg = refused(EnqueueOptions::default().meta("blob", "x".repeat(5000))).await;
    assert!(msg.contains("more than the limit of 4096"), "{msg}");
    assert_eq!(
        sql_i64(&queue, "SELECT COUNT(*) FROM job_queue", &[]).await,
        0
    );
}

// ---------------------------------------------------------------------------------------
// 5. Progress
// ---------------------------------------------------------------------------------------

/// Steps the reporting job has reached, each with the signal that lets it go on: one
/// mailbox per backend (the job's `n`, see [`run_of`]), whose runs of a test run at once.
static REPORTER_AT: [Mailbox<(u32, oneshot::Sender<()>)>; 2] = [Mailbox::new(), Mailbox::new()];

/// The `n` of a test's job on `backend`, which picks its mailbox.
fn run_of(backend: Backend) -> u32 {
    match backend {
        Backend::Postgres => 1,
        _ => 0,
    }
}

/// Tells the test it reached `step`, and waits for the test to let it go on.
async fn reached(n: u32, step: u32) {
    let (go, wait) = oneshot::channel();
    REPORTER_AT[n as usize].send((step, go));
    wait.await.expect("the test lets the job go on");
}

/// Reports 1, then 2 to 100 in a burst, then returns.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct Reporter {
    n: u32,
}

impl Job for Reporter {
    const KIND: &'static str = "lifecycle_reporter";
    const OPTIONS: JobOptions = JobOptions::DEFAULT.queue("progress").max_attempts(1);

    async fn run(self, ctx: JobContext) -> Result<(), JobError> {
        ctx.set_progress(&serde_json::json!({"done": 1, "of": 100}))?;
        reached(self.n, 1).await;
        for done in 2..=100 {
            ctx.set_progress(&serde_json::json!({"done": done, "of": 100}))?;
            // Room for a writer that would write more often than its interval.
            tokio::task::yield_now().await;
        }
        assert_eq!(
            ctx.progress(),
            Some(serde_json::json!({"done": 100, "of": 100}))
        );
        reached(self.n, 2).await;
        Ok(())
    }
}

jobqueue::register!(Reporter);

async fn progress_of(queue: &Queue, id: u64) -> Option<serde_json::Value> {
    row(queue, id).await.progress
}

async fn progress_is_written_at_once_then_throttled_and_the_last_value_is_kept(backend: Backend) {
    let queue = fresh_queue_on(backend, "life_progress").await;
    let n = run_of(backend);
    let mut at = REPORTER_AT[n as usize].open();
    let id = queue.enqueue(Reporter { n }).await.unwrap().id();
    // An interval no test run reaches: only the first and the last value can be written.
    let worker = quick_worker(&queue)
        .queues(["progress"])
        .progress_interval(Duration::from_secs(600))
        .build()
        .unwrap();
    let (handle, task) = start(worker);

    let (step, go) = receive(&mut at, "the first report", Duration::from_secs(30)).await;
    assert_eq!(step, 1);
    let first = serde_json::json!({"done": 1, "of": 100});
    wait_for(
        "the first value in the row",
        Duration::from_secs(30),
        // The row first, then the count: the writer counts a write once the server answered.
        || async {
            (progress_of(&queue, id).await == Some(first.clone())
                && handle.metrics().progress_writes == 1)
                .then_some(())
        },
    )
    .await;
    let record = row(&queue, id).await;
    assert_eq!(record.status, JobStatus::Running);
    assert!(record.progress_at.is_some());
    go.send(()).unwrap();

    // 99 more values: none is written before the interval, or the attempt's end.
    let (step, go) = receive(&mut at, "the burst", Duration::from_secs(30)).await;
    assert_eq!(step, 2);
    assert_eq!(progress_of(&queue, id).await, Some(first));
    assert_eq!(
        handle.metrics().progress_writes,
        1,
        "only the first value so far"
    );
    go.send(()).unwrap();

    let done = wait_status(&queue, id, JobStatus::Done, Duration::from_secs(30)).await;
    assert_eq!(
        done.progress,
        Some(serde_json::json!({"done": 100, "of": 100})),
        "the last value is written when the attempt ends"
    );
    assert_eq!(
        handle.metrics().progress_writes,
        2,
        "the first and the last"
    );
    stop(&handle, task).await;
}

/// Reports once, waits, then reports again after its claim was taken over.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct LateReporter {
    n: u32,
}

static LATE_AT: [Mailbox<(u32, oneshot::Sender<()>)>; 2] = [Mailbox::new(), Mailbox::new()];

impl Job for LateReporter {
    const KIND: &'static str = "lifecycle_late_reporter";
    const OPTIONS: JobOptions = JobOptions::DEFAULT.queue("late_progress");

    async fn run(self, ctx: JobContext) -> Result<(), JobError> {
        ctx.set_progress(&"first")?;
        let (go, wait) = oneshot::channel();
        LATE_AT[self.n as usize].send((1, go));
        wait.await.expect("the test lets the job go on");
        ctx.set_progress(&"after the takeover")?;
        Ok(())
    }
}

jobqueue::register!(LateReporter);

async fn an_attempt_that_lost_its_claim_writes_no_progress(backend: Backend) {
    let queue = fresh_queue_on(backend, "life_progress_fence").await;
    let n = run_of(backend);
    let mut at = LATE_AT[n as usize].open();
    let id = queue.enqueue(LateReporter { n }).await.unwrap().id();
    let worker = quick_worker(&queue)
        .queues(["late_progress"])
        .build()
        .unwrap();
    let (handle, task) = start(worker);
    let (_, go) = receive(&mut at, "the first report", Duration::from_secs(30)).await;
    wait_for(
        "the first value in the row",
        Duration::from_secs(30),
        || async {
            (progress_of(&queue, id).await == Some(serde_json::json!("first"))).then_some(())
        },
    )
    .await;
    // What a reclaim and another worker's claim leave: another owner, a later attempt.
    sql_exec(
        &queue,
        "UPDATE job_queue SET lease_owner = 'another-worker', attempts = attempts + 1 WHERE id = ?",
        &[Arg::Int(id as i64)],
    )
    .await;
    go.send(()).unwrap();
    // Stopping waits for the job's task, its last progress write and outcome included.
    stop(&handle, task).await;
    let record = row(&queue, id).await;
    assert_eq!(record.progress, Some(serde_json::json!("first")));
    assert_eq!(record.status, JobStatus::Running);
    assert_eq!(record.lease_owner.as_deref(), Some("another-worker"));
}

#[tokio::test]
async fn a_detached_context_keeps_progress_in_memory_and_refuses_oversized_values() {
    let ctx = JobContext::detached(1, "k");
    assert_eq!(ctx.progress(), None);
    ctx.set_progress(&42).unwrap();
    assert_eq!(ctx.progress(), Some(serde_json::json!(42)));
    let err = ctx.set_progress(&"x".repeat(5000)).unwrap_err();
    assert!(
        matches!(
            &err,
            Error::InvalidSetting {
                setting: "progress",
                ..
            }
        ),
        "{err:?}"
    );
    assert!(
        err.to_string().contains("more than the limit of 4096"),
        "{err}"
    );
    assert_eq!(
        ctx.progress(),
        Some(serde_json::json!(42)),
        "the previous value stays"
    );
    // U+0000, which PostgreSQL's JSONB cannot store, is refused on every database alike;
    // the text `\u0000` (an escaped backslash) is not that character.
    let err = ctx
        .set_progress(&serde_json::json!({"step": "a\u{0}b"}))
        .unwrap_err();
    assert!(err.to_string().contains("U+0000"), "{err}");
    ctx.set_progress(&"\\u0000").unwrap();
    assert_eq!(ctx.progress(), Some(serde_json::json!("\\u0000")));
}

// ---------------------------------------------------------------------------------------
// 6. The macro's options
// ---------------------------------------------------------------------------------------

#[jobqueue::job(key = "digest:{user}", unique_for = "90s")]
async fn send_digest(user: u64) {
    let _ = user;
}

#[jobqueue::job(key = "account:{account}", unique = "while_active")]
async fn sync_account(account: u64) {
    let _ = account;
}

#[test]
fn the_macro_sets_the_kinds_uniqueness() {
    assert_eq!(
        SendDigest::OPTIONS.unique,
        Uniqueness::For(Duration::from_secs(90))
    );
    assert_eq!(SyncAccount::OPTIONS.unique, Uniqueness::WhileActive);
    assert_eq!(Plain::OPTIONS.unique, Uniqueness::UntilPruned);
}

/// MySQL/MariaDB only (PostgreSQL answers a holder changed after a REPEATABLE READ snapshot
/// with a serialization failure). Inside a REPEATABLE READ transaction, a `while_active`
/// holder that finished after the transaction's snapshot began still looks unfinished: the enqueue reports it as the
/// duplicate, a finished job, and enqueues nothing (as the docs say). At READ COMMITTED the
/// same enqueue makes a new job.
#[tokio::test(flavor = "multi_thread")]
async fn while_active_inside_a_repeatable_read_snapshot_sees_the_holder_as_it_was() {
    let url = fresh_database("life_active_rr").await;
    let queue = migrated_queue(&url).await;
    let opts = || keyed("report:rr").unique(Uniqueness::WhileActive);
    let first = queue.enqueue_with(Plain { n: 1 }, opts()).await.unwrap();
    for (level, expect_new) in [("REPEATABLE READ", false), ("READ COMMITTED", true)] {
        // The application's own connection, set as it likes.
        let mut conn = <sqlx::MySqlConnection as sqlx::Connection>::connect(&url)
            .await
            .unwrap();
        sqlx::query(&format!("SET SESSION TRANSACTION ISOLATION LEVEL {level}"))
            .execute(&mut conn)
            .await
            .unwrap();
        let mut tx = sqlx::Connection::begin(&mut conn).await.unwrap();
        // The snapshot begins with the transaction's first read.
        let holder: u64 = sqlx::query_scalar("SELECT id FROM job_queue WHERE task_key = ?")
            .bind("report:rr")
            .fetch_one(&mut *tx)
            .await
            .unwrap();
        // The holder ends, committed by someone else.
        queue.cancel(holder).await.unwrap();
        let again = queue
            .enqueue_in_with(&mut tx, Plain { n: 2 }, opts())
            .await
            .unwrap();
        tx.commit().await.unwrap();
        if expect_new {
            assert!(again.is_new(), "{level}: {again:?}");
        } else {
            assert_eq!(again.duplicate_of(), Some(first.id()), "{level}");
            assert_eq!(row(&queue, first.id()).await.status, JobStatus::Cancelled);
        }
        // Put a live holder back for the next round.
        if !expect_new {
            queue.retry(first.id()).await.unwrap();
        }
    }
}

// ---------------------------------------------------------------------------------------
// 7. Two kinds with the same key template
// ---------------------------------------------------------------------------------------

#[job(name = "hc_invoice", queue = "hc_keys", key = "order:{order_id}")]
async fn invoice(order_id: u64) {
    let _ = order_id;
}

#[job(name = "hc_receipt", queue = "hc_keys", key = "order:{order_id}")]
async fn receipt(order_id: u64) {
    let _ = order_id;
}

async fn a_key_held_by_another_kind_is_an_error_not_a_duplicate(backend: Backend) {
    let queue = fresh_queue_on(backend, "hc_keys").await;
    let first = queue.enqueue(Invoice { order_id: 7 }).await.unwrap();
    assert!(first.is_new());

    // The receipt of order 7 renders the same key as its invoice.
    let err = queue
        .enqueue(Receipt { order_id: 7 })
        .await
        .expect_err("a receipt must not pass for a duplicate of the invoice");
    assert!(
        matches!(&err, Error::KeyTaken { holder, kind, id, .. }
            if holder == "hc_invoice" && kind == "hc_receipt" && *id == first.id()),
        "{err:?}"
    );
    let msg = err.to_string();
    assert!(
        msg.contains("\"order:7\"") && msg.contains("hc_invoice") && msg.contains("hc_receipt:"),
        "{msg}"
    );
    let err = queue
        .enqueue_many([Receipt { order_id: 7 }, Receipt { order_id: 8 }])
        .await
        .expect_err("the batch holds the same receipt");
    assert!(matches!(err, Error::KeyTaken { .. }), "{err:?}");

    // A second invoice of the order is still a duplicate of the first, as before.
    assert_eq!(
        queue
            .enqueue(Invoice { order_id: 7 })
            .await
            .unwrap()
            .duplicate_of(),
        Some(first.id())
    );
    // Nothing else was enqueued: not the receipt, nor the batch.
    refute_enqueued::<Receipt>(&queue).await;
    let invoices = enqueued::<Invoice>(&queue).await;
    let keys: Vec<&str> = invoices
        .iter()
        .map(|j| j.record.task_key.as_str())
        .collect();
    assert_eq!(keys, ["order:7"]);
}

on_every_backend!(
    by_default_a_finished_job_still_blocks_its_key,
    while_active_frees_the_key_when_the_job_ends_and_keeps_the_old_row,
    the_kinds_policy_applies_and_an_enqueue_can_override_it,
    unique_for_a_period_frees_the_key_once_it_has_passed_even_if_the_job_waits,
    a_job_finished_by_an_older_worker_frees_its_key_at_the_next_enqueue,
    a_key_freed_by_a_failed_job_blocks_again_if_the_job_is_retried_first,
    a_uniqueness_period_under_a_millisecond_is_refused,
    a_bulk_enqueue_frees_keys_whose_jobs_ended_and_keeps_the_others,
    metadata_is_stored_returned_and_filtered_on,
    bad_metadata_is_refused_with_the_fix,
    progress_is_written_at_once_then_throttled_and_the_last_value_is_kept,
    an_attempt_that_lost_its_claim_writes_no_progress,
    racing_enqueuers_after_the_job_ends_give_one_new_job_per_cycle,
    racing_single_and_bulk_enqueuers_give_one_new_job_per_cycle,
    racing_enqueuers_after_the_period_give_one_new_job_per_cycle,
    racing_enqueuers_of_the_default_policy_give_one_job_ever,
    a_key_held_by_another_kind_is_an_error_not_a_duplicate,
);

/// The end of a uniqueness period that began at `created_at`, for a message.
fn chrono_period(d: Duration) -> chrono::TimeDelta {
    chrono::TimeDelta::from_std(d).expect("a short period")
}
