//! The queue core's protocol against a real server: claims under contention, SKIP LOCKED,
//! fencing, reclaim and promotion, idempotent enqueue, the errors bad input gets (a lease
//! longer than the table holds among them), a read-only server, and how delays, start
//! times and priorities are stored.
//!
//! Rows are driven through the store's protocol steps (the runtime's `__store` test door)
//! with arbitrary owner names; no worker runs here. The plans of the same statements
//! (EXPLAIN) are checked in `mysql_query_plans.rs`.

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;
use std::time::{Duration, Instant};

use jobqueue::admin::CancelOutcome;
use jobqueue::testing::TestServer;
use jobqueue::{
    job, EnqueueOptions, Enqueued, Error, Job, JobContext, JobError, JobOptions, JobStatus, Queue,
    QueueConfig,
};
use jobqueue_runtime::__store::{statements, Finish, Reclaimed};
use serde::{Deserialize, Serialize, Serializer};
use sqlx::mysql::{MySqlConnection, MySqlPoolOptions};
use sqlx::types::chrono::NaiveDateTime;
use sqlx::{Connection, Executor, MySqlPool};
use tests::{
    count, fresh_database, fresh_queue, fresh_queue_on, on_every_backend, row as job, sql_exec,
    sql_i64, text_col, Arg, Backend, LogCapture,
};

// ---------------------------------------------------------------------------------------
// Job kinds
// ---------------------------------------------------------------------------------------

/// The ordinary job of these tests; its derived key depends on `n` only.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct Task {
    n: u64,
}

impl Job for Task {
    const KIND: &'static str = "store_task";
    const OPTIONS: JobOptions = JobOptions::DEFAULT.max_attempts(3).priority(3);

    async fn run(self, _ctx: JobContext) -> Result<(), JobError> {
        Ok(())
    }
}

jobqueue::register!(Task);

/// Arguments with a map keyed by a tuple: JSON object keys must be strings.
#[derive(Debug, Serialize, Deserialize)]
struct TupleKeyed {
    weights: HashMap<(u32, u32), u32>,
}

impl Job for TupleKeyed {
    const KIND: &'static str = "store_tuple_keyed";
    const OPTIONS: JobOptions = JobOptions::DEFAULT;

    async fn run(self, _ctx: JobContext) -> Result<(), JobError> {
        Ok(())
    }
}

jobqueue::register!(TupleKeyed);

/// Arguments whose `Serialize` impl refuses.
#[derive(Debug, Deserialize)]
struct Unserializable {
    #[allow(dead_code)]
    path: String,
}

impl Serialize for Unserializable {
    fn serialize<S: Serializer>(&self, _serializer: S) -> Result<S::Ok, S::Error> {
        Err(serde::ser::Error::custom(
            "an open file handle cannot be serialized",
        ))
    }
}

impl Job for Unserializable {
    const KIND: &'static str = "store_unserializable";
    const OPTIONS: JobOptions = JobOptions::DEFAULT;

    async fn run(self, _ctx: JobContext) -> Result<(), JobError> {
        Ok(())
    }
}

jobqueue::register!(Unserializable);

/// Arguments of any size.
#[derive(Debug, Serialize, Deserialize)]
struct Blob {
    text: String,
}

impl Job for Blob {
    const KIND: &'static str = "store_blob";
    const OPTIONS: JobOptions = JobOptions::DEFAULT;

    async fn run(self, _ctx: JobContext) -> Result<(), JobError> {
        Ok(())
    }
}

jobqueue::register!(Blob);

// ---------------------------------------------------------------------------------------
// Helpers
// ---------------------------------------------------------------------------------------

fn keyed(key: &str) -> EnqueueOptions {
    EnqueueOptions::default().key(key)
}

/// Makes a running job's lease run out now (test setup: no waiting for a real lease).
async fn expire_lease(queue: &Queue, id: u64) {
    let sql = match queue.backend() {
        Backend::Postgres => {
            "UPDATE job_queue SET lease_until = job_queue_now() - INTERVAL '1 second' WHERE id = ?"
        }
        _ => "UPDATE job_queue SET lease_until = UTC_TIMESTAMP(6) - INTERVAL 1 SECOND WHERE id = ?",
    };
    let matched = sql_exec(queue, sql, &[Arg::Int(id as i64)]).await;
    assert_eq!(matched, 1, "job {id} to expire");
}

/// A connection of the queue's database outside its pool, as another session's.
enum OtherSession {
    MySql(MySqlConnection),
    Postgres(sqlx::PgConnection),
}

impl OtherSession {
    async fn open(queue: &Queue) -> OtherSession {
        match queue.backend() {
            Backend::Postgres => {
                let options = queue.postgres_pool().unwrap().connect_options();
                OtherSession::Postgres(
                    sqlx::PgConnection::connect_with(&options)
                        .await
                        .expect("another session"),
                )
            }
            _ => {
                let options = queue.mysql_pool().unwrap().connect_options();
                OtherSession::MySql(
                    MySqlConnection::connect_with(&options)
                        .await
                        .expect("another session"),
                )
            }
        }
    }

    /// Runs `sql` (MySQL's `?` marks) with integer arguments, in this session.
    async fn exec(&mut self, sql: &str, args: &[i64]) {
        match self {
            OtherSession::MySql(c) => {
                let mut q = sqlx::query(sql);
                for a in args {
                    q = q.bind(*a);
                }
                q.execute(&mut *c).await.expect(sql);
            }
            OtherSession::Postgres(c) => {
                let sql = tests::numbered(sql);
                let mut q = sqlx::query(&sql);
                for a in args {
                    q = q.bind(*a);
                }
                q.execute(&mut *c).await.expect(&sql);
            }
        }
    }
}

// ---------------------------------------------------------------------------------------
// 1. Same-row contention
// ---------------------------------------------------------------------------------------

