use std::rc::Rc;

use jobqueue::job;

#[job]
async fn export_order(order_id: u64, shared: Rc<String>) {
    let _ = (order_id, shared);
}

fn main() {}
