//! One binary that serves HTTP with axum and runs the jobs its handlers enqueue, stopped by
//! one signal. It shows:
//!
//! - an `AppState` holding the [`Queue`] and the application's own pool;
//! - a handler that writes a row and enqueues its job in one transaction of that pool
//!   (`Queue::enqueue_in`), then wakes the worker after the commit (`Queue::wake_workers`);
//! - a middleware around every job run (`WorkerBuilder::middleware`) that times each run
//!   and reports each failure, where a service would call its error tracker;
//! - one shutdown: SIGTERM (or Ctrl-C) stops the HTTP server gracefully (it stops accepting
//!   and finishes the requests in flight) and, at the same moment, the worker through its
//!   `WorkerHandle` (it stops claiming, lets its jobs finish, hands back what does not).
//!
//! `POST /signups` with `{"email": "ada@example.com"}` signs a user up and enqueues the
//! welcome e-mail, which fails at its first attempt (a busy mail server, simulated) and is
//! sent at the second.
//!
//! Run it with `cargo run -p examples --example axum_service` and try it with
//! `curl -X POST localhost:3000/signups -H 'content-type: application/json' -d '{"email": "ada@example.com"}'`,
//! or with `-- --demo` to have it send a request to itself, wait for the job, and stop
//! itself with SIGTERM.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use axum::extract::State;
use axum::http::StatusCode;
use axum::routing::post;
use axum::{Json, Router};
use jobqueue::middleware::{JobRunInfo, Next, RunOutcome, RunResult};
use jobqueue::{job, JobContext, JobError, Middleware, Queue, Worker};
use serde::Deserialize;
use sqlx::mysql::{MySqlPool, MySqlPoolOptions};

/// Sends a new user the welcome e-mail (here: prints it).
#[job(
    queue = "mail",
    key = "welcome:{user_id}",
    max_attempts = 5,
    backoff = "constant(100ms)"
)]
async fn send_welcome(ctx: JobContext, user_id: u64, email: String) -> Result<(), JobError> {
    if ctx.attempt() == 1 {
        return Err("mail server busy, try again later".into());
    }
    println!(
        "[job] welcome e-mail sent to {email} (user {user_id}, attempt {})",
        ctx.attempt()
    );
    Ok(())
}

/// Times every job run, and reports every failure.
struct Observe;

impl Middleware for Observe {
    async fn call(&self, job: &JobRunInfo, next: Next<'_>) -> RunResult {
        let started = Instant::now();
        let result = next.run().await;
        let took = started.elapsed();
        let run = format!(
            "{} #{} attempt {} of {}",
            job.kind(),
            job.id(),
            job.attempt(),
            job.max_attempts()
        );
        match result.outcome() {
            RunOutcome::Succeeded => println!("[middleware] {run} succeeded in {took:?}"),
            // An error tracker would get `error.error()`, the job's error with its sources.
            RunOutcome::Failed(error) => {
                println!("[middleware] reporting: {run} failed in {took:?}: {error}")
            }
            other => println!("[middleware] reporting: {run} ended in {took:?}: {other:?}"),
        }
        result
    }
}

/// What the handlers share.
#[derive(Clone)]
struct AppState {
    queue: Queue,
    /// The application's own pool, for its own tables.
    db: MySqlPool,
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
    let user_id = sqlx::query("INSERT INTO users (email) VALUES (?)")
        .bind(&signup.email)
        .execute(&mut *tx)
        .await
        .map_err(|e| internal(&e))?
        .last_insert_id();
    // In the same transaction: the user and the job that welcomes them commit together, or
    // neither does.
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
    // The job became visible at the commit: start it now rather than at the next poll.
    app.queue.wake_workers();
    Ok((
        StatusCode::CREATED,
        Json(serde_json::json!({ "user": user_id, "welcome_job": job.id() })),
    ))
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    // Logs go to stderr; RUST_LOG overrides the default level.
    examples::init_logging("warn,jobqueue_runtime=info");
    let demo = std::env::args().any(|a| a == "--demo");
    let url = examples::database_url("axum_service").await?;
    let queue = Queue::connect(&url).await?;
    queue.migrate().await?;
    let db = MySqlPoolOptions::new()
        .max_connections(5)
        .connect(&url)
        .await?;
    sqlx::query(
        "CREATE TABLE IF NOT EXISTS users (id BIGINT UNSIGNED AUTO_INCREMENT PRIMARY KEY, \
         email VARCHAR(200) NOT NULL)",
    )
    .execute(&db)
    .await?;

    let worker = Worker::builder(queue.clone())
        .queues(["mail"])
        .middleware(Observe)
        .build()?;
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
    // The one shutdown: the signal ends the server's graceful shutdown future, which tells
    // the worker too. A request still in flight may enqueue a job after the worker stopped
    // claiming: the job waits, `ready`, for the next worker.
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

/// Signs a user up through the HTTP server, waits for the welcome job, then stops the
/// process the way a deploy would: SIGTERM.
async fn run_demo(addr: SocketAddr, queue: Queue) -> anyhow::Result<()> {
    let result = async {
        let (status, body) =
            examples::post_json(addr, "/signups", r#"{"email": "ada@example.com"}"#).await?;
        println!("POST /signups -> {status} {body}");
        let reply: serde_json::Value = serde_json::from_str(&body)?;
        let id = reply["welcome_job"]
            .as_u64()
            .ok_or_else(|| anyhow::anyhow!("no job id in {body}"))?;
        // Woken by the worker's outcome write, in this process.
        let job = queue.wait(id, Duration::from_secs(10)).await?;
        println!(
            "job {id}: {} after {} attempts",
            job.status.as_str(),
            job.attempts
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
