//! Dependencies for jobs: shared state given to the worker (`.data(value)`) and taken by a
//! job as a `Data<T>` parameter, checked when the worker is built; follow-up jobs through
//! the worker's own `Queue`, inside the job's own transaction.

use std::sync::Arc;
use std::time::Duration;

use jobqueue::{job, Data, Error, JobContext, JobError, JobStatus, Queue};
use sqlx::MySqlPool;
use tests::{effects_of, fresh_queue_with_effects, quick_worker, start, stop, wait_status};

/// Configuration the application shares with its jobs; not `Clone`, so it goes in an `Arc`.
#[derive(Debug)]
struct Greeting {
    salutation: String,
}

/// Records, in the application's own pool, a note built from shared configuration.
#[job(queue = "job_data")]
async fn note_greeting(
    ctx: JobContext,
    db: Data<MySqlPool>,
    user: String,
    greeting: Data<Arc<Greeting>>,
) -> Result<(), JobError> {
    let note = format!("{} {user}", greeting.salutation);
    sqlx::query(
        "INSERT INTO effects (task_key, attempt, note, started_at) \
         VALUES (?, ?, ?, UTC_TIMESTAMP(6))",
    )
    .bind(ctx.task_key())
    .bind(ctx.attempt())
    .bind(note)
    .execute(&*db)
    .await?;
    Ok(())
}

/// Enqueues a follow-up job in the same transaction as its own side effect: both commit, or
/// neither does.
#[job(queue = "job_data", key = "order:{order_id}")]
async fn place_order(
    queue: Data<Queue>,
    db: Data<MySqlPool>,
    order_id: u64,
) -> Result<(), JobError> {
    let mut tx = db.begin().await?;
    sqlx::query(
        "INSERT INTO effects (task_key, attempt, note, started_at) \
         VALUES (?, 1, 'placed', UTC_TIMESTAMP(6))",
    )
    .bind(format!("order:{order_id}"))
    .execute(&mut *tx)
    .await?;
    queue
        .enqueue_in(
            &mut tx,
            NoteGreeting {
                user: format!("buyer of order {order_id}"),
            },
        )
        .await?;
    tx.commit().await?;
    queue.wake_workers();
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn jobs_take_the_state_their_worker_was_given() {
    let (queue, effects) = fresh_queue_with_effects("job_data").await;
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_enqueues_a_follow_up_in_its_own_transaction() {
    let (queue, effects) = fresh_queue_with_effects("job_data_follow_up").await;
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

#[tokio::test]
async fn a_worker_without_the_state_its_kinds_need_is_refused_at_build() {
    let (queue, effects) = fresh_queue_with_effects("job_data_missing").await;
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

#[tokio::test]
async fn a_job_function_with_state_is_callable_outside_a_worker() {
    let (queue, effects) = fresh_queue_with_effects("job_data_detached").await;
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
