use jobqueue::job;

#[derive(serde::Serialize, serde::Deserialize)]
pub struct Region {
    pub code: String,
}

#[job(cron = "0 0 * * * *")]
async fn hourly_report(region: Region, verbose: bool) {
    let _ = (region.code, verbose);
}

fn main() {}
