// The crate under another name, as a renamed dependency (`jq = { package = "jobqueue" }`)
// would give it: the expansion must reach the runtime through `jq` alone.
extern crate jobqueue as jq;

#[jq::job(crate = "jq", queue = "renamed", backoff = "constant(5s)")]
async fn renamed(count: u32) -> Result<(), jq::JobError> {
    let _ = count;
    Ok(())
}

fn main() {
    use jq::Job;
    assert_eq!(Renamed::OPTIONS.queue, "renamed");
    assert!(jq::registry::lookup("renamed").is_some());
}
