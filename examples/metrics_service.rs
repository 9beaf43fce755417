//! A service that exposes the queue's metrics at `GET /metrics` in the Prometheus text format,
//! through `metrics-exporter-prometheus`: the job counters and the duration histogram labelled
//! by `queue` and `kind`, and the queue gauges (`jobqueue_queue_jobs{queue,status}`, the age
//! of the oldest ready job) that the worker refreshes every 5 seconds.
//!
//! `POST /images/{n}` enqueues `n` image jobs (each takes 200 ms; every tenth one fails for
//! good), so the counters move and the gauges show a queue that waits and runs.
//!
//! Run it with `cargo run -p examples --example metrics_service` (it prints its address;
//! `PORT` picks the port, default 3000), then `curl -X POST http://127.0.0.1:3000/images/50`
//! and `curl http://127.0.0.1:3000/metrics`. SIGTERM or Ctrl-C stops it.

use std::time::Duration;

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::routing::{get, post};
use axum::Router;
use jobqueue::{job, JobError, Queue, Worker};
use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusHandle};
use tokio_util::sync::CancellationToken;

/// Makes a thumbnail of an image (here: waits 200 ms); every tenth image is corrupt.
#[job(queue = "images", max_attempts = 1)]
async fn make_thumbnail(image: u64) -> Result<(), JobError> {
    tokio::time::sleep(Duration::from_millis(200)).await;
    if image % 10 == 9 {
        return Err(JobError::permanent(format!("image {image} is corrupt")));
    }
    Ok(())
}

async fn metrics(State((_, prometheus)): State<(Queue, PrometheusHandle)>) -> String {
    prometheus.render()
}

async fn enqueue_images(
    State((queue, _)): State<(Queue, PrometheusHandle)>,
    Path(n): Path<u64>,
) -> Result<String, (StatusCode, String)> {
    let base = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default()
        .as_micros() as u64
        * 1000;
    for i in 0..n {
        queue
            .enqueue(MakeThumbnail { image: base + i })
            .await
            .map_err(|e| (StatusCode::INTERNAL_SERVER_ERROR, e.to_string()))?;
    }
    Ok(format!("enqueued {n} images\n"))
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    examples::init_logging("warn");
    // Installed before the worker starts, so the runtime's metrics land in it from the start.
    let prometheus = PrometheusBuilder::new().install_recorder()?;
    let queue = examples::connect("metrics_service").await?;

    let stop = CancellationToken::new();
    tokio::spawn({
        let stop = stop.clone();
        async move {
            jobqueue::shutdown_signal().await;
            stop.cancel();
        }
    });

    let app = Router::new()
        .route("/metrics", get(metrics))
        .route("/images/{n}", post(enqueue_images))
        .with_state((queue.clone(), prometheus));
    let port: u16 = std::env::var("PORT")
        .ok()
        .and_then(|p| p.parse().ok())
        .unwrap_or(3000);
    let listener = tokio::net::TcpListener::bind(("127.0.0.1", port)).await?;
    println!("listening on http://{}", listener.local_addr()?);
    let server = tokio::spawn({
        let stop = stop.clone();
        async move {
            axum::serve(listener, app)
                .with_graceful_shutdown(stop.cancelled_owned())
                .await
        }
    });
    let worker = Worker::builder(queue)
        .queues(["images"])
        .concurrency(2)
        .build()?;
    worker.run_until(stop.cancelled_owned()).await?;
    server.await??;
    Ok(())
}
