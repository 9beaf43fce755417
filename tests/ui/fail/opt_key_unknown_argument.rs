use jobqueue::{job, JobContext};

#[job(key = "export:{order}:{format}")]
async fn export_order(ctx: JobContext, order_id: u64, format: String) {
    let _ = (ctx, order_id, format);
}

#[job(key = "export:{ctx}")]
async fn context_in_key(ctx: JobContext, order_id: u64) {
    let _ = (ctx, order_id);
}

#[job(key = "export:{order_id")]
async fn unclosed(order_id: u64) {
    let _ = order_id;
}

fn main() {}
