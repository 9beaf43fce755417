use jobqueue::job;

#[job(queu = "exports", retries = 3)]
async fn export_order(order_id: u64) {
    let _ = order_id;
}

fn main() {}
