//! Dependencies for jobs: shared state given to the worker (`.data(value)`) and taken by a
//! job as a `Data<T>` parameter, checked when the worker is built; follow-up jobs through
//! the worker's own `Queue`, inside the job's own transaction.

use std::sync::Arc;
use std::time::Duration;

use jobqueue::{job, Backend, Data, Error, JobContext, JobError, JobStatus, Queue};

use tests::{
    effects_of, fresh_queue_with_effects_on, on_every_backend, quick_worker, start, stop,
    wait_status, Effects,
};

/// Records an effect of `task_key` on `conn` (a connection or transaction of the database).
macro_rules! record {
    ($backend:ident, $conn:expr, $task_key:expr, $attempt:expr, $note:expr) => {
        sqlx::query(match stringify!($backend) {
            "Postgres" => {
                "INSERT INTO effects (task_key, attempt, note, started_at) \
                 VALUES ($1, $2, $3, job_queue_now())"
            }
            _ => {
                "INSERT INTO effects (task_key, attempt, note, started_at) \
                 VALUES (?, ?, ?, UTC_TIMESTAMP(6))"
            }
        })
        .bind($task_key)
        .bind($attempt as i32)
        .bind($note)
        .execute($conn)
        .await
        .map(drop)
    };
}

/// Configuration the application shares with its jobs; not `Clone`, so it goes in an `Arc`.
#[derive(Debug)]
struct Greeting {
    salutation: String,
}

/// Records, in the application's own pool, a note built from shared configuration.
#[job(queue = "job_data")]
async fn note_greeting(
    ctx: JobContext,
    db: Data<Effects>,
    user: String,
    greeting: Data<Arc<Greeting>>,
) -> Result<(), JobError> {
    let note = format!("{} {user}", greeting.salutation);
    match &*db {
        Effects::Postgres(pool) => record!(Postgres, pool, ctx.task_key(), ctx.attempt(), note)?,
        Effects::MySql(pool) => record!(MySql, pool, ctx.task_key(), ctx.attempt(), note)?,
    };
    Ok(())
}

/// Enqueues a follow-up job in the same transaction as its own side effect: both commit, or
/// neither does.
#[job(queue = "job_data", key = "order:{order_id}")]
async fn place_order(queue: Data<Queue>, db: Data<Effects>, order_id: u64) -> Result<(), JobError> {
    let key = format!("order:{order_id}");
    let follow_up = NoteGreeting {
        user: format!("buyer of order {order_id}"),
    };
    match &*db {
        Effects::Postgres(pool) => {
            let mut tx = pool.begin().await?;
            record!(Postgres, &mut *tx, &key, 1, "placed")?;
            queue.enqueue_in(&mut tx, follow_up).await?;
            tx.commit().await?;
        }
        Effects::MySql(pool) => {
            let mut tx = pool.begin().await?;
            record!(MySql, &mut *tx, &key, 1, "placed")?;
            queue.enqueue_in(&mut tx, follow_up).await?;
            tx.commit().await?;
        }
    }
    queue.wake_workers();
    Ok(())
}

async fn jobs_take_the_state_their_worker_was_given(backend: Backend) {
    let (queue, effects) = fresh_queue_with_effects_on(backend, "job_data").await;
    let greeting = Arc::new(Greeting {
        salutation: "Welcome,".into(),
    });
    let id = queue
        .enqueue(NoteGreeting { user: "ada".into() })
        .await
        .unwrap()
        .id();
    let key = queue.job(id).await.unwrap().unwrap().task_key;

    let (handle, task) = start(
        quick_worker(&queue)
            .queues(["job_data"])
            .data(effects.clone())
            .data(greeting)
            .build()
            .unwrap(),
    );
    wait_status(&queue, id, JobStatus::Done, Duration::from_secs(20)).await;
    assert_eq!(
        effects_of(&effects, &key).await,
        [(1, "Welcome, ada".to_owned())]
    );
    stop(&handle, task).await;
}

async fn a_job_enqueues_a_follow_up_in_its_own_transaction(backend: Backend) {
    let (queue, effects) = fresh_queue_with_effects_on(backend, "job_data_follow_up").await;
    let id = queue
        .enqueue(PlaceOrder { order_id: 7 })
        .await
        .unwrap()
        .id();
    let (handle, task) = start(
        quick_worker(&queue)
            .queues(["job_data"])
            .data(effects.clone())
            .data(Arc::new(Greeting {
                salutation: "Thanks,".into(),
            }))
            .build()
            .unwrap(),
    );
    wait_status(&queue, id, JobStatus::Done, Duration::from_secs(20)).await;
    let follow_up = NoteGreeting {
        user: "buyer of order 7".into(),
    };
    let key = jobqueue::Job::task_key(&follow_up).unwrap();
    let follow_up_id = queue.job_by_key(&key).await.unwrap().expect("enqueued").id;
    wait_status(
        &queue,
        follow_up_id,
        JobStatus::Done,
        Duration::from_secs(20),
    )
    .await;
    assert_eq!(
        effects_of(&effects, "order:7").await,
        [(1, "placed".into())]
    );
    assert_eq!(
        effects_of(&effects, &key).await,
        [(1, "Thanks, buyer of order 7".to_owned())]
    );
    stop(&handle, task).await;
}

async fn a_worker_without_the_state_its_kinds_need_is_refused_at_build(backend: Backend) {
    let (queue, effects) = fresh_queue_with_effects_on(backend, "job_data_missing").await;
    let e = quick_worker(&queue)
        .queues(["job_data"])
        .data(effects)
        .build()
        .unwrap_err();
    assert!(matches!(e, Error::MissingData { .. }), "{e:?}");
    let message = e.to_string();
    assert!(message.contains("job `note_greeting`"), "{message}");
    assert!(
        message.contains("needs `Data<Arc<Greeting>>`"),
        "names the type as the job's code writes it: {message}"
    );
    assert!(message.contains(".data("), "says the fix: {message}");
    // A worker of other queues does not need it.
    quick_worker(&queue).queues(["default"]).build().unwrap();
}

async fn a_job_function_with_state_is_callable_outside_a_worker(backend: Backend) {
    let (queue, effects) = fresh_queue_with_effects_on(backend, "job_data_detached").await;
    let ctx = JobContext::detached(1, "by-hand").with_data(queue.clone());
    assert!(ctx.data::<Queue>().is_some());
    note_greeting(
        ctx,
        Data(effects.clone()),
        "grace".into(),
        Data(Arc::new(Greeting {
            salutation: "Hello".into(),
        })),
    )
    .await
    .unwrap();
    assert_eq!(
        effects_of(&effects, "by-hand").await,
        [(1, "Hello grace".to_owned())]
    );
    // Run through the kind without the state: the attempt fails, naming what is missing.
    let e = jobqueue::Job::run(
        PlaceOrder { order_id: 1 },
        JobContext::detached(2, "no-state"),
    )
    .await
    .unwrap_err();
    assert!(e.to_string().contains("needs `Data<Queue>`"), "{e}");
}

on_every_backend!(
    jobs_take_the_state_their_worker_was_given,
    a_job_enqueues_a_follow_up_in_its_own_transaction,
    a_worker_without_the_state_its_kinds_need_is_refused_at_build,
    a_job_function_with_state_is_callable_outside_a_worker,
);
