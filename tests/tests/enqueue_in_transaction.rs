//! Enqueue inside the application's own transaction, on each backend: the job exists once
//! the transaction commits and not after a rollback, a duplicate leaves the transaction
//! usable (on PostgreSQL, where a failed statement would abort it), and a connection of the
//! other database is refused.

use jobqueue::{Backend, EnqueueOptions, Enqueued, Error, Job, JobContext, JobError, JobOptions};
use serde::{Deserialize, Serialize};
use tests::{fresh_queue_on, on_every_backend, sql_i64, Arg};

#[derive(Debug, Clone, Serialize, Deserialize)]
struct Invoice {
    order: u32,
}

impl Job for Invoice {
    const KIND: &'static str = "tx_invoice";
    const OPTIONS: JobOptions = JobOptions::DEFAULT;

    async fn run(self, _ctx: JobContext) -> Result<(), JobError> {
        Ok(())
    }
}

fn keyed(key: &str) -> EnqueueOptions {
    EnqueueOptions::default().key(key)
}

async fn jobs_with_key(queue: &jobqueue::Queue, key: &str) -> i64 {
    sql_i64(
        queue,
        "SELECT COUNT(*) FROM job_queue WHERE task_key = ?",
        &[Arg::Text(key)],
    )
    .await
}

/// Runs `$body` with `$tx` a transaction of the queue's own database, then commits it
/// (`commit`) or rolls it back (`rollback`).
macro_rules! in_tx {
    ($queue:expr, $end:ident, |$tx:ident| $body:block) => {
        match $queue.backend() {
            Backend::Postgres => {
                let mut $tx = $queue.postgres_pool().unwrap().begin().await.unwrap();
                let r = $body;
                $tx.$end().await.unwrap();
                r
            }
            _ => {
                let mut $tx = $queue.mysql_pool().unwrap().begin().await.unwrap();
                let r = $body;
                $tx.$end().await.unwrap();
                r
            }
        }
    };
}

async fn a_job_enqueued_in_a_committed_transaction_exists(backend: Backend) {
    let queue = fresh_queue_on(backend, "tx_commit").await;
    let outcome = in_tx!(queue, commit, |tx| {
        let o = queue
            .enqueue_in_with(&mut *tx, Invoice { order: 1 }, keyed("order:1"))
            .await
            .unwrap();
        let many = queue
            .enqueue_many_in(
                &mut *tx,
                [Invoice { order: 2 }, Invoice { order: 3 }],
                EnqueueOptions::default(),
            )
            .await
            .unwrap();
        assert!(many.iter().all(|m| m.is_new()), "{many:?}");
        o
    });
    let Enqueued::New(id) = outcome else {
        panic!("expected a new job, got {outcome:?}");
    };
    let record = queue.job(id).await.unwrap().expect("the committed job");
    assert_eq!(record.task_key, "order:1");
    assert_eq!(record.kind, "tx_invoice");
    assert_eq!(record.payload, serde_json::json!({"order": 1}));
    assert_eq!(
        sql_i64(&queue, "SELECT COUNT(*) FROM job_queue", &[]).await,
        3
    );
}

async fn a_job_enqueued_in_a_rolled_back_transaction_does_not(backend: Backend) {
    let queue = fresh_queue_on(backend, "tx_rollback").await;
    let outcome = in_tx!(queue, rollback, |tx| {
        queue
            .enqueue_in_with(&mut *tx, Invoice { order: 1 }, keyed("order:1"))
            .await
            .unwrap()
    });
    assert!(outcome.is_new());
    assert!(queue.job(outcome.id()).await.unwrap().is_none());
    assert_eq!(jobs_with_key(&queue, "order:1").await, 0);
    // The key is free: a later enqueue makes a new job.
    let again = queue
        .enqueue_with(Invoice { order: 1 }, keyed("order:1"))
        .await
        .unwrap();
    assert!(again.is_new(), "{again:?}");
}

