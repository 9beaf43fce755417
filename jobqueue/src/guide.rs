//! Guides: how to use jobqueue, one subject per page.
//!
//! Each page is a Markdown file of the repository's `docs/guide/` folder, shown here so that
//! it is read next to the API it describes; its Rust blocks are compiled as documentation
//! tests, so the code on every page builds against this release.
//!
//! | guide | what it covers |
//! |---|---|
//! | [Databases](databases) | MySQL, MariaDB and PostgreSQL: choosing one, what differs, how each is tested |
//! | [Getting started](getting_started) | adding jobqueue to a service that already has a database, migrations, TLS and a pool; one binary serving HTTP and running a worker |
//! | [Jobs and options](jobs_and_options) | `#[job]` and its options, what a job function may take and return |
//! | [Scheduling and periodic jobs](scheduling_and_periodic) | delays, start times, priorities, `cron` schedules |
//! | [Uniqueness](uniqueness) | task keys, how long a key blocks another enqueue, metadata |
//! | [Limits](limits) | concurrency and rate limits by key, across every worker |
//! | [Lifecycle and outputs](lifecycle_and_outputs) | a job's states, how an attempt ends, outputs, progress, the attempt history |
//! | [Exactly-once effects](exactly_once) | `complete_in`: a job's writes and its completion in one transaction |
//! | [Middleware](middleware) | wrapping every job run of a worker |
//! | [Testing](testing) | testing code that enqueues, and the jobs themselves |
//! | [Operations](operations) | the dashboard, metrics, log events, traces, pruning |
//! | [The `jobqueue` command](cli) | the operator's command line |
//! | [Deployment](deployment) | server requirements, grants, worker and pool settings, rolling upgrades, Kubernetes, sizing a fleet |
//! | [Guarantees](guarantees) | what holds, the tests that prove it, and what stays yours to get right |
//! | [Performance](performance) | what the benchmark measures and what to read from it |
//! | [FAQ](faq) | ordering, running twice, deploys, enqueueing from a transaction |

// Code on a page may define what it does not use (a middleware shown, then registered in
// the next block): dead code and unused variables are allowed, every other warning denied.
#![doc(test(attr(deny(warnings), allow(dead_code, unused_variables))))]

#[doc = include_str!("../docs/guide/databases.md")]
pub mod databases {}

#[doc = include_str!("../docs/guide/getting-started.md")]
pub mod getting_started {}

#[doc = include_str!("../docs/guide/jobs-and-options.md")]
pub mod jobs_and_options {}

#[doc = include_str!("../docs/guide/scheduling-and-periodic.md")]
pub mod scheduling_and_periodic {}

#[doc = include_str!("../docs/guide/uniqueness.md")]
pub mod uniqueness {}

#[doc = include_str!("../docs/guide/limits.md")]
pub mod limits {}

#[doc = include_str!("../docs/guide/lifecycle-and-outputs.md")]
pub mod lifecycle_and_outputs {}

#[doc = include_str!("../docs/guide/exactly-once.md")]
pub mod exactly_once {}

#[doc = include_str!("../docs/guide/middleware.md")]
pub mod middleware {}

#[doc = include_str!("../docs/guide/testing.md")]
pub mod testing {}

#[doc = include_str!("../docs/guide/operations.md")]
pub mod operations {}

#[doc = include_str!("../docs/guide/cli.md")]
pub mod cli {}

#[doc = include_str!("../docs/guide/deployment.md")]
pub mod deployment {}

#[doc = include_str!("../docs/guide/guarantees.md")]
pub mod guarantees {}

#[doc = include_str!("../docs/guide/performance.md")]
pub mod performance {}

#[doc = include_str!("../docs/guide/faq.md")]
pub mod faq {}