/// Three claimers racing over ten ready jobs get disjoint sets that cover all ten, and each
/// row records the claimer that got it.
async fn concurrent_claimers_get_disjoint_jobs(backend: Backend) {
    let queue = fresh_queue_on(backend, "store_contention").await;
    let mut all = BTreeSet::new();
    for n in 0..10 {
        let outcome = queue.enqueue(Task { n }).await.expect("enqueue");
        assert!(outcome.is_new(), "{outcome:?}");
        all.insert(outcome.id());
    }

    let start = Arc::new(tokio::sync::Barrier::new(3));
    let mut claimers = Vec::new();
    for i in 0..3 {
        let store = queue.store();
        let queue = queue.clone();
        let start = start.clone();
        claimers.push(tokio::spawn(async move {
            let owner = format!("worker-{i}");
            let mut got = Vec::new();
            start.wait().await;
            loop {
                let claimed = store.claim("default", &owner, 4).await.expect("claim");
                assert!(claimed.len() <= 4, "{owner} claimed {}", claimed.len());
                if claimed.is_empty() {
                    // SKIP LOCKED: an empty claim may only mean that the rest is locked by
                    // the others right now. Stop when no ready row is left at all.
                    let ready = sql_i64(
                        &queue,
                        "SELECT COUNT(*) FROM job_queue WHERE status = 'ready'",
                        &[],
                    )
                    .await;
                    if ready == 0 {
                        break;
                    }
                    tokio::task::yield_now().await;
                    continue;
                }
                for c in claimed {
                    assert_eq!(c.attempt, 1, "job {} claimed twice", c.id);
                    got.push(c.id);
                }
            }
            (owner, got)
        }));
    }
    let mut results = Vec::new();
    for c in claimers {
        results.push(c.await.expect("claimer task"));
    }

    let total: usize = results.iter().map(|(_, got)| got.len()).sum();
    assert_eq!(total, 10, "each job claimed exactly once: {results:?}");
    let sets: Vec<BTreeSet<u64>> = results
        .iter()
        .map(|(_, got)| got.iter().copied().collect())
        .collect();
    for (i, a) in sets.iter().enumerate() {
        assert_eq!(a.len(), results[i].1.len(), "duplicates within one claimer");
        for b in &sets[i + 1..] {
            assert!(
                a.is_disjoint(b),
                "two claimers got the same job: {results:?}"
            );
        }
    }
    let union: BTreeSet<u64> = sets.iter().flatten().copied().collect();
    assert_eq!(union, all, "the claims cover every job");

    for (owner, got) in &results {
        for &id in got {
            let row = job(&queue, id).await;
            assert_eq!(row.status, JobStatus::Running, "job {id}");
            assert_eq!(row.lease_owner.as_deref(), Some(owner.as_str()), "job {id}");
            assert_eq!(row.attempts, 1, "job {id}");
            assert!(row.lease_until.is_some(), "job {id} has a lease");
        }
    }
    assert_eq!(
        sql_i64(&queue, "SELECT COUNT(*) FROM job_queue", &[]).await,
        10
    );
    assert_eq!(
        sql_i64(
            &queue,
            "SELECT COUNT(*) FROM job_queue WHERE status = 'running'",
            &[]
        )
        .await,
        10,
        "every job is running"
    );
}

// ---------------------------------------------------------------------------------------
// 2. SKIP LOCKED
// ---------------------------------------------------------------------------------------

on_every_backend!(
    concurrent_claimers_get_disjoint_jobs,
    a_claim_of_one_finds_a_job_past_a_locked_head_of_the_queue,
    a_lost_lease_writes_nothing,
);

/// A row another transaction holds is skipped at once, never waited for; it is claimable
/// once that transaction ends.
#[tokio::test(flavor = "multi_thread")]
async fn claim_skips_a_locked_row_without_waiting() {
    let url = fresh_database("store_skip_locked").await;
    // A claim that waited for the lock would fail after one second (and be retried), so a
    // prompt answer proves it did not wait. Session-level: no other test is affected.
    let pool = tests::pool_with_session(&url, 4, "SET SESSION innodb_lock_wait_timeout = 1").await;
    let queue = Queue::from_pool(pool).await.expect("queue");
    queue.migrate().await.expect("migrate");
    let wait_timeout: u64 = sqlx::query_scalar("SELECT @@SESSION.innodb_lock_wait_timeout")
        .fetch_one(queue.mysql_pool().unwrap())
        .await
        .expect("read timeout");
    assert_eq!(
        wait_timeout, 1,
        "the queue's sessions give up on a lock after 1 s"
    );

    let mut ids = Vec::new();
    for n in 0..3 {
        ids.push(queue.enqueue(Task { n }).await.expect("enqueue").id());
    }
    // The first row in claim order (same priority, lowest id), locked by someone else.
    let mut holder = MySqlConnection::connect(&url).await.expect("holder");
    let mut tx = holder.begin().await.expect("begin");
    let locked: u64 = sqlx::query_scalar("SELECT id FROM job_queue WHERE id = ? FOR UPDATE")
        .bind(ids[0])
        .fetch_one(&mut *tx)
        .await
        .expect("lock the row");
    assert_eq!(locked, ids[0]);

    // Whether a claim waited is judged by its lock wait timeout, not by a stopwatch: a
    // claim that waited for the held row would have hit it and been retried.
    let store = queue.store();
    let began = Instant::now();
    let claimed = store.claim("default", "worker-a", 10).await.expect("claim");
    println!("the claim beside a locked row took {:?}", began.elapsed());
    let got: Vec<u64> = claimed.iter().map(|c| c.id).collect();
    assert_eq!(got, ids[1..], "the unlocked rows, and never the locked one");
    assert_eq!(
        queue.metrics().conflict_retries,
        0,
        "no lock wait timeout was retried: the claim did not wait for the locked row"
    );
    // While the lock is held, a claim finds nothing, also without waiting.
    let again = store.claim("default", "worker-a", 10).await.expect("claim");
    assert!(again.is_empty(), "{again:?}");
    assert_eq!(
        queue.metrics().conflict_retries,
        0,
        "no lock wait timeout was retried: the second claim did not wait either"
    );
    assert_eq!(job(&queue, ids[0]).await.status, JobStatus::Ready);

    tx.commit().await.expect("release");
    let last = store.claim("default", "worker-b", 10).await.expect("claim");
    let got: Vec<u64> = last.iter().map(|c| c.id).collect();
    assert_eq!(got, vec![ids[0]], "the formerly locked row");
    let row = job(&queue, ids[0]).await;
    assert_eq!(row.status, JobStatus::Running);
    assert_eq!(row.lease_owner.as_deref(), Some("worker-b"));
}

/// Many workers that want one job each read the same head of the queue at once: a claim
/// finds a row past those the others hold locked, instead of coming back empty while a
/// backlog waits behind them.
async fn a_claim_of_one_finds_a_job_past_a_locked_head_of_the_queue(backend: Backend) {
    let queue = fresh_queue_on(backend, "store_locked_head").await;
    let mut ids = Vec::new();
    for n in 0..40 {
        ids.push(queue.enqueue(Task { n }).await.expect("enqueue").id());
    }
    // The first 20 rows in claim order, held by others' claims not yet committed.
    let mut holder = OtherSession::open(&queue).await;
    holder.exec("BEGIN", &[]).await;
    for id in &ids[..20] {
        holder
            .exec(
                "SELECT id FROM job_queue WHERE id = ? FOR UPDATE",
                &[*id as i64],
            )
            .await;
    }
    let claimed = queue
        .store()
        .claim("default", "worker-a", 1)
        .await
        .expect("claim");
    let got: Vec<u64> = claimed.iter().map(|c| c.id).collect();
    assert_eq!(got, [ids[20]], "the first row nobody holds");
    holder.exec("ROLLBACK", &[]).await;
}

