use jobqueue::{job, Data};

struct Client;

#[job]
async fn fetch_page(client: Data<Client>, url: String) {
    let _ = (client, url);
}

fn main() {}
