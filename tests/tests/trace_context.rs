//! Trace context across the queue (feature `opentelemetry`): a job's first attempt is a child
//! of the span that enqueued it, in the trace of the HTTP request that enqueued it; a retry is
//! a trace of its own, linked to that span. Spans are collected by the OpenTelemetry SDK's
//! in-memory exporter. One test per process: it installs the global subscriber.

use std::collections::HashMap;
use std::time::Duration;

use axum::extract::State;
use axum::http::HeaderMap;
use axum::routing::post;
use axum::Router;
use jobqueue::admin::JobFilter;
use jobqueue::{job, JobContext, JobError, JobStatus, Queue};
use opentelemetry::propagation::TextMapPropagator;
use opentelemetry::trace::{SpanId, TraceId, TracerProvider as _};
use opentelemetry_sdk::propagation::TraceContextPropagator;
use opentelemetry_sdk::trace::{InMemorySpanExporter, SdkTracerProvider, SpanData};
use tests::{fresh_queue_on, quick_worker, sql_text, start, stop, wait_for, wait_status, Backend};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tracing::Instrument;
use tracing_opentelemetry::OpenTelemetrySpanExt;
use tracing_subscriber::layer::SubscriberExt;

/// Fails its first attempt so that the second one shows how a retry is traced.
#[job(name = "trace_export", queue = "traced", backoff = "constant(10ms)")]
async fn export(ctx: JobContext, order: u64) -> Result<(), JobError> {
    let _ = order;
    if ctx.attempt() == 1 {
        return Err("first attempts fail".into());
    }
    Ok(())
}

/// `POST /exports`: continues the caller's `traceparent` header, as a traced service does,
/// and enqueues an export inside the request's span.
async fn create_export(State(queue): State<Queue>, headers: HeaderMap) -> String {
    let carrier: HashMap<String, String> = headers
        .iter()
        .filter_map(|(k, v)| Some((k.as_str().to_owned(), v.to_str().ok()?.to_owned())))
        .collect();
    let span = tracing::info_span!("POST /exports");
    let _ = span.set_parent(TraceContextPropagator::new().extract(&carrier));
    async move {
        let outcome = queue.enqueue(Export { order: 7 }).await.expect("enqueue");
        format!("{outcome:?}")
    }
    .instrument(span)
    .await
}

fn attribute(span: &SpanData, key: &str) -> Option<String> {
    span.attributes
        .iter()
        .find(|kv| kv.key.as_str() == key)
        .map(|kv| kv.value.to_string())
}

#[tokio::test(flavor = "multi_thread")]
async fn a_job_continues_the_trace_of_the_request_that_enqueued_it() {
    let exporter = InMemorySpanExporter::default();
    let provider = SdkTracerProvider::builder()
        .with_simple_exporter(exporter.clone())
        .build();
    let subscriber = tracing_subscriber::registry()
        .with(tracing_opentelemetry::layer().with_tracer(provider.tracer("trace_context")));
    tracing::subscriber::set_global_default(subscriber).expect("the only subscriber");

    // One subscriber per process: both databases in turn, each with a clean exporter.
    for backend in [Backend::MySql, Backend::Postgres] {
        exporter.reset();
        trace_round(backend, &exporter).await;
    }
}

/// A request enqueues a job on `backend`; its first attempt continues the request's trace,
/// its retry links to it.
async fn trace_round(backend: Backend, exporter: &InMemorySpanExporter) {
    let queue = fresh_queue_on(backend, "trace_context").await;
    let app = Router::new()
        .route("/exports", post(create_export))
        .with_state(queue.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("address");
    tokio::spawn(async move { axum::serve(listener, app).await });

    // The caller's trace: the request's span must join it, and the job after it.
    let caller_trace = TraceId::from_hex("4bf92f3577b34da6a3ce929d0e0e4736").unwrap();
    let mut stream = tokio::net::TcpStream::connect(addr).await.expect("connect");
    stream
        .write_all(
            b"POST /exports HTTP/1.1\r\nHost: test\r\nContent-Length: 0\r\nConnection: close\r\n\
              traceparent: 00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01\r\n\r\n",
        )
        .await
        .expect("send");
    let mut response = String::new();
    stream.read_to_string(&mut response).await.expect("read");
    assert!(response.starts_with("HTTP/1.1 200"), "{response}");
    assert!(response.contains("New("), "{response}");

    let stored = sql_text(
        &queue,
        "SELECT traceparent FROM job_queue WHERE kind = 'trace_export'",
        &[],
    )
    .await;
    let stored = stored.expect("the enqueue stored a traceparent");
    assert!(
        stored.starts_with("00-4bf92f3577b34da6a3ce929d0e0e4736-"),
        "{stored}"
    );

    let (handle, task) = start(quick_worker(&queue).queues(["traced"]).build().unwrap());
    let listed = queue
        .list(&JobFilter::default().kind("trace_export"), None, 1)
        .await
        .expect("list");
    let id = listed.jobs.first().expect("the job").id;
    wait_status(&queue, id, JobStatus::Done, Duration::from_secs(30)).await;
    // A job's span closes when its task ends, just after its outcome is handed to the writer.
    let spans = wait_for("both attempts' spans", Duration::from_secs(10), || {
        let spans = exporter.get_finished_spans().expect("spans");
        let jobs = spans.iter().filter(|s| s.name == "job").count();
        std::future::ready((jobs >= 2).then_some(spans))
    })
    .await;
    stop(&handle, task).await;

    let request = spans
        .iter()
        .find(|s| s.name == "POST /exports")
        .expect("the request's span");
    assert_eq!(request.span_context.trace_id(), caller_trace);
    assert_eq!(
        stored,
        format!(
            "00-{}-{}-01",
            request.span_context.trace_id(),
            request.span_context.span_id()
        ),
        "the stored context is the enqueuing span's"
    );
    let attempt = |n: &str| {
        spans
            .iter()
            .find(|s| s.name == "job" && attribute(s, "attempt").as_deref() == Some(n))
            .unwrap_or_else(|| panic!("no span of attempt {n} among {spans:#?}"))
    };
    let (first, second) = (attempt("1"), attempt("2"));
    assert_eq!(
        first.span_context.trace_id(),
        caller_trace,
        "the first attempt is in the request's trace"
    );
    assert_eq!(first.parent_span_id, request.span_context.span_id());
    assert_ne!(
        second.span_context.trace_id(),
        caller_trace,
        "a retry starts a trace of its own"
    );
    assert_eq!(second.parent_span_id, SpanId::INVALID);
    assert!(
        second
            .links
            .iter()
            .any(|l| l.span_context.trace_id() == caller_trace
                && l.span_context.span_id() == request.span_context.span_id()),
        "the retry links to the enqueuing span: {:?}",
        second.links
    );
}
