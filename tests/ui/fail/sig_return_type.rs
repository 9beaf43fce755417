use jobqueue::job;

#[job]
async fn count_rows(table: String) -> u64 {
    table.len() as u64
}

fn main() {}
