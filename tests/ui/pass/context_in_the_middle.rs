use jobqueue::{job, JobContext};

#[job]
async fn resize(width: u32, _ctx: JobContext, height: u32) {
    let _ = (width, height);
}

fn main() {
    let _job = Resize {
        width: 640,
        height: 480,
    };
    let _ = resize(640, JobContext::detached(1, "k"), 480);
}
