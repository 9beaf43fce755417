use jobqueue::job;

struct Exporter;

impl Exporter {
    #[job]
    async fn export(&self, order_id: u64) {
        let _ = order_id;
    }
}

fn main() {}
