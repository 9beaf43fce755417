//! A web service that creates orders and exports each one in the background, with the job
//! enqueued in the same database transaction as the order (a transactional outbox): a
//! committed order always has its export job, a failed or rolled-back request leaves neither.
//! The worker runs inside the same binary and stops together with the HTTP server on SIGTERM
//! (or Ctrl-C): the server stops accepting, the worker finishes or hands back its jobs.
//!
//! `POST /orders` with `{"id": 1, "customer": "ada", "total_cents": 4200}` creates an order;
//! add `"reject": true` to make the handler fail after enqueuing, to see the rollback.
//! `GET /orders/1` shows the order and its export job's status.
//!
//! Run it with `cargo run -p examples --example outbox_service` and try it with curl
//! (it prints the address), or with `-- --demo` to have it send a few requests to itself,
//! print what it finds in the tables, and stop itself with SIGTERM.

use std::net::SocketAddr;
use std::time::Duration;

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::routing::{get, post};
use axum::{Json, Router};
use jobqueue::{job, Data, JobContext, JobError, Queue, Worker};
use serde::Deserialize;
use tokio_util::sync::CancellationToken;

/// Exports an order to the warehouse system (here: stamps it as exported).
#[job(queue = "exports", key = "export:{order_id}", max_attempts = 10)]
async fn export_order(
    ctx: JobContext,
    db: Data<sqlx::MySqlPool>,
    order_id: u64,
) -> Result<(), JobError> {
    // Idempotent by construction: running it twice leaves the same row.
    sqlx::query(
        "UPDATE orders SET exported_at = COALESCE(exported_at, UTC_TIMESTAMP(6)) WHERE id = ?",
    )
    .bind(order_id)
    .execute(&*db)
    .await?;
    println!(
        "exported order {order_id} (job {}, attempt {})",
        ctx.id(),
        ctx.attempt()
    );
    Ok(())
}

#[derive(Deserialize)]
struct NewOrder {
    id: u64,
    customer: String,
    total_cents: u64,
    #[serde(default)]
    reject: bool,
}

async fn create_order(
    State(queue): State<Queue>,
    Json(order): Json<NewOrder>,
) -> Result<(StatusCode, Json<serde_json::Value>), (StatusCode, String)> {
    let internal = |e: &dyn std::fmt::Display| (StatusCode::INTERNAL_SERVER_ERROR, e.to_string());
    let mut tx = queue
        .mysql_pool()
        .expect("the examples run on MySQL or MariaDB")
        .begin()
        .await
        .map_err(|e| internal(&e))?;
    // The job first, then the order: if the order cannot be inserted, the rollback takes
    // the job with it.
    let job = queue
        .enqueue_in(&mut tx, ExportOrder { order_id: order.id })
        .await
        .map_err(|e| internal(&e))?;
    let inserted = sqlx::query("INSERT INTO orders (id, customer, total_cents) VALUES (?, ?, ?)")
        .bind(order.id)
        .bind(&order.customer)
        .bind(order.total_cents)
        .execute(&mut *tx)
        .await;
    if let Err(e) = inserted {
        tx.rollback().await.map_err(|e| internal(&e))?;
        return Err((
            StatusCode::CONFLICT,
            format!("order {} not created: {e}", order.id),
        ));
    }
    if order.reject {
        tx.rollback().await.map_err(|e| internal(&e))?;
        return Err((
            StatusCode::UNPROCESSABLE_ENTITY,
            format!("order {} rejected; nothing kept", order.id),
        ));
    }
    tx.commit().await.map_err(|e| internal(&e))?;
    // The job became visible at commit: start it now rather than at the next poll.
    queue.wake_workers();
    Ok((
        StatusCode::CREATED,
        Json(serde_json::json!({ "order": order.id, "export_job": job.id() })),
    ))
}

