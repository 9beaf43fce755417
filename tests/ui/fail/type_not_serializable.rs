use jobqueue::job;

pub struct Connection {
    pub url: String,
}

#[job]
async fn export_order(order_id: u64, connection: Connection) {
    let _ = (order_id, connection.url);
}

fn main() {}
