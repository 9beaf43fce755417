//! The axum service of `axum_service.rs` on PostgreSQL, with one pool for the application and
//! the queue. It shows:
//!
//! - `Queue::from_pool` over the application's `PgPool`: one pool, one set of sessions;
//! - a handler that inserts a user and enqueues the welcome e-mail in one
//!   `Transaction<Postgres>` (`Queue::enqueue_in(&mut tx, ..)`): both commit or neither does;
//! - no wake-up call after the commit: on PostgreSQL the insert of a ready job notifies its
//!   queue's channel when the transaction commits, and the idle worker, waiting on `LISTEN`,
//!   claims it at once (a plain `INSERT` from any other program would wake it too);
//! - one shutdown for the HTTP server and the worker, on SIGTERM or Ctrl-C.
//!
//! Run it with `DATABASE_URL=postgres://user:pass@host/db cargo run -p examples --example
//! postgres_service` (or, with `DATABASE_URL` unset and `JOBQUEUE_EXAMPLES_BACKEND=postgres`,
//! on a throwaway PostgreSQL server) and try
//! `curl -X POST localhost:3000/signups -H 'content-type: application/json' -d '{"email": "ada@example.com"}'`,
//! or with `-- --demo` to have it send a request to itself, wait for the job, and stop itself.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use axum::extract::State;
use axum::http::StatusCode;
use axum::routing::post;
use axum::{Json, Router};
use jobqueue::{job, JobContext, JobError, Queue, Worker};
use serde::Deserialize;
use sqlx::postgres::PgPool;

/// Sends a new user the welcome e-mail (here: prints it).
#[job(queue = "mail", key = "welcome:{user_id}", max_attempts = 5)]
async fn send_welcome(ctx: JobContext, user_id: i64, email: String) -> Result<(), JobError> {
    println!(
        "[job] welcome e-mail sent to {email} (user {user_id}, attempt {})",
        ctx.attempt()
    );
    Ok(())
}

/// What the handlers share: the queue and the pool it was made from.
#[derive(Clone)]
struct AppState {
    queue: Queue,
    db: PgPool,
}

#[derive(Deserialize)]
struct SignUp {
    email: String,
}

async fn sign_up(
    State(app): State<AppState>,
    Json(signup): Json<SignUp>,
) -> Result<(StatusCode, Json<serde_json::Value>), (StatusCode, String)> {
    let internal = |e: &dyn std::fmt::Display| (StatusCode::INTERNAL_SERVER_ERROR, e.to_string());
    let mut tx = app.db.begin().await.map_err(|e| internal(&e))?;
    let user_id: i64 = sqlx::query_scalar("INSERT INTO users (email) VALUES ($1) RETURNING id")
        .bind(&signup.email)
        .fetch_one(&mut *tx)
        .await
        .map_err(|e| internal(&e))?;
    // In the same transaction: the user and the job that welcomes them commit together.
    let job = app
        .queue
        .enqueue_in(
            &mut tx,
            SendWelcome {
                user_id,
                email: signup.email,
            },
        )
        .await
        .map_err(|e| internal(&e))?;
    tx.commit().await.map_err(|e| internal(&e))?;
    Ok((
        StatusCode::CREATED,
        Json(serde_json::json!({ "user": user_id, "welcome_job": job.id() })),
    ))
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    examples::init_logging("warn,jobqueue_runtime=info");
    let demo = std::env::args().any(|a| a == "--demo");
    let url = examples::database_url("postgres_service").await?;
    if !url.starts_with("postgres") {
        anyhow::bail!(
            "postgres_service needs a PostgreSQL database: set DATABASE_URL=postgres://... \
             or JOBQUEUE_EXAMPLES_BACKEND=postgres"
        );
    }
    // The application's pool; the queue shares it (a worker at defaults also opens a small
    // pool of its own for lease renewals, and one session for LISTEN).
    // `postgres_pool_options` bounds transactions left idle, as the queue's own pool does.
    let db = jobqueue::postgres_pool_options()
        .max_connections(8)
        .connect(&url)
        .await?;
    let queue = Queue::from_pool(db.clone()).await?;
    queue.migrate().await?;
    sqlx::query("CREATE TABLE IF NOT EXISTS users (id BIGSERIAL PRIMARY KEY, email TEXT NOT NULL)")
        .execute(&db)
        .await?;

    let worker = Worker::builder(queue.clone()).queues(["mail"]).build()?;
    let worker_handle = worker.handle();
    let worker = tokio::spawn(worker.run());

    let app = Router::new()
        .route("/signups", post(sign_up))
        .with_state(AppState {
            queue: queue.clone(),
            db,
        });
    let port = if demo { 0 } else { 3000 };
    let listener = tokio::net::TcpListener::bind(("127.0.0.1", port)).await?;
    let addr = listener.local_addr()?;
    println!("listening on http://{addr}");
    let server = axum::serve(listener, app).with_graceful_shutdown(async move {
        jobqueue::shutdown_signal().await;
        println!("SIGTERM received: stopping the HTTP server and the worker");
        worker_handle.shutdown();
    });
    let demo = demo.then(|| tokio::spawn(run_demo(addr, queue)));
    server.await?;
    worker.await??;
    if let Some(demo) = demo {
        demo.await??;
    }
    println!("stopped cleanly");
    Ok(())
}

/// Signs a user up, waits for the welcome job, then stops the process with SIGTERM.
async fn run_demo(addr: SocketAddr, queue: Queue) -> anyhow::Result<()> {
    let result = async {
        let started = Instant::now();
        let (status, body) =
            examples::post_json(addr, "/signups", r#"{"email": "ada@example.com"}"#).await?;
        println!("POST /signups -> {status} {body}");
        let reply: serde_json::Value = serde_json::from_str(&body)?;
        let id = reply["welcome_job"]
            .as_u64()
            .ok_or_else(|| anyhow::anyhow!("no job id in {body}"))?;
        let job = queue.wait(id, Duration::from_secs(10)).await?;
        println!(
            "job {id}: {} after {} attempt(s), {} ms after the request",
            job.status.as_str(),
            job.attempts,
            started.elapsed().as_millis()
        );
        anyhow::Ok(())
    }
    .await;
    std::process::Command::new("kill")
        .arg("-TERM")
        .arg(std::process::id().to_string())
        .status()?;
    result
}
