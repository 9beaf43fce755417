//! Typed assertions on the jobs a test's code enqueued.

use std::fmt::{self, Write as _};
use std::future::{Future, IntoFuture};
use std::marker::PhantomData;
use std::pin::Pin;
use std::time::Duration;

use crate::job::Job;
use crate::model::{JobFilter, JobRecord};
use crate::queue::Queue;

/// How many jobs the readers here look at: a test enqueues far fewer.
const READ_LIMIT: u32 = 10_000;
/// How many jobs a failure message lists.
const LISTED: usize = 20;
/// How far a job's delay may be from the one asserted.
const DELAY_TOLERANCE: Duration = Duration::from_secs(1);

/// A job of kind `J` in the table: its arguments, decoded, and its row.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct EnqueuedJob<J> {
    /// Its arguments, as the generated struct.
    pub args: J,
    /// Its row: id, queue, priority, status, `run_at`...
    pub record: JobRecord,
}

impl<J> EnqueuedJob<J> {
    /// How long after its enqueue it was due (`run_at - created_at`): zero for a job due at
    /// once, the `delay` given at enqueue for a delayed one.
    pub fn delay(&self) -> Duration {
        delay_of(&self.record)
    }
}

/// Every job of kind `J` in the queue's table, whatever its status, in the order they were
/// enqueued, with their arguments decoded.
///
/// ```no_run
/// # extern crate jobqueue_runtime as jobqueue;
/// # use jobqueue::{Job, JobContext, JobError, JobOptions, Queue};
/// # #[derive(Debug, serde::Serialize, serde::Deserialize)]
/// # struct SendEmail { to: String }
/// # impl Job for SendEmail {
/// #     const KIND: &'static str = "send_email";
/// #     const OPTIONS: JobOptions = JobOptions::DEFAULT;
/// #     async fn run(self, _ctx: JobContext) -> Result<(), JobError> { Ok(()) }
/// # }
/// use jobqueue::testing::enqueued;
///
/// # async fn demo(queue: Queue) {
/// let recipients: Vec<String> = enqueued::<SendEmail>(&queue)
///     .await
///     .into_iter()
///     .map(|job| job.args.to)
///     .collect();
/// assert_eq!(recipients, ["ada@example.com"]);
/// # }
/// ```
///
/// # Panics
///
/// When the table cannot be read, or a job's arguments do not decode into `J` (its payload
/// and the error are in the message).
pub async fn enqueued<J: Job>(queue: &Queue) -> Vec<EnqueuedJob<J>> {
    let mut records = read(queue, &JobFilter::default().kind(J::KIND)).await;
    records.reverse();
    records
        .into_iter()
        .map(|record| {
            let args = J::deserialize(&record.payload).unwrap_or_else(|e| {
                panic!(
                    "job {} of kind `{}` has arguments that do not decode into `{}`: {e}; \
                     payload {}",
                    record.id,
                    J::KIND,
                    std::any::type_name::<J>(),
                    record.payload
                )
            });
            EnqueuedJob { args, record }
        })
        .collect()
}

/// Asserts that a job of kind `J` was enqueued, narrowed by the settings of
/// [`ExpectEnqueued`]; `.await` it to get the matching jobs (at least one).
///
/// A failure panics with a message listing what was enqueued instead:
///
/// ```text
/// expected a `send_email` job in queue `mail` matching the predicate; found none among the 2 jobs enqueued:
///   job 1: `send_email` in queue `default`, priority 0, due at once, ready, {"to":"ada@example.com"}
///   job 2: `ask_for_review` in queue `mail`, priority 0, delayed 3600s, scheduled, {"order_id":7}
/// ```
///
/// ```no_run
/// # extern crate jobqueue_runtime as jobqueue;
/// # use jobqueue::{Job, JobContext, JobError, JobOptions, Queue};
/// # #[derive(Debug, serde::Serialize, serde::Deserialize)]
/// # struct SendEmail { to: String }
/// # impl Job for SendEmail {
/// #     const KIND: &'static str = "send_email";
/// #     const OPTIONS: JobOptions = JobOptions::DEFAULT;
/// #     async fn run(self, _ctx: JobContext) -> Result<(), JobError> { Ok(()) }
/// # }
/// use std::time::Duration;
/// use jobqueue::testing::assert_enqueued;
///
/// # async fn demo(queue: Queue) {
/// assert_enqueued::<SendEmail>(&queue)
///     .matching(|email| email.to == "ada@example.com")
///     .queue("mail")
///     .delay(Duration::from_secs(3600))
///     .await;
/// # }
/// ```
pub fn assert_enqueued<J: Job>(queue: &Queue) -> ExpectEnqueued<J> {
    ExpectEnqueued::new(queue, true)
}

/// Asserts that no job of kind `J` was enqueued, narrowed by the settings of
/// [`ExpectEnqueued`]; a failure lists the jobs that match:
///
/// ```text
/// expected no `send_email` job matching the predicate; found 1:
///   job 3: `send_email` in queue `default`, priority 0, due at once, ready, {"to":"bob@example.com"}
/// ```
pub fn refute_enqueued<J: Job>(queue: &Queue) -> ExpectEnqueued<J> {
    ExpectEnqueued::new(queue, false)
}

type Predicate<J> = Box<dyn Fn(&J) -> bool + Send + Sync>;

/// What [`assert_enqueued`] or [`refute_enqueued`] looks for: a kind, and optionally a
/// predicate on the arguments, a queue, a priority and a delay. `.await` it.
#[must_use = "the assertion is made when it is awaited"]
pub struct ExpectEnqueued<J> {
    queue: Queue,
    expect_some: bool,
    predicate: Option<Predicate<J>>,
    in_queue: Option<String>,
    priority: Option<i16>,
    delay: Option<Duration>,
    kind: PhantomData<fn() -> J>,
}

