// The protocol's steps, the runtime's plumbing and the launcher's own helpers are not part
// of `jobqueue`'s API: none of these paths may resolve.
use jobqueue::store::Store;
use jobqueue::store::Finish;
use jobqueue::registry::RunFn;
use jobqueue::registry::CronPayloadFn;
use jobqueue::testing::find_server_binary;
use jobqueue::testing::ServerBinary;

fn main() {}