async fn show_order(
    State(queue): State<Queue>,
    Path(id): Path<u64>,
) -> Result<Json<serde_json::Value>, StatusCode> {
    let row: Option<(String, Option<String>)> =
        sqlx::query_as("SELECT customer, CAST(exported_at AS CHAR) FROM orders WHERE id = ?")
            .bind(id)
            .fetch_optional(
                queue
                    .mysql_pool()
                    .expect("the examples run on MySQL or MariaDB"),
            )
            .await
            .map_err(|_| StatusCode::INTERNAL_SERVER_ERROR)?;
    let Some((customer, exported_at)) = row else {
        return Err(StatusCode::NOT_FOUND);
    };
    let job = queue
        .job_by_key(&format!("export:{id}"))
        .await
        .map_err(|_| StatusCode::INTERNAL_SERVER_ERROR)?;
    Ok(Json(serde_json::json!({
        "order": id,
        "customer": customer,
        "exported_at": exported_at,
        "export_job": job.map(|j| serde_json::json!({ "id": j.id, "status": j.status.as_str(), "attempts": j.attempts })),
    })))
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    // Logs go to stderr; RUST_LOG overrides the default level.
    examples::init_logging("warn,jobqueue_runtime=info");
    let demo = std::env::args().any(|a| a == "--demo");
    let queue = examples::connect("outbox_service").await?;
    sqlx::query(
        "CREATE TABLE IF NOT EXISTS orders (id BIGINT UNSIGNED PRIMARY KEY, customer VARCHAR(100) NOT NULL, \
         total_cents BIGINT UNSIGNED NOT NULL, exported_at DATETIME(6) NULL)",
    )
    .execute(queue.mysql_pool().expect("the examples run on MySQL or MariaDB"))
    .await?;

    // One signal stops both the HTTP server and the worker.
    let stop = CancellationToken::new();
    tokio::spawn({
        let stop = stop.clone();
        async move {
            jobqueue::shutdown_signal().await;
            println!("SIGTERM received: stopping the HTTP server and the worker");
            stop.cancel();
        }
    });

    let app = Router::new()
        .route("/orders", post(create_order))
        .route("/orders/{id}", get(show_order))
        .with_state(queue.clone());
    let port = if demo { 0 } else { 3000 };
    let listener = tokio::net::TcpListener::bind(("127.0.0.1", port)).await?;
    let addr = listener.local_addr()?;
    println!("listening on http://{addr}");
    let server = tokio::spawn({
        let stop = stop.clone();
        async move {
            axum::serve(listener, app)
                .with_graceful_shutdown(stop.cancelled_owned())
                .await
        }
    });
    // The export job takes the application's pool (here the queue's own) as `Data`.
    let worker = Worker::builder(queue.clone())
        .queues(["exports"])
        .data(
            queue
                .mysql_pool()
                .expect("the examples run on MySQL or MariaDB")
                .clone(),
        )
        .build()?;
    let worker = tokio::spawn({
        let stop = stop.clone();
        async move { worker.run_until(stop.cancelled_owned()).await }
    });

    if demo {
        run_demo(addr, &queue).await?;
        // Stop the way a deploy would: SIGTERM to this process.
        std::process::Command::new("kill")
            .arg("-TERM")
            .arg(std::process::id().to_string())
            .status()?;
    }
    server.await??;
    worker.await??;
    println!("stopped cleanly");
    Ok(())
}

async fn run_demo(addr: SocketAddr, queue: &Queue) -> anyhow::Result<()> {
    let created = send_order(addr, r#"{"id": 1, "customer": "ada", "total_cents": 4200}"#).await?;
    println!("POST order 1 -> {created}");
    let duplicate =
        send_order(addr, r#"{"id": 1, "customer": "ada", "total_cents": 4200}"#).await?;
    println!("POST order 1 again -> {duplicate}");
    let rejected = send_order(
        addr,
        r#"{"id": 2, "customer": "bob", "total_cents": 99, "reject": true}"#,
    )
    .await?;
    println!("POST order 2 (rejected) -> {rejected}");
    let created = send_order(addr, r#"{"id": 3, "customer": "cy", "total_cents": 1500}"#).await?;
    println!("POST order 3 -> {created}");

    // Wait (up to 10 s) for the two exports to run; the checks below tell what is missing.
    let _ =
        tokio::time::timeout(Duration::from_secs(10), examples::wait_until_done(queue, 2)).await;
    let orders: Vec<(u64, bool)> =
        sqlx::query_as("SELECT id, exported_at IS NOT NULL FROM orders ORDER BY id")
            .fetch_all(
                queue
                    .mysql_pool()
                    .expect("the examples run on MySQL or MariaDB"),
            )
            .await?;
    let jobs: Vec<(String, String)> = sqlx::query_as(
        "SELECT CAST(task_key AS CHAR), CAST(status AS CHAR) FROM job_queue ORDER BY id",
    )
    .fetch_all(
        queue
            .mysql_pool()
            .expect("the examples run on MySQL or MariaDB"),
    )
    .await?;
    println!("orders in the table (id, exported): {orders:?}");
    println!("jobs in the table (key, status): {jobs:?}");
    anyhow::ensure!(
        orders == vec![(1, true), (3, true)],
        "expected orders 1 and 3, both exported"
    );
    anyhow::ensure!(jobs.len() == 2, "expected exactly two export jobs");
    Ok(())
}

/// Posts an order to the service: its response's status and body, on one line.
async fn send_order(addr: SocketAddr, body: &str) -> anyhow::Result<String> {
    let (status, body) = examples::post_json(addr, "/orders", body).await?;
    Ok(format!("{status} {body}"))
}