/// A claim's transaction, held open at the level the queue's sessions run at (READ
/// COMMITTED), holds up nothing that writes where its locking read went: an enqueue into the
/// nearly empty queue (whose row goes right after the last ready job the claim read), a
/// promotion of an older scheduled job (into the middle of the ready range), a reclaim
/// (which makes an expired job's entry in the claim index move) and another claim. At
/// REPEATABLE READ the claim's next-key locks cover those gaps, and each of them waits for
/// the claim's commit: here, a lock wait timeout of one second, retried until it fails.
#[tokio::test(flavor = "multi_thread")]
async fn an_open_claim_holds_up_no_enqueue_promotion_or_reclaim() {
    let url = fresh_database("store_claim_gaps").await;
    let pool = tests::pool_with_session(&url, 4, "SET SESSION innodb_lock_wait_timeout = 1").await;
    let queue = Queue::from_pool(pool).await.expect("queue");
    queue.migrate().await.expect("migrate");
    let store = queue.store();
    // In id order: a scheduled job (due once promoted), a job whose lease will expire, then
    // the three ready jobs the claim reads to the end of.
    let due = queue
        .enqueue_with(
            Task { n: 0 },
            EnqueueOptions::default().delay(Duration::from_secs(3600)),
        )
        .await
        .expect("enqueue")
        .id();
    let expiring = queue.enqueue(Task { n: 1 }).await.expect("enqueue").id();
    let claimed = store
        .claim("default", "worker-gone", 1)
        .await
        .expect("claim");
    assert_eq!(
        claimed.iter().map(|c| c.id).collect::<Vec<_>>(),
        vec![expiring]
    );
    expire_lease(&queue, expiring).await;
    sqlx::query("UPDATE job_queue SET run_at = UTC_TIMESTAMP(6) - INTERVAL 1 SECOND WHERE id = ?")
        .bind(due)
        .execute(queue.mysql_pool().unwrap())
        .await
        .expect("make it due");
    let mut ready = Vec::new();
    for n in 2..5 {
        ready.push(queue.enqueue(Task { n }).await.expect("enqueue").id());
    }

    // The claim's reads, in a transaction on a session of a queue of its own (set up by
    // `Queue::connect`, as a worker's are), held open with more room than there are jobs:
    // candidates to the end of the ready range, then the lock of each.
    let holder_queue = Queue::connect(&url).await.expect("holder queue");
    let mut holder = holder_queue
        .mysql_pool()
        .unwrap()
        .acquire()
        .await
        .expect("holder");
    let mut tx = holder.begin().await.expect("begin");
    let candidates: Vec<u64> = sqlx::query_scalar(statements::CLAIM_SELECT)
        .bind("default")
        .bind("default")
        .bind(16u64)
        .fetch_all(&mut *tx)
        .await
        .expect("the claim's read");
    assert_eq!(candidates, ready, "the claim read every ready job");
    let lock = statements::claim_lock_sql(candidates.len());
    let mut locking = sqlx::query_scalar::<_, u64>(&lock);
    for id in &candidates {
        locking = locking.bind(*id);
    }
    let locked: Vec<u64> = locking.fetch_all(&mut *tx).await.expect("the claim's lock");
    assert_eq!(locked, ready, "the claim locked every ready job");

    // Each of these would hit its one-second lock wait timeout (and be retried, and counted)
    // if it waited for the claim's locks.
    let new = queue.enqueue(Task { n: 5 }).await.expect("enqueue");
    assert!(new.is_new(), "{new:?}");
    let high = queue
        .enqueue_with(Task { n: 6 }, EnqueueOptions::default().priority(-5))
        .await
        .expect("enqueue ahead of the others");
    assert_eq!(store.promote(10).await.expect("promote"), 1);
    assert_eq!(job(&queue, due).await.status, JobStatus::Ready);
    let Reclaimed { ready: back, .. } = store.reclaim(10).await.expect("reclaim");
    assert_eq!(back, vec![(expiring, 1, "worker-gone".to_owned())]);
    let mut other: Vec<u64> = store
        .claim("default", "worker-b", 16)
        .await
        .expect("claim beside the open one")
        .iter()
        .map(|c| c.id)
        .collect();
    other.sort_unstable();
    let mut expected = vec![due, expiring, new.id(), high.id()];
    expected.sort_unstable();
    assert_eq!(
        other, expected,
        "every ready job but the ones the open claim holds"
    );
    assert_eq!(
        queue.metrics().conflict_retries,
        0,
        "no lock wait timeout was retried: nothing waited for the open claim"
    );
    tx.rollback().await.expect("rollback");
}

// ---------------------------------------------------------------------------------------
// 3. Fencing
// ---------------------------------------------------------------------------------------

