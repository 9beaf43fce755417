//! `hold-test-server`: starts a private test server (`jobqueue::testing::TestServer`), prints
//! `READY <port> <server pid> <folder>` and waits to be killed. `tests/tests/test_server.rs`
//! kills it with SIGKILL, which runs no destructor, to show that the server and its folder
//! go away all the same.
//!
//! ```text
//! cargo run -p tests --bin hold-test-server
//! ```

use std::time::Duration;

use jobqueue::testing::TestServer;

fn main() {
    let server = TestServer::start().unwrap_or_else(|e| panic!("{e}"));
    println!(
        "READY {} {} {}",
        server.port().expect("a private server has a port"),
        server.server_pid().expect("a private server has a process"),
        server
            .dir()
            .expect("a private server has a folder")
            .display(),
    );
    // Killed long before this; the bound keeps a stray helper from lingering.
    std::thread::sleep(Duration::from_secs(120));
}