/// A duplicate inside the caller's transaction is an outcome, not an error: the caller's
/// next statement in the same transaction still runs, and its commit keeps what it did.
async fn a_duplicate_leaves_the_callers_transaction_usable(backend: Backend) {
    let queue = fresh_queue_on(backend, "tx_duplicate").await;
    let first = queue
        .enqueue_with(Invoice { order: 1 }, keyed("order:1"))
        .await
        .unwrap();
    let (dup, later) = in_tx!(queue, commit, |tx| {
        let dup = queue
            .enqueue_in_with(&mut *tx, Invoice { order: 1 }, keyed("order:1"))
            .await
            .unwrap();
        // A statement of the caller's own after the duplicates.
        let later = queue
            .enqueue_in_with(&mut *tx, Invoice { order: 2 }, keyed("order:2"))
            .await
            .unwrap();
        (dup, later)
    });
    assert_eq!(dup.duplicate_of(), Some(first.id()));
    assert!(later.is_new(), "{later:?}");
    assert!(queue.job(later.id()).await.unwrap().is_some());
    assert_eq!(jobs_with_key(&queue, "order:1").await, 1);
    assert_eq!(jobs_with_key(&queue, "order:2").await, 1);
}

/// A duplicate within a batch inside the caller's transaction (a key of the table and a
/// key twice in the batch) leaves the transaction usable as well.
async fn a_batch_with_duplicates_leaves_the_callers_transaction_usable(backend: Backend) {
    let queue = fresh_queue_on(backend, "tx_bulk_dup").await;
    let first = queue.enqueue(Invoice { order: 1 }).await.unwrap();
    let (outcomes, later) = in_tx!(queue, commit, |tx| {
        let outcomes = queue
            .enqueue_many_in(
                &mut *tx,
                [
                    Invoice { order: 1 },
                    Invoice { order: 2 },
                    Invoice { order: 2 },
                ],
                EnqueueOptions::default(),
            )
            .await
            .unwrap();
        let later = queue
            .enqueue_in(&mut *tx, Invoice { order: 3 })
            .await
            .unwrap();
        (outcomes, later)
    });
    assert_eq!(outcomes[0].duplicate_of(), Some(first.id()));
    assert!(outcomes[1].is_new());
    assert_eq!(outcomes[2].duplicate_of(), Some(outcomes[1].id()));
    assert!(later.is_new());
    assert_eq!(
        sql_i64(&queue, "SELECT COUNT(*) FROM job_queue", &[]).await,
        3
    );
}

on_every_backend!(
    a_job_enqueued_in_a_committed_transaction_exists,
    a_job_enqueued_in_a_rolled_back_transaction_does_not,
    a_duplicate_leaves_the_callers_transaction_usable,
    a_batch_with_duplicates_leaves_the_callers_transaction_usable,
);

/// A connection of one database handed to a queue on the other is refused, before any
/// statement, with both backends named.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connection_of_the_other_database_is_wrong_backend() {
    let mysql = fresh_queue_on(Backend::MySql, "tx_wrong_my").await;
    let postgres = fresh_queue_on(Backend::Postgres, "tx_wrong_pg").await;

    let mut pg_conn = postgres.postgres_pool().unwrap().acquire().await.unwrap();
    let err = mysql
        .enqueue_in(&mut *pg_conn, Invoice { order: 1 })
        .await
        .unwrap_err();
    assert!(
        matches!(
            err,
            Error::WrongBackend {
                given: Backend::Postgres,
                queue: Backend::MySql
            }
        ),
        "{err:?}"
    );
    let err = mysql
        .enqueue_many_in(
            &mut *pg_conn,
            [Invoice { order: 1 }],
            EnqueueOptions::default(),
        )
        .await
        .unwrap_err();
    assert!(matches!(err, Error::WrongBackend { .. }), "{err:?}");

    let mut my_conn = mysql.mysql_pool().unwrap().acquire().await.unwrap();
    let err = postgres
        .enqueue_in(&mut *my_conn, Invoice { order: 1 })
        .await
        .unwrap_err();
    assert!(
        matches!(
            err,
            Error::WrongBackend {
                given: Backend::MySql,
                queue: Backend::Postgres
            }
        ),
        "{err:?}"
    );
    // Nothing was written on either side.
    assert_eq!(
        sql_i64(&mysql, "SELECT COUNT(*) FROM job_queue", &[]).await,
        0
    );
    assert_eq!(
        sql_i64(&postgres, "SELECT COUNT(*) FROM job_queue", &[]).await,
        0
    );
}