impl<J: Job> ExpectEnqueued<J> {
    fn new(queue: &Queue, expect_some: bool) -> Self {
        ExpectEnqueued {
            queue: queue.clone(),
            expect_some,
            predicate: None,
            in_queue: None,
            priority: None,
            delay: None,
            kind: PhantomData,
        }
    }

    /// Only jobs whose arguments satisfy `predicate`.
    pub fn matching(mut self, predicate: impl Fn(&J) -> bool + Send + Sync + 'static) -> Self {
        self.predicate = Some(Box::new(predicate));
        self
    }

    /// Only jobs of this queue.
    pub fn queue(mut self, queue: impl Into<String>) -> Self {
        self.in_queue = Some(queue.into());
        self
    }

    /// Only jobs of this priority.
    pub fn priority(mut self, priority: i16) -> Self {
        self.priority = Some(priority);
        self
    }

    /// Only jobs due this long after their enqueue (`run_at - created_at`), within a second:
    /// `Duration::ZERO` for jobs due at once.
    pub fn delay(mut self, delay: Duration) -> Self {
        self.delay = Some(delay);
        self
    }

    /// Makes the assertion: the matching jobs, or a message saying what was found instead.
    async fn check(self) -> Result<Vec<EnqueuedJob<J>>, String> {
        let jobs = enqueued::<J>(&self.queue).await;
        let matching: Vec<EnqueuedJob<J>> = jobs.into_iter().filter(|j| self.accepts(j)).collect();
        let what = self.describe();
        if self.expect_some {
            if !matching.is_empty() {
                return Ok(matching);
            }
            let mut all = read(&self.queue, &JobFilter::default()).await;
            all.reverse();
            let mut message = if all.is_empty() {
                format!("expected {what}; found no job enqueued at all")
            } else {
                format!(
                    "expected {what}; found none among the {} jobs enqueued:",
                    all.len()
                )
            };
            list(&mut message, all.iter());
            Err(message)
        } else {
            if matching.is_empty() {
                return Ok(matching);
            }
            let mut message = format!("expected no {what}; found {}:", matching.len());
            list(&mut message, matching.iter().map(|j| &j.record));
            Err(message)
        }
    }

    fn accepts(&self, job: &EnqueuedJob<J>) -> bool {
        let r = &job.record;
        self.in_queue.as_ref().is_none_or(|q| *q == r.queue)
            && self.priority.is_none_or(|p| p == r.priority)
            && self
                .delay
                .is_none_or(|d| job.delay().abs_diff(d) <= DELAY_TOLERANCE)
            && self.predicate.as_ref().is_none_or(|p| p(&job.args))
    }

    /// `a `kind` job in queue `q`, with priority 5, delayed 60s, matching the predicate`.
    fn describe(&self) -> String {
        let mut parts = Vec::new();
        if let Some(q) = &self.in_queue {
            parts.push(format!("in queue `{q}`"));
        }
        if let Some(p) = self.priority {
            parts.push(format!("with priority {p}"));
        }
        if let Some(d) = self.delay {
            parts.push(if d.is_zero() {
                "due at once".to_owned()
            } else {
                format!("delayed {d:?} (within 1s)")
            });
        }
        if self.predicate.is_some() {
            parts.push("matching the predicate".to_owned());
        }
        let article = if self.expect_some { "a " } else { "" };
        let mut text = format!("{article}`{}` job", J::KIND);
        if !parts.is_empty() {
            text.push(' ');
            text.push_str(&parts.join(", "));
        }
        text
    }
}

impl<J: Job> IntoFuture for ExpectEnqueued<J> {
    type Output = Vec<EnqueuedJob<J>>;
    type IntoFuture = Pin<Box<dyn Future<Output = Self::Output> + Send>>;

    fn into_future(self) -> Self::IntoFuture {
        Box::pin(async move {
            self.check()
                .await
                .unwrap_or_else(|message| panic!("{message}"))
        })
    }
}

impl<J> fmt::Debug for ExpectEnqueued<J> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ExpectEnqueued")
            .field("expect_some", &self.expect_some)
            .field("predicate", &self.predicate.is_some())
            .field("queue", &self.in_queue)
            .field("priority", &self.priority)
            .field("delay", &self.delay)
            .finish_non_exhaustive()
    }
}

/// The jobs `filter` selects, newest first.
async fn read(queue: &Queue, filter: &JobFilter) -> Vec<JobRecord> {
    queue
        .list(filter, None, READ_LIMIT)
        .await
        .map(|page| page.jobs)
        .unwrap_or_else(|e| panic!("cannot read the enqueued jobs: {e}"))
}

fn delay_of(r: &JobRecord) -> Duration {
    (r.run_at - r.created_at).to_std().unwrap_or(Duration::ZERO)
}

/// One line per job, at most [`LISTED`], then how many more.
fn list<'a>(out: &mut String, records: impl ExactSizeIterator<Item = &'a JobRecord>) {
    let total = records.len();
    for r in records.take(LISTED) {
        let delay = delay_of(r);
        let due = if delay.is_zero() {
            "due at once".to_owned()
        } else {
            format!("delayed {delay:?}")
        };
        let _ = write!(
            out,
            "\n  job {}: `{}` in queue `{}`, priority {}, {due}, {}, {}",
            r.id, r.kind, r.queue, r.priority, r.status, r.payload
        );
    }
    if total > LISTED {
        let _ = write!(out, "\n  ... and {} more", total - LISTED);
    }
}
