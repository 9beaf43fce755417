use jobqueue::{job, Job};

#[job]
async fn cleanup() {}

fn main() {
    assert_eq!(Cleanup::KIND, "cleanup");
    assert_eq!(serde_json::to_string(&Cleanup {}).unwrap(), "{}");
    let _ = cleanup();
}
