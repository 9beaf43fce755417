use jobqueue::job;

#[job]
async fn tuple((a, b): (u32, u32)) {
    let _ = (a, b);
}

#[job]
async fn wildcard(_: u32) {}

#[job]
async fn by_ref(ref name: String) {
    let _ = name;
}

// `mut` is fine.
#[job]
async fn mutable(mut count: u32) {
    count += 1;
    let _ = count;
}

fn main() {}