/// After its lease was taken back and the job claimed again, the first owner's writes all
/// match nothing and change nothing; the new owner's work is recorded.
async fn a_lost_lease_writes_nothing(backend: Backend) {
    let queue = fresh_queue_on(backend, "store_fencing").await;
    let store = queue.store();
    let id = queue.enqueue(Task { n: 1 }).await.expect("enqueue").id();

    let a = store.claim("default", "worker-a", 1).await.expect("claim");
    assert_eq!((a.len(), a[0].id, a[0].attempt), (1, id, 1));
    expire_lease(&queue, id).await;
    let reclaimed = store.reclaim(10).await.expect("reclaim");
    assert_eq!(reclaimed.ready, vec![(id, 1, "worker-a".to_owned())]);
    assert!(reclaimed.failed.is_empty() && reclaimed.cancelled.is_empty());
    let row = job(&queue, id).await;
    assert_eq!(row.status, JobStatus::Ready);
    assert_eq!(row.attempts, 1, "a reclaim keeps the attempt count");
    assert_eq!(row.lease_owner, None);

    let b = store.claim("default", "worker-b", 1).await.expect("claim");
    assert_eq!((b.len(), b[0].id, b[0].attempt), (1, id, 2));
    let before = job(&queue, id).await;
    assert_eq!(before.status, JobStatus::Running);
    assert_eq!(before.lease_owner.as_deref(), Some("worker-b"));
    assert_eq!(before.attempts, 2);

    // A, with its own (stale) claim.
    assert_eq!(
        store
            .complete("worker-a", &[(id, 1)])
            .await
            .expect("complete"),
        vec![id],
        "A's complete reports the job as lost"
    );
    assert_eq!(
        store.renew("worker-a", &[id], true).await.expect("renew"),
        0
    );
    assert_eq!(
        store.renew("worker-a", &[id], false).await.expect("renew"),
        0
    );
    let endings = [
        Finish::Fail {
            error: "A gave up".into(),
        },
        Finish::Retry {
            delay: Duration::ZERO,
            error: "A wants a retry".into(),
        },
        Finish::Cancelled {
            error: "A cancels".into(),
        },
        Finish::HandBack,
    ];
    for how in &endings {
        assert!(
            store
                .finish("worker-a", id, 1, how)
                .await
                .expect("finish")
                .is_none(),
            "A's {how:?} matched a row"
        );
        // The right attempt under the wrong owner, and the right owner with a stale attempt,
        // match nothing either: both halves of the token count.
        assert!(store
            .finish("worker-a", id, 2, how)
            .await
            .expect("finish")
            .is_none());
        assert!(store
            .finish("worker-b", id, 1, how)
            .await
            .expect("finish")
            .is_none());
    }
    assert_eq!(
        store
            .complete("worker-b", &[(id, 1)])
            .await
            .expect("complete"),
        vec![id],
        "B with A's attempt number"
    );

    let after = job(&queue, id).await;
    assert_eq!(
        format!("{after:?}"),
        format!("{before:?}"),
        "the row is untouched by every fenced-out write"
    );

    // B's own writes work.
    assert_eq!(
        store.renew("worker-b", &[id], false).await.expect("renew"),
        1
    );
    assert!(
        store
            .complete("worker-b", &[(id, 2)])
            .await
            .expect("complete")
            .is_empty(),
        "B still holds the job"
    );
    let done = job(&queue, id).await;
    assert_eq!(done.status, JobStatus::Done);
    assert_eq!(done.attempts, 2);
    assert_eq!((done.lease_owner, done.lease_until), (None, None));
    assert!(done.finished_at.is_some());
    // And once done, even B's stale writes match nothing.
    assert!(store
        .finish("worker-b", id, 2, &Finish::HandBack)
        .await
        .expect("finish")
        .is_none());
    assert_eq!(job(&queue, id).await.status, JobStatus::Done);
}

// ---------------------------------------------------------------------------------------
// 4. Reclaim and promote
// ---------------------------------------------------------------------------------------

/// Expired leases come back as ready (attempts kept), failed (last attempt, earlier error
/// kept) or cancelled (cancel pending); a live lease is left alone.
#[tokio::test(flavor = "multi_thread")]
async fn reclaim_takes_back_expired_leases() {
    let queue = fresh_queue("store_reclaim").await;
    let store = queue.store();
    let again = queue.enqueue(Task { n: 1 }).await.expect("enqueue").id();
    let last = queue
        .enqueue_with(Task { n: 2 }, EnqueueOptions::default().max_attempts(2))
        .await
        .expect("enqueue")
        .id();
    let cancel = queue.enqueue(Task { n: 3 }).await.expect("enqueue").id();
    let live = queue.enqueue(Task { n: 4 }).await.expect("enqueue").id();

    let claimed = store.claim("default", "worker-a", 4).await.expect("claim");
    assert_eq!(claimed.len(), 4);
    // `last` fails its first attempt, is retried at once and claimed for its last attempt.
    let retry = Finish::Retry {
        delay: Duration::ZERO,
        error: "smtp timeout".into(),
    };
    assert_eq!(
        store
            .finish("worker-a", last, 1, &retry)
            .await
            .expect("retry"),
        Some(JobStatus::Scheduled)
    );
    assert_eq!(job(&queue, last).await.status, JobStatus::Scheduled);
    assert_eq!(store.promote(10).await.expect("promote"), 1);
    let second = store.claim("default", "worker-b", 4).await.expect("claim");
    assert_eq!(second.len(), 1);
    assert_eq!((second[0].id, second[0].attempt), (last, 2));
    // An operator asks to cancel `cancel` while it runs.
    assert_eq!(
        queue.cancel(cancel).await.expect("cancel"),
        CancelOutcome::Requested
    );
    assert!(job(&queue, cancel).await.cancel_requested);

    for id in [again, last, cancel] {
        expire_lease(&queue, id).await;
    }
    let live_before = job(&queue, live).await;
    let Reclaimed {
        ready,
        failed,
        cancelled,
        ..
    } = store.reclaim(100).await.expect("reclaim");
    assert_eq!(ready, vec![(again, 1, "worker-a".to_owned())]);
    assert_eq!(failed, vec![(last, 2, "worker-b".to_owned())]);
    assert_eq!(cancelled, vec![cancel]);

    let row = job(&queue, again).await;
    assert_eq!(row.status, JobStatus::Ready);
    assert_eq!(row.attempts, 1, "attempts unchanged");
    assert_eq!((row.lease_owner, row.lease_until), (None, None));
    let error = row.last_error.expect("a reason");
    assert!(
        error.contains("lease") && error.contains("worker-a") && error.contains("expired"),
        "{error}"
    );

    let row = job(&queue, last).await;
    assert_eq!(row.status, JobStatus::Failed);
    assert_eq!((row.attempts, row.max_attempts), (2, 2));
    assert!(row.finished_at.is_some());
    let error = row.last_error.expect("a reason");
    assert!(
        error.contains("lease") && error.contains("last attempt"),
        "{error}"
    );
    assert!(
        error.contains("smtp timeout"),
        "the earlier error is kept: {error}"
    );

    let row = job(&queue, cancel).await;
    assert_eq!(row.status, JobStatus::Cancelled);
    assert!(row.finished_at.is_some());
    assert!(row.last_error.expect("a reason").contains("cancel"));

    assert_eq!(
        format!("{:?}", job(&queue, live).await),
        format!("{live_before:?}"),
        "a lease that has not run out is not touched"
    );
    let nothing = store.reclaim(100).await.expect("reclaim");
    assert!(nothing.ready.is_empty() && nothing.failed.is_empty() && nothing.cancelled.is_empty());
}

/// A due scheduled job becomes ready and claimable; one due later stays scheduled.
#[tokio::test(flavor = "multi_thread")]
async fn promote_makes_due_jobs_ready() {
    let queue = fresh_queue("store_promote").await;
    let store = queue.store();
    let hour = EnqueueOptions::default().delay(Duration::from_secs(3600));
    let due = queue
        .enqueue_with(Task { n: 1 }, hour.clone())
        .await
        .expect("enqueue")
        .id();
    let later = queue
        .enqueue_with(Task { n: 2 }, hour)
        .await
        .expect("enqueue")
        .id();
    assert_eq!(
        store.promote(100).await.expect("promote"),
        0,
        "nothing is due yet"
    );
    assert!(store
        .claim("default", "worker-a", 10)
        .await
        .expect("claim")
        .is_empty());

    sqlx::query("UPDATE job_queue SET run_at = UTC_TIMESTAMP(6) - INTERVAL 1 SECOND WHERE id = ?")
        .bind(due)
        .execute(queue.mysql_pool().unwrap())
        .await
        .expect("make due");
    assert_eq!(store.promote(100).await.expect("promote"), 1);
    assert_eq!(job(&queue, due).await.status, JobStatus::Ready);
    assert_eq!(job(&queue, later).await.status, JobStatus::Scheduled);
    assert_eq!(store.promote(100).await.expect("promote"), 0);

    let claimed = store.claim("default", "worker-a", 10).await.expect("claim");
    let got: Vec<u64> = claimed.iter().map(|c| c.id).collect();
    assert_eq!(got, vec![due]);
}

