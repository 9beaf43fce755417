use jobqueue::job;

#[job]
async fn export<T: serde::Serialize>(item: T) {
    let _ = item;
}

#[job]
async fn export_where(item: u64)
where
    u64: Copy,
{
    let _ = item;
}

fn main() {}
