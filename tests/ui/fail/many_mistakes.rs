use jobqueue::job;

// Every mistake is reported in one build, and the function itself still compiles: the call
// in `main` gives no error of its own.
#[job(
    queue = "exports",
    max_attempt = 5,
    lease = "forever",
    key = "{missing}"
)]
fn export_order(order_id: u64, name: &str) {
    let _ = (order_id, name);
}

fn main() {
    export_order(1, "x");
}