// ---------------------------------------------------------------------------------------
// 5. Idempotent enqueue
// ---------------------------------------------------------------------------------------

/// The same key twice: one row, the second a logged `Duplicate` of the first.
#[tokio::test(flavor = "current_thread")]
async fn the_same_key_twice_is_one_job_and_logged() {
    let (logs, _guard) = LogCapture::install("jobqueue_runtime=info");
    let queue = fresh_queue("store_duplicate").await;
    let key = "report:2026-11:customer-42";
    let first = queue
        .enqueue_with(Task { n: 1 }, keyed(key))
        .await
        .expect("enqueue");
    let Enqueued::New(id) = first else {
        panic!("first enqueue: {first:?}")
    };
    let second = queue
        .enqueue_with(Task { n: 2 }, keyed(key))
        .await
        .expect("enqueue");
    assert_eq!(second.duplicate_of(), Some(id));
    assert_eq!(
        count(
            queue.mysql_pool().unwrap(),
            "SELECT COUNT(*) FROM job_queue"
        )
        .await,
        1
    );
    assert_eq!(
        job(&queue, id).await.payload,
        serde_json::json!({ "n": 1 }),
        "the duplicate did not overwrite the job"
    );

    // Derived keys: equal arguments are the same job.
    let a = queue.enqueue(Task { n: 7 }).await.expect("enqueue");
    let b = queue.enqueue(Task { n: 7 }).await.expect("enqueue");
    assert!(a.is_new());
    assert_eq!(b.duplicate_of(), Some(a.id()));

    let lines = logs.lines_with(&["duplicate", key, &format!("existing_id={id}")]);
    assert_eq!(
        lines.len(),
        1,
        "one duplicate logged with key and id:\n{}",
        logs.text()
    );
    assert_eq!(
        logs.lines_with(&["duplicate", &format!("existing_id={}", a.id())])
            .len(),
        1,
        "{}",
        logs.text()
    );
    assert_eq!(queue.metrics().duplicates, 2);
}

/// An application pool as a user would have: the server's default isolation level.
async fn app_pool(url: &str) -> MySqlPool {
    MySqlPoolOptions::new()
        .max_connections(4)
        .connect(url)
        .await
        .expect("application pool")
}

/// A job enqueued in a transaction that rolls back is gone with it.
#[tokio::test(flavor = "multi_thread")]
async fn enqueue_in_a_rolled_back_transaction_leaves_nothing() {
    let url = fresh_database("store_rollback").await;
    let queue = Queue::connect(&url).await.expect("connect");
    queue.migrate().await.expect("migrate");
    let app = app_pool(&url).await;

    let mut tx = app.begin().await.expect("begin");
    let outcome = queue
        .enqueue_in(&mut tx, Task { n: 1 })
        .await
        .expect("enqueue");
    let Enqueued::New(id) = outcome else {
        panic!("{outcome:?}")
    };
    let inside: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM job_queue WHERE id = ?")
        .bind(id)
        .fetch_one(&mut *tx)
        .await
        .expect("count");
    assert_eq!(inside, 1, "visible inside the transaction");
    tx.rollback().await.expect("rollback");

    assert!(queue.job(id).await.expect("read").is_none());
    assert_eq!(
        count(
            queue.mysql_pool().unwrap(),
            "SELECT COUNT(*) FROM job_queue"
        )
        .await,
        0
    );
    // The key is free again.
    assert!(queue
        .enqueue(Task { n: 1 })
        .await
        .expect("enqueue")
        .is_new());
}

/// A duplicate inside the caller's transaction does not abort it: the caller's own writes
/// before and after it commit.
#[tokio::test(flavor = "multi_thread")]
async fn a_duplicate_does_not_abort_the_callers_transaction() {
    let url = fresh_database("store_outbox").await;
    let queue = Queue::connect(&url).await.expect("connect");
    queue.migrate().await.expect("migrate");
    let app = app_pool(&url).await;
    sqlx::query("CREATE TABLE orders (id BIGINT PRIMARY KEY, note VARCHAR(64) NOT NULL)")
        .execute(&app)
        .await
        .expect("create orders");
    let existing = queue
        .enqueue_with(Task { n: 1 }, keyed("order:7412"))
        .await
        .expect("enqueue")
        .id();

    let mut tx = app.begin().await.expect("begin");
    // A read first, so that a REPEATABLE READ snapshot exists before the next enqueue.
    let orders: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM orders")
        .fetch_one(&mut *tx)
        .await
        .expect("read");
    assert_eq!(orders, 0);
    sqlx::query("INSERT INTO orders VALUES (7412, 'before')")
        .execute(&mut *tx)
        .await
        .expect("insert order");
    let dup = queue
        .enqueue_in_with(&mut tx, Task { n: 2 }, keyed("order:7412"))
        .await
        .expect("enqueue");
    assert_eq!(dup.duplicate_of(), Some(existing));
    // A key another connection commits after this transaction's snapshot was taken: the
    // duplicate still names its row.
    let late = queue
        .enqueue_with(Task { n: 3 }, keyed("order:7413"))
        .await
        .expect("enqueue")
        .id();
    let dup_late = queue
        .enqueue_in_with(&mut tx, Task { n: 4 }, keyed("order:7413"))
        .await
        .expect("enqueue of a key committed after the snapshot");
    assert_eq!(dup_late.duplicate_of(), Some(late));
    sqlx::query("INSERT INTO orders VALUES (7413, 'after')")
        .execute(&mut *tx)
        .await
        .expect("insert after the duplicate");
    let fresh = queue
        .enqueue_in_with(&mut tx, Task { n: 5 }, keyed("order:7414"))
        .await
        .expect("enqueue");
    assert!(fresh.is_new());
    tx.commit().await.expect("commit");

    let notes: Vec<String> = sqlx::query_scalar("SELECT note FROM orders ORDER BY id")
        .fetch_all(&app)
        .await
        .expect("orders");
    assert_eq!(notes, ["before", "after"]);
    assert_eq!(
        count(
            queue.mysql_pool().unwrap(),
            "SELECT COUNT(*) FROM job_queue"
        )
        .await,
        3
    );
    assert_eq!(
        job(&queue, existing).await.payload,
        serde_json::json!({ "n": 1 })
    );
    assert_eq!(job(&queue, fresh.id()).await.task_key, "order:7414");
}

