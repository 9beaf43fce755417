use jobqueue::job;

#[job(key = "export:{order_ids}")]
async fn export_orders(order_ids: Vec<u64>) {
    let _ = order_ids;
}

fn main() {}
