//! What `#[job]` generates, checked at run time and without a database: the registration and
//! its options, a run from a JSON payload, payload errors, and the task keys.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use jobqueue::registry::{self, RunError};
use jobqueue::{job, Backoff, Job, JobContext, JobError};
use serde_json::json;

/// What one run of `export_order` saw: order_id, format, parts and the context's job id.
type Export = (u64, String, Vec<u32>, u64);

/// Every run of `export_order`, in order.
static EXPORTS: Mutex<Vec<Export>> = Mutex::new(Vec::new());

/// Exports one order.
#[job(
    name = "expansion_export",
    queue = "exports",
    max_attempts = 5,
    lease = "1m30s",
    timeout = "10m",
    priority = -3,
    backoff = "linear(10s, 10m)"
)]
async fn export_order(
    order_id: u64,
    ctx: JobContext,
    format: String,
    parts: Vec<u32>,
) -> Result<(), JobError> {
    EXPORTS
        .lock()
        .unwrap()
        .push((order_id, format, parts, ctx.id()));
    Ok(())
}

#[job(name = "expansion_plain")]
async fn plain(account: u64, labels: HashMap<String, String>) {
    let _ = (account, labels);
}

#[job(name = "expansion_keyed", key = "notify:{user_id}:{{{channel}}}")]
async fn notify(channel: String, user_id: u64) {
    let _ = (channel, user_id);
}

#[job(name = "expansion_long_key", key = "blob:{text}")]
async fn long_key(text: String) {
    let _ = text;
}

#[job(name = "expansion_failing", max_attempts = 1)]
async fn failing(reason: String) -> Result<(), String> {
    Err(reason)
}

#[job(
    name = "expansion_tick",
    cron = "0 */5 * * * *",
    backoff = "constant(1500ms)"
)]
async fn tick(batch: Option<u32>) {
    let _ = batch;
}

fn context() -> JobContext {
    JobContext::detached(41, "test-key")
}

#[test]
fn registration_carries_the_options_as_written() {
    let d = registry::lookup("expansion_export").expect("the job is registered");
    assert_eq!(d.kind(), "expansion_export");
    assert_eq!(d.type_name(), "macro_expansion::ExportOrder");
    let o = d.options();
    assert_eq!(o.queue, "exports");
    assert_eq!(o.max_attempts, 5);
    assert_eq!(o.lease, Duration::from_secs(90));
    assert_eq!(o.timeout, Some(Duration::from_secs(600)));
    assert_eq!(o.priority, -3);
    assert_eq!(
        o.backoff,
        Backoff::Linear {
            step: Duration::from_secs(10),
            max: Duration::from_secs(600)
        }
    );
    assert_eq!(o.cron, None);
    assert_eq!(*o, ExportOrder::OPTIONS);
    assert_eq!(ExportOrder::KIND, "expansion_export");
}

#[test]
fn omitted_options_are_the_defaults() {
    let d = registry::lookup("expansion_plain").expect("the job is registered");
    assert_eq!(*d.options(), jobqueue::JobOptions::DEFAULT);

    let tick = registry::lookup("expansion_tick").expect("the job is registered");
    assert_eq!(tick.options().cron, Some("0 */5 * * * *"));
    assert_eq!(
        tick.options().backoff,
        Backoff::Constant(Duration::from_millis(1500))
    );
    // A cron job's arguments can be built by the tick itself.
    assert_eq!(Tick::default().batch, None);
}

#[tokio::test]
async fn running_the_descriptor_calls_the_function_with_the_payload() {
    let d = registry::lookup("expansion_export").unwrap();
    let payload = json!({ "order_id": 7412, "format": "csv", "parts": [3, 1, 2] });
    d.run(payload, context()).await.expect("the run succeeds");
    let calls = EXPORTS.lock().unwrap();
    assert!(
        calls.contains(&(7412, "csv".to_owned(), vec![3, 1, 2], 41)),
        "{calls:?}"
    );
}

#[tokio::test]
async fn a_mismatched_payload_names_the_kind_and_the_field() {
    let d = registry::lookup("expansion_export").unwrap();
    let payload = json!({ "order_id": "7412", "format": "csv", "parts": [] });
    match d.run(payload, context()).await {
        Err(RunError::Payload(message)) => {
            assert!(message.contains("`expansion_export`"), "{message}");
            assert!(message.contains("order_id"), "{message}");
        }
        other => panic!("expected a payload error, got {other:?}"),
    }
}

#[tokio::test]
async fn the_function_error_comes_back_from_the_run() {
    let d = registry::lookup("expansion_failing").unwrap();
    match d.run(json!({ "reason": "disk full" }), context()).await {
        Err(RunError::Job(e)) => {
            assert_eq!(e.to_string(), "disk full");
            assert!(e.is_retryable());
        }
        other => panic!("expected the job's error, got {other:?}"),
    }
}

#[test]
fn derived_keys_follow_the_arguments() {
    let labels = HashMap::from([("a".to_owned(), "1".to_owned())]);
    let a = Plain {
        account: 1,
        labels: labels.clone(),
    };
    let same = Plain {
        account: 1,
        labels: labels.clone(),
    };
    let other = Plain { account: 2, labels };
    assert_eq!(a.task_key().unwrap(), same.task_key().unwrap());
    assert_ne!(a.task_key().unwrap(), other.task_key().unwrap());
    assert_eq!(
        a.task_key().unwrap(),
        jobqueue::key::derived_task_key("expansion_plain", &a).unwrap()
    );
}

#[test]
fn derived_key_is_pinned() {
    // A change of this value means a release derives other keys from the same arguments, so
    // a job enqueued again after an upgrade would not be recognised as a duplicate.
    let job = Plain {
        account: 7412,
        labels: HashMap::from([
            ("region".to_owned(), "eu".to_owned()),
            ("tier".to_owned(), "gold".to_owned()),
        ]),
    };
    assert_eq!(
        job.task_key().unwrap(),
        // SHA-256 of `{"account":7412,"labels":{"region":"eu","tier":"gold"}}`, first 128 bits.
        "expansion_plain:edeb52ee304aee2d003358262134e1fd"
    );
}

#[test]
fn key_template_renders_the_arguments() {
    let job = Notify {
        channel: "sms".into(),
        user_id: 3,
    };
    assert_eq!(job.task_key().unwrap(), "notify:3:{sms}");
}

#[test]
fn long_rendered_keys_are_hashed_to_fit() {
    let a = LongKey {
        text: "x".repeat(400) + "a",
    };
    let b = LongKey {
        text: "x".repeat(400) + "b",
    };
    let (a, b) = (a.task_key().unwrap(), b.task_key().unwrap());
    assert!(a.chars().count() <= 255, "{} chars", a.chars().count());
    assert!(a.starts_with("blob:xxx"), "{a}");
    assert_ne!(a, b);
}

#[tokio::test]
async fn the_function_is_still_callable_directly() {
    export_order(99, context(), "pdf".into(), vec![9])
        .await
        .unwrap();
    assert!(EXPORTS
        .lock()
        .unwrap()
        .contains(&(99, "pdf".to_owned(), vec![9], 41)));
    assert_eq!(failing("no".into()).await, Err("no".to_owned()));
}