/// Statements the server has run for this session so far.
async fn questions(pool: &MySqlPool) -> u64 {
    let row = sqlx::query("SHOW SESSION STATUS LIKE 'Questions'")
        .fetch_one(pool)
        .await
        .expect("status");
    text_col(&row, "Value")
        .and_then(|v| v.parse().ok())
        .expect("a number")
}

/// 1,200 jobs with duplicates inside the batch and of rows that exist: one outcome per
/// job, in order, with the right ids, in a handful of statements.
#[tokio::test(flavor = "multi_thread")]
async fn enqueue_many_reports_every_job() {
    let url = fresh_database("store_many").await;
    // One connection, so that its session counters count every statement of the batch.
    let queue = Queue::connect_with(&url, QueueConfig::default().max_connections(1))
        .await
        .expect("connect");
    queue.migrate().await.expect("migrate");
    let mut ids: HashMap<u64, u64> = HashMap::new();
    for n in 1000..1100 {
        ids.insert(n, queue.enqueue(Task { n }).await.expect("enqueue").id());
    }

    // 0..1100, with every 11th job repeated right after itself: 1,200 jobs, 1,100 keys, of
    // which 100 exist already.
    let mut batch = Vec::new();
    for n in 0..1100 {
        batch.push(n);
        if n % 11 == 0 {
            batch.push(n);
        }
    }
    assert_eq!(batch.len(), 1200);
    let before = questions(queue.mysql_pool().unwrap()).await;
    let outcomes = queue
        .enqueue_many(batch.iter().map(|&n| Task { n }))
        .await
        .expect("enqueue_many");
    let statements = questions(queue.mysql_pool().unwrap()).await - before;

    assert_eq!(outcomes.len(), batch.len());
    for (&n, outcome) in batch.iter().zip(&outcomes) {
        match ids.get(&n) {
            Some(&id) => assert_eq!(outcome.duplicate_of(), Some(id), "job n={n}"),
            None => {
                let Enqueued::New(id) = *outcome else {
                    panic!("job n={n}: {outcome:?}, expected New")
                };
                ids.insert(n, id);
            }
        }
    }
    assert_eq!(outcomes.iter().filter(|o| o.is_new()).count(), 1000);
    assert_eq!(outcomes.iter().filter(|o| o.is_duplicate()).count(), 200);

    // The ids are those of the rows with each job's key.
    let rows: Vec<(u64, Vec<u8>)> = sqlx::query_as("SELECT id, task_key FROM job_queue")
        .fetch_all(queue.mysql_pool().unwrap())
        .await
        .expect("rows");
    assert_eq!(rows.len(), 1100);
    let by_key: HashMap<Vec<u8>, u64> = rows.into_iter().map(|(id, k)| (k, id)).collect();
    for n in 0..1100 {
        let key = Task { n }.task_key().expect("key");
        assert_eq!(by_key.get(key.as_bytes()), Some(&ids[&n]), "job n={n}");
    }
    // Per 500 jobs: a SELECT of the keys that exist, one multi-row INSERT, a SELECT of the
    // new ids; plus BEGIN, COMMIT and the status query. One statement per job would be 1,200.
    assert!(
        statements <= 15,
        "enqueue_many of 1,200 jobs took {statements} statements"
    );
}

/// Eight tasks enqueue one key at once: exactly one of them inserts it.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_enqueues_of_one_key_give_one_job() {
    let queue = fresh_queue("store_race").await;
    for round in 0..5 {
        let key = format!("race:{round}");
        let start = Arc::new(tokio::sync::Barrier::new(8));
        let mut tasks = Vec::new();
        for n in 0..8 {
            let queue = queue.clone();
            let key = key.clone();
            let start = start.clone();
            tasks.push(tokio::spawn(async move {
                start.wait().await;
                queue
                    .enqueue_with(Task { n }, EnqueueOptions::default().key(key))
                    .await
                    .expect("enqueue")
            }));
        }
        let mut outcomes = Vec::new();
        for t in tasks {
            outcomes.push(t.await.expect("task"));
        }
        assert_eq!(
            outcomes.iter().filter(|o| o.is_new()).count(),
            1,
            "round {round}: {outcomes:?}"
        );
        let row = queue
            .job_by_key(&key)
            .await
            .expect("read")
            .expect("the row");
        assert!(
            outcomes.iter().all(|o| o.id() == row.id),
            "round {round}: every outcome names row {}: {outcomes:?}",
            row.id
        );
    }
    assert_eq!(
        count(
            queue.mysql_pool().unwrap(),
            "SELECT COUNT(*) FROM job_queue"
        )
        .await,
        5
    );
}

