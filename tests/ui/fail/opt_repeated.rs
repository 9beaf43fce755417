use jobqueue::job;

#[job(queue = "exports", max_attempts = 3, queue = "imports")]
async fn export_order(order_id: u64) {
    let _ = order_id;
}

fn main() {}
