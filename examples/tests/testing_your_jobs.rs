//! The testing guide's complete test (`docs/guide/testing.md`), compiled and run: an axum
//! handler that enqueues a job in its own transaction, tested with `assert_enqueued`, and the
//! job it enqueues, tested with `drain` and `perform` (its last attempt, a cancellation). The
//! guide shows this file from the line after this header on; `run_examples.rs` checks that
//! they stay the same.
//!
//! Run it with `cargo test -p examples --test testing_your_jobs` (it starts a throwaway
//! database server, or uses the one `JOBQUEUE_TEST_DATABASE_URL` names).

use axum::extract::State;
use axum::http::StatusCode;
use axum::Json;
use jobqueue::testing::{
    assert_enqueued, drain, perform, refute_enqueued, Performed, TestDatabase,
};
use jobqueue::{job, Data, JobContext, JobError, Queue};
use sqlx::MySqlPool;

// The application: a sign-up handler, and the welcome mail it enqueues.

#[job(queue = "mail", key = "welcome:{user_id}", max_attempts = 5)]
async fn send_welcome(ctx: JobContext, db: Data<MySqlPool>, user_id: u64) -> Result<(), JobError> {
    let email: Option<String> = sqlx::query_scalar("SELECT email FROM users WHERE id = ?")
        .bind(user_id)
        .fetch_optional(&*db)
        .await?;
    let Some(email) = email else {
        return Err(JobError::permanent(format!("no user {user_id}")));
    };
    if ctx.is_cancelled() {
        return Err(JobError::retryable("cancelled before sending"));
    }
    // Keyed by the job's task key: a second run sends nothing more.
    sqlx::query("INSERT IGNORE INTO sent_mail (task_key, email) VALUES (?, ?)")
        .bind(ctx.task_key())
        .bind(email)
        .execute(&*db)
        .await?;
    Ok(())
}

#[derive(serde::Deserialize)]
struct SignUp {
    email: String,
}

async fn sign_up(
    State(queue): State<Queue>,
    Json(form): Json<SignUp>,
) -> Result<StatusCode, (StatusCode, String)> {
    let internal = |e: &dyn std::fmt::Display| (StatusCode::INTERNAL_SERVER_ERROR, e.to_string());
    let mut tx = queue
        .mysql_pool()
        .expect("the examples run on MySQL or MariaDB")
        .begin()
        .await
        .map_err(|e| internal(&e))?;
    let user_id = sqlx::query("INSERT INTO users (email) VALUES (?)")
        .bind(&form.email)
        .execute(&mut *tx)
        .await
        .map_err(|e| internal(&e))?
        .last_insert_id();
    // The mail exists if and only if the user does.
    queue
        .enqueue_in(&mut tx, SendWelcome { user_id })
        .await
        .map_err(|e| internal(&e))?;
    tx.commit().await.map_err(|e| internal(&e))?;
    Ok(StatusCode::CREATED)
}

// The tests: each gets a migrated database of its own, dropped when it ends.

async fn app_database(name: &str) -> TestDatabase {
    let db = TestDatabase::new(name).await.expect("a test database");
    for table in [
        "CREATE TABLE users (id BIGINT UNSIGNED AUTO_INCREMENT PRIMARY KEY, email VARCHAR(255) NOT NULL)",
        "CREATE TABLE sent_mail (task_key VARCHAR(255) PRIMARY KEY, email VARCHAR(255) NOT NULL)",
    ] {
        sqlx::query(table).execute(db.queue().mysql_pool().expect("the examples run on MySQL or MariaDB")).await.expect("create");
    }
    db
}

async fn sent_mail(pool: &MySqlPool) -> Vec<(String, String)> {
    sqlx::query_as("SELECT task_key, email FROM sent_mail ORDER BY task_key")
        .fetch_all(pool)
        .await
        .expect("read sent mail")
}

#[tokio::test]
async fn signing_up_enqueues_the_welcome_mail_and_it_is_sent_once() {
    let db = app_database("signup").await;
    let signed_up = sign_up(
        State(db.queue().clone()),
        Json(SignUp {
            email: "ada@example.com".into(),
        }),
    )
    .await;
    assert_eq!(signed_up, Ok(StatusCode::CREATED));

    // The handler enqueued it...
    let jobs = assert_enqueued::<SendWelcome>(db.queue())
        .queue("mail")
        .matching(|mail| mail.user_id == 1)
        .await;
    assert_eq!(jobs[0].record.task_key, "welcome:1");

    // ...and running the queue sends it, once.
    let pool = db
        .queue()
        .mysql_pool()
        .expect("the examples run on MySQL or MariaDB")
        .clone();
    let summary = drain(db.queue())
        .queues(["mail"])
        .data(pool.clone())
        .await
        .expect("drain");
    assert_eq!(summary.kind("send_welcome").done, 1);
    assert_eq!(
        sent_mail(&pool).await,
        [("welcome:1".to_owned(), "ada@example.com".to_owned())]
    );
}

#[tokio::test]
async fn a_failed_sign_up_enqueues_nothing() {
    let db = app_database("signup_fails").await;
    sqlx::query("ALTER TABLE users ADD CONSTRAINT email_has_at CHECK (email LIKE '%@%')")
        .execute(
            db.queue()
                .mysql_pool()
                .expect("the examples run on MySQL or MariaDB"),
        )
        .await
        .expect("add check");
    let signed_up = sign_up(
        State(db.queue().clone()),
        Json(SignUp {
            email: "ada".into(),
        }),
    )
    .await;
    assert_eq!(
        signed_up.map_err(|(status, _)| status),
        Err(StatusCode::INTERNAL_SERVER_ERROR)
    );
    refute_enqueued::<SendWelcome>(db.queue()).await;
}

#[tokio::test]
async fn the_welcome_mail_of_a_missing_user_fails_for_good() {
    let db = app_database("welcome_missing").await;
    let performed = perform(SendWelcome { user_id: 99 })
        .data(
            db.queue()
                .mysql_pool()
                .expect("the examples run on MySQL or MariaDB")
                .clone(),
        )
        .await;
    assert_eq!(
        performed,
        Performed::Failed {
            error: "no user 99 (permanent error, not retried)".into()
        }
    );
}

#[tokio::test]
async fn a_cancelled_welcome_mail_is_not_sent_even_on_its_last_attempt() {
    let db = app_database("welcome_cancelled").await;
    let pool = db
        .queue()
        .mysql_pool()
        .expect("the examples run on MySQL or MariaDB")
        .clone();
    sqlx::query("INSERT INTO users (id, email) VALUES (7, 'bob@example.com')")
        .execute(&pool)
        .await
        .expect("insert user");
    let performed = perform(SendWelcome { user_id: 7 })
        .attempt(5)
        .cancel_before_start()
        .data(pool.clone())
        .await;
    assert_eq!(
        performed,
        Performed::Cancelled {
            error: "cancelled before sending".into()
        }
    );
    assert_eq!(sent_mail(&pool).await, []);
}
