use std::sync::Arc;

use jobqueue::{job, Data, JobContext, Queue};

struct Config {
    greeting: String,
}

// Shared state in any position, a context between them, and serde attributes that move to
// the generated struct's fields.
#[job(queue = "mail")]
async fn send_mail(
    config: Data<Arc<Config>>,
    #[serde(rename = "to")] recipient: String,
    ctx: JobContext,
    #[serde(default)] copies: u32,
    queue: jobqueue::Data<Queue>,
) {
    let _ = (&config.greeting, recipient, ctx, copies, queue.metrics());
}

fn main() {
    // Debug and Clone are derived; the state is not a field.
    let job = SendMail {
        recipient: "ada@example.com".into(),
        copies: 2,
    };
    let copy = job.clone();
    let _ = format!("{copy:?}");
    let _ = <SendMail as jobqueue::Job>::DATA;
}
