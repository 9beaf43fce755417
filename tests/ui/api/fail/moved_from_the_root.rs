// The root holds the everyday items only: what operators read, what job code uses beyond
// its context, the size bounds and the metrics live in their modules, not at the root.
use jobqueue::JobFilter;
use jobqueue::JobRecord;
use jobqueue::QueueStats;
use jobqueue::CancelReason;
use jobqueue::JobOutput;
use jobqueue::RateLimit;
use jobqueue::MAX_OUTPUT_BYTES;
use jobqueue::MetricsSnapshot;
use jobqueue::redact_url;
// One filter over jobs: the dashboard's former query type is gone.
use jobqueue::admin::JobQuery;

fn main() {}