// ---------------------------------------------------------------------------------------
// 6. Bad input
// ---------------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread")]
async fn bad_keys_are_refused_with_the_fix() {
    let queue = fresh_queue("store_bad_keys").await;
    for long in ["k".repeat(256), "ключ".repeat(64)] {
        let err = queue
            .enqueue_with(Task { n: 1 }, keyed(&long))
            .await
            .expect_err("a key over 255 characters");
        let msg = err.to_string();
        let Error::InvalidKey { key, reason } = err else {
            panic!("{err:?}")
        };
        assert_eq!(key.chars().count(), 80, "the key is cut in the message");
        assert!(
            msg.contains("256 characters") && msg.contains("limit of 255"),
            "{msg}"
        );
        assert!(
            msg.contains("shorter key") && msg.contains("fit_key"),
            "{msg}"
        );
        assert!(reason.contains("256"), "{reason}");
    }
    // 255 characters fit, however many bytes they take.
    let widest = "🦀".repeat(255);
    let ok = queue
        .enqueue_with(Task { n: 1 }, keyed(&widest))
        .await
        .expect("255 four-byte characters");
    assert_eq!(job(&queue, ok.id()).await.task_key, widest);

    let err = queue
        .enqueue_with(Task { n: 2 }, keyed(""))
        .await
        .expect_err("an empty key");
    let msg = err.to_string();
    assert!(matches!(err, Error::InvalidKey { .. }), "{err:?}");
    assert!(msg.contains("empty"), "{msg}");
    assert!(msg.contains("leave `key` unset"), "the fix: {msg}");

    assert_eq!(
        count(
            queue.mysql_pool().unwrap(),
            "SELECT COUNT(*) FROM job_queue"
        )
        .await,
        1
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn bad_queue_names_are_refused_with_the_fix() {
    let queue = fresh_queue("store_bad_queues").await;
    for (name, culprit) in [
        ("a'; DROP TABLE job_queue; --", "'\\''"),
        ("my queue", "' '"),
        ("\"quoted\"", "'\"'"),
        ("emails`", "'`'"),
        ("очередь", "'о'"),
    ] {
        let err = queue
            .enqueue_with(Task { n: 1 }, EnqueueOptions::default().queue(name))
            .await
            .expect_err(name);
        let msg = err.to_string();
        let Error::InvalidQueue { queue: q, .. } = &err else {
            panic!("{name}: {err:?}")
        };
        assert_eq!(q, name);
        assert!(msg.contains(culprit), "{name}: names the character: {msg}");
        assert!(
            msg.contains("use letters, digits, `_`, `-`, `.` and `:`"),
            "{name}: the fix: {msg}"
        );
    }
    let err = queue
        .enqueue_with(Task { n: 1 }, EnqueueOptions::default().queue(""))
        .await
        .expect_err("an empty queue name");
    assert!(matches!(err, Error::InvalidQueue { .. }), "{err:?}");
    assert_eq!(
        count(
            queue.mysql_pool().unwrap(),
            "SELECT COUNT(*) FROM job_queue"
        )
        .await,
        0
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn unserializable_arguments_are_refused() {
    let queue = fresh_queue("store_bad_payload").await;
    let weights = HashMap::from([((1, 2), 3)]);
    // With a derived key (serialized for the key) and with an explicit one (for the payload).
    for options in [EnqueueOptions::default(), keyed("weights")] {
        let err = queue
            .enqueue_with(
                TupleKeyed {
                    weights: weights.clone(),
                },
                options,
            )
            .await
            .expect_err("a map with tuple keys");
        let msg = err.to_string();
        let Error::Serialize { kind, .. } = err else {
            panic!("{err:?}")
        };
        assert_eq!(kind, "store_tuple_keyed");
        assert!(msg.contains("`store_tuple_keyed`"), "{msg}");
        assert!(msg.contains("key must be a string"), "the problem: {msg}");
        assert!(msg.contains("serializable to JSON"), "the fix: {msg}");
    }
    for options in [EnqueueOptions::default(), keyed("file")] {
        let err = queue
            .enqueue_with(Unserializable { path: "/x".into() }, options)
            .await
            .expect_err("a refusing Serialize impl");
        let msg = err.to_string();
        assert!(
            matches!(
                err,
                Error::Serialize {
                    kind: "store_unserializable",
                    ..
                }
            ),
            "{err:?}"
        );
        assert!(
            msg.contains("an open file handle cannot be serialized"),
            "{msg}"
        );
    }
    assert_eq!(
        count(
            queue.mysql_pool().unwrap(),
            "SELECT COUNT(*) FROM job_queue"
        )
        .await,
        0
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn oversized_payloads_are_refused() {
    let url = fresh_database("store_big_payload").await;
    let queue = Queue::connect_with(&url, QueueConfig::default().max_payload_bytes(1024))
        .await
        .expect("connect");
    queue.migrate().await.expect("migrate");

    // `{"text":"..."}` is 11 bytes around the text.
    let at_limit = Blob {
        text: "x".repeat(1024 - 11),
    };
    assert_eq!(serde_json::to_string(&at_limit).unwrap().len(), 1024);
    assert!(queue
        .enqueue(at_limit)
        .await
        .expect("exactly at the limit")
        .is_new());

    let err = queue
        .enqueue(Blob {
            text: "y".repeat(1024 - 10),
        })
        .await
        .expect_err("one byte over");
    let msg = err.to_string();
    let Error::PayloadTooLarge { kind, size, limit } = err else {
        panic!("{err:?}")
    };
    assert_eq!((kind.as_str(), size, limit), ("store_blob", 1025, 1024));
    assert!(
        msg.contains("1025 bytes") && msg.contains("limit of 1024"),
        "{msg}"
    );
    assert!(msg.contains("store large data elsewhere"), "the fix: {msg}");
    assert_eq!(
        count(
            queue.mysql_pool().unwrap(),
            "SELECT COUNT(*) FROM job_queue"
        )
        .await,
        1
    );
}

/// Keys are stored and compared byte for byte: quotes and SQL in them are data, case and
/// accents matter, and each deduplicates only against itself.
#[tokio::test(flavor = "multi_thread")]
async fn unusual_keys_are_kept_byte_for_byte() {
    let queue = fresh_queue("store_key_bytes").await;
    let keys = [
        "'; DROP TABLE job_queue; --",
        "\" OR 1=1 --",
        "back\\slash",
        "100%_like",
        "ключ",
        "🔑🦀",
        "A",
        "a",
        "ß",
        "ss",
        "é",
        "e\u{301}",
        "x",
        " x",
        "x y",
    ];
    let mut ids = Vec::new();
    for (n, key) in keys.iter().enumerate() {
        let outcome = queue
            .enqueue_with(Task { n: n as u64 }, keyed(key))
            .await
            .expect(key);
        assert!(outcome.is_new(), "{key:?} is a new key: {outcome:?}");
        ids.push(outcome.id());
    }
    for (key, &id) in keys.iter().zip(&ids) {
        let row = job(&queue, id).await;
        assert_eq!(row.task_key, *key);
        let stored: Vec<u8> =
            sqlx::query_scalar("SELECT CAST(task_key AS BINARY) FROM job_queue WHERE id = ?")
                .bind(id)
                .fetch_one(queue.mysql_pool().unwrap())
                .await
                .expect("bytes");
        assert_eq!(stored, key.as_bytes(), "{key:?} stored as given");
        assert_eq!(
            queue.job_by_key(key).await.expect("by key").map(|r| r.id),
            Some(id),
            "{key:?} finds its own row"
        );
        let again = queue
            .enqueue_with(Task { n: 999 }, keyed(key))
            .await
            .expect(key);
        assert_eq!(
            again.duplicate_of(),
            Some(id),
            "{key:?} deduplicates against itself"
        );
    }
    // The same keys in one batch, in reverse: every one a duplicate of its own row.
    let mut tx = queue.mysql_pool().unwrap().begin().await.expect("begin");
    for (key, &id) in keys.iter().zip(&ids).rev() {
        let outcome = queue
            .enqueue_in_with(&mut tx, Task { n: 1000 }, keyed(key))
            .await
            .expect(key);
        assert_eq!(outcome.duplicate_of(), Some(id), "{key:?}");
    }
    tx.commit().await.expect("commit");

    // Keys compare byte for byte: a trailing space makes another key.
    let plain = queue
        .enqueue_with(Task { n: 1001 }, keyed("trail"))
        .await
        .expect("trail");
    let spaced = queue
        .enqueue_with(Task { n: 1001 }, keyed("trail "))
        .await
        .expect("x with a space");
    assert!(plain.is_new() && spaced.is_new(), "{plain:?} {spaced:?}");
    assert_ne!(plain.id(), spaced.id());
    assert_eq!(
        queue.job_by_key("trail ").await.unwrap().unwrap().id,
        spaced.id()
    );
    // Control characters are refused.
    let err = queue
        .enqueue_with(Task { n: 1002 }, keyed("line\nbreak"))
        .await
        .expect_err("a control character");
    assert!(
        err.to_string().contains("control characters; remove them"),
        "{err}"
    );

    assert_eq!(
        count(
            queue.mysql_pool().unwrap(),
            "SELECT COUNT(*) FROM job_queue"
        )
        .await,
        keys.len() as i64 + 2,
        "the table is still there, one row per key"
    );
}

// ---------------------------------------------------------------------------------------
// 7. A read-only server
// ---------------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread")]
async fn a_read_only_server_is_refused() {
    let server = tokio::task::spawn_blocking(TestServer::start)
        .await
        .expect("start task")
        .unwrap_or_else(|e| panic!("{e}"));
    let url = server
        .create_database("store_read_only")
        .await
        .expect("database");
    let mut admin = MySqlConnection::connect(&url).await.expect("admin");
    admin
        .execute("SET GLOBAL read_only = ON")
        .await
        .expect("read_only on");

    let err = Queue::connect(&url).await.expect_err("a read-only server");
    let Error::UnsupportedServer(msg) = &err else {
        panic!("{err:?}")
    };
    assert!(msg.contains("read_only=ON"), "names the problem: {msg}");
    assert!(
        msg.contains("point the queue at the primary"),
        "the fix: {msg}"
    );

    // The same server, writable again, is accepted: read_only alone was refused.
    admin
        .execute("SET GLOBAL read_only = OFF")
        .await
        .expect("read_only off");
    let queue = Queue::connect(&url).await.expect("a writable server");
    queue.migrate().await.expect("migrate");
    queue.mysql_pool().unwrap().close().await;
    admin.close().await.expect("close");
    tokio::task::spawn_blocking(move || drop(server))
        .await
        .expect("stop the server");
}

// ---------------------------------------------------------------------------------------
// 8. Delays, start times and priorities
// ---------------------------------------------------------------------------------------

async fn db_time(pool: &MySqlPool, expr: &str) -> NaiveDateTime {
    sqlx::query_scalar(&format!("SELECT {expr}"))
        .fetch_one(pool)
        .await
        .expect("time")
}

#[tokio::test(flavor = "multi_thread")]
async fn delays_start_times_and_priorities_are_stored() {
    let queue = fresh_queue("store_delay").await;
    let pool = queue.mysql_pool().unwrap();

    let delayed = queue
        .enqueue_with(
            Task { n: 1 },
            EnqueueOptions::default().delay(Duration::from_secs(3600)),
        )
        .await
        .expect("enqueue")
        .id();
    let row = job(&queue, delayed).await;
    assert_eq!(row.status, JobStatus::Scheduled);
    let ahead_us: i64 = sqlx::query_scalar(
        "SELECT TIMESTAMPDIFF(MICROSECOND, UTC_TIMESTAMP(6), run_at) FROM job_queue WHERE id = ?",
    )
    .bind(delayed)
    .fetch_one(pool)
    .await
    .expect("run_at");
    assert!(
        (3_590_000_000..=3_600_000_000).contains(&ahead_us),
        "run_at is an hour ahead of the database clock: {ahead_us} µs"
    );

    let past = db_time(pool, "UTC_TIMESTAMP(6) - INTERVAL 1 HOUR").await;
    let early = queue
        .enqueue_with(
            Task { n: 2 },
            EnqueueOptions::default().run_at(past.and_utc()),
        )
        .await
        .expect("enqueue")
        .id();
    let row = job(&queue, early).await;
    assert_eq!(
        row.status,
        JobStatus::Ready,
        "a start time in the past is ready now"
    );
    assert_eq!(row.run_at, past.and_utc());

    let future = db_time(pool, "UTC_TIMESTAMP(6) + INTERVAL 1 HOUR").await;
    let late = queue
        .enqueue_with(
            Task { n: 3 },
            EnqueueOptions::default().run_at(future.and_utc()),
        )
        .await
        .expect("enqueue")
        .id();
    let row = job(&queue, late).await;
    assert_eq!(row.status, JobStatus::Scheduled);
    assert_eq!(row.run_at, future.and_utc());

    let now = queue
        .enqueue_with(
            Task { n: 4 },
            EnqueueOptions::default().delay(Duration::ZERO),
        )
        .await
        .expect("enqueue")
        .id();
    assert_eq!(job(&queue, now).await.status, JobStatus::Ready);

    // Priorities: the kind's default (3), and overrides; lower is claimed first.
    let urgent = queue
        .enqueue_with(
            Task { n: 5 },
            EnqueueOptions::default().priority(-7).max_attempts(9),
        )
        .await
        .expect("enqueue")
        .id();
    let row = job(&queue, urgent).await;
    assert_eq!((row.priority, row.max_attempts), (-7, 9));
    let row = job(&queue, early).await;
    assert_eq!(
        (row.priority, row.max_attempts),
        (3, 3),
        "the kind's defaults"
    );
    let lazy = queue
        .enqueue_with(Task { n: 6 }, EnqueueOptions::default().priority(i16::MAX))
        .await
        .expect("enqueue")
        .id();
    assert_eq!(job(&queue, lazy).await.priority, i16::MAX);

    let claimed = queue
        .store()
        .claim("default", "worker-a", 10)
        .await
        .expect("claim");
    let order: Vec<u64> = claimed.iter().map(|c| c.id).collect();
    assert_eq!(
        order,
        vec![urgent, early, now, lazy],
        "by priority, then id"
    );
}

// ---------------------------------------------------------------------------------------
// 9. Leases beyond what the table can hold are refused
// ---------------------------------------------------------------------------------------

/// A lease longer than the `lease_ms` column holds (about 49.7 days).
#[job(
    name = "hardening_conn_endless_lease",
    queue = "conn_never_served",
    lease = "60d"
)]
async fn endless_lease() {}

/// A lease over `u32::MAX` milliseconds is refused at enqueue with
/// an error naming the limit, instead of being cut to 49.7 days without a word.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lease_longer_than_the_table_holds_is_refused() {
    let queue = fresh_queue("conn_lease").await;
    match queue.enqueue(EndlessLease {}).await {
        Err(Error::InvalidSetting {
            setting: "lease",
            reason,
        }) => {
            assert!(
                reason.contains("lease") && reason.contains("49"),
                "{reason}"
            );
        }
        other => panic!("expected a configuration error, got {other:?}"),
    }
    assert_eq!(queue.counts(None).await.unwrap(), vec![]);
}
