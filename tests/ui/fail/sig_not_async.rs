use jobqueue::job;

#[job]
fn export_order(order_id: u64) {
    let _ = order_id;
}

fn main() {}
