use jobqueue::job;

#[job]
async fn greet(name: &str, bytes: &[u8], tags: Vec<&'static str>) {
    let _ = (name, bytes, tags);
}

#[job]
async fn log(message: impl Into<String>) {
    let _ = message.into();
}

fn main() {}
