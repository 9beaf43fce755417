use jobqueue::job;

#[job]
struct ExportOrder {
    order_id: u64,
}

fn main() {}
