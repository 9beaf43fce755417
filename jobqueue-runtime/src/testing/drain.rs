//! Running every due job of some queues in the test's own task, one after another, until
//! none is left.

use std::collections::BTreeMap;
use std::future::{Future, IntoFuture};
use std::pin::Pin;
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use crate::data::DataMap;
use crate::error::{Error, Result};
use crate::job::JobContext;
use crate::model::{Claimed, Finish, JobFilter, JobStatus};
use crate::queue::Queue;
use crate::registry::Registry;
use crate::worker::execute::run_one;
use crate::worker::middleware::Chain;
use crate::worker::outcome::{decide, Outcome};

/// How many runs a drain makes by default before it gives up.
pub const DEFAULT_MAX_RUNS: u64 = 1000;

/// Runs every due job of some queues in the test's own task, one at a time, until none is
/// left, and returns what happened ([`DrainSummary`]). See [`Drain`] for the settings.
///
/// Each job is claimed and recorded as a worker does it (the same claim, the same decision
/// between done, retry, failed and cancelled, the same fenced writes), so the rows end as a
/// worker would leave them. Jobs that the drained jobs enqueue are drained too. Without
/// [`Drain::with_scheduled`], delayed jobs and retries not yet due stay `scheduled`.
///
/// ```no_run
/// # extern crate jobqueue_runtime as jobqueue;
/// # async fn demo(queue: jobqueue::Queue) -> jobqueue::Result<()> {
/// use jobqueue::testing::drain;
///
/// let summary = drain(&queue).queues(["mail"]).with_scheduled().await?;
/// assert_eq!((summary.total.done, summary.total.failed), (3, 0));
/// # Ok(()) }
/// ```
pub fn drain(queue: &Queue) -> Drain {
    Drain {
        queue: queue.clone(),
        queues: None,
        data: DataMap::default(),
        with_scheduled: false,
        max_runs: DEFAULT_MAX_RUNS,
    }
}

/// A drain to run, from [`drain`]: `.await` it (or call [`Drain::run`]).
#[must_use = "a `Drain` runs nothing until it is awaited"]
pub struct Drain {
    queue: Queue,
    queues: Option<Vec<String>>,
    data: DataMap,
    with_scheduled: bool,
    max_runs: u64,
}

/// What a drain did, per outcome: every run counts once, in the status it left its job in.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct DrainCounts {
    /// Runs that succeeded (`done`).
    pub done: u64,
    /// Runs that failed with attempts left (back to `scheduled`; run again by a drain
    /// [`with_scheduled`](Drain::with_scheduled)).
    pub retried: u64,
    /// Runs that failed for good (`failed`).
    pub failed: u64,
    /// Runs that ended `cancelled`.
    pub cancelled: u64,
    /// Runs that snoozed ([`JobError::snooze`](crate::JobError::snooze)): back to
    /// `scheduled` without spending an attempt.
    pub snoozed: u64,
}

impl DrainCounts {
    /// Every run counted.
    pub fn runs(&self) -> u64 {
        self.done + self.retried + self.failed + self.cancelled + self.snoozed
    }

    fn count(&mut self, (status, snoozed): (JobStatus, bool)) {
        match status {
            JobStatus::Done => self.done += 1,
            JobStatus::Failed => self.failed += 1,
            JobStatus::Cancelled => self.cancelled += 1,
            _ if snoozed => self.snoozed += 1,
            _ => self.retried += 1,
        }
    }
}

/// What [`drain`] did: its runs by outcome, in all and per kind.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct DrainSummary {
    /// Every run.
    pub total: DrainCounts,
    /// The runs of each kind, by kind name.
    pub kinds: BTreeMap<String, DrainCounts>,
}

impl DrainSummary {
    /// The runs of one kind (all zero when it did not run).
    pub fn kind(&self, kind: &str) -> DrainCounts {
        self.kinds.get(kind).copied().unwrap_or_default()
    }
}

impl Drain {
    /// The queues to drain, in the order they are served (default: the queues of every
    /// kind registered in this binary). Jobs enqueued into another queue with
    /// [`EnqueueOptions::queue`](crate::EnqueueOptions::queue) need their queue named here.
    pub fn queues<I, S>(mut self, queues: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.queues = Some(queues.into_iter().map(Into::into).collect());
        self
    }

    /// Shared state for the jobs' [`Data<T>`](crate::Data) parameters, as
    /// [`WorkerBuilder::data`](crate::WorkerBuilder::data) gives it. As a worker does, the
    /// drain gives every job its [`Queue`] by itself.
    pub fn data<T: Send + Sync + 'static>(mut self, value: T) -> Self {
        self.data.insert(value);
        self
    }

    /// Moves time forward for the drained queues: whenever no job is due, every `scheduled`
    /// one (delayed at enqueue, or waiting for a retry) is made due now, and run, and the
    /// rate windows that `blocked` jobs wait for pass, so that they run too. The drain then
    /// ends only when every job has finished: done, failed or cancelled.
    pub fn with_scheduled(mut self) -> Self {
        self.with_scheduled = true;
        self
    }

    /// The most runs the drain makes (default [`DEFAULT_MAX_RUNS`]): a job that enqueues
    /// another without end is stopped with an error naming this bound.
    pub fn max_runs(mut self, max_runs: u64) -> Self {
        self.max_runs = max_runs;
        self
    }

    /// Runs the drain.
    ///
    /// # Errors
    ///
    /// A database error; an invalid queue name; [`Error::Testing`] when jobs are still due
    /// after `max_runs` runs, when jobs of the drained queues are left `blocked` by a limit
    /// (a rate limit without [`with_scheduled`](Self::with_scheduled), or a concurrency slot
    /// held by a job the drain did not run; the error names them and their key), or when a job cannot be run by this binary (its kind is not
    /// registered, or its payload does not fit the kind's arguments: it is put back, as a
    /// worker would, and the drain stops there).
    pub async fn run(self) -> Result<DrainSummary> {
        let registry = Registry::load()?;
        let queues = match self.queues {
            Some(queues) => queues,
            None => {
                let mut queues: Vec<String> = registry
                    .kinds()
                    .iter()
                    .map(|d| d.options().queue.to_owned())
                    .collect();
                queues.sort();
                queues.dedup();
                queues
            }
        };
        for q in &queues {
            crate::key::validate_queue(q)?;
        }
        let mut data = self.data;
        if !data.contains_type::<Queue>() {
            data.insert(self.queue.clone());
        }
        let store = self.queue.store();
        let owner = format!(
            "jobqueue-testing-drain:{}:{:08x}",
            std::process::id(),
            rand::random::<u32>()
        );
        let mut summary = DrainSummary::default();
        loop {
            // Due delayed jobs (and, moving time forward, all of them) become ready, as
            // maintenance would make them.
            if self.with_scheduled {
                for q in &queues {
                    store.bring_forward(q).await?;
                }
            }
            while store.promote(1000).await? > 0 {}
            let mut ran = false;
            for q in &queues {
                if summary.total.runs() >= self.max_runs {
                    let due = self
                        .queue
                        .count(
                            &JobFilter::default()
                                .queue(q.clone())
                                .status(JobStatus::Ready),
                        )
                        .await?;
                    if due > 0 {
                        return Err(Error::Testing(format!(
                            "drain stopped after {} runs (its bound) with {due} jobs of queue \
                             `{q}` still ready: a job that enqueues another without end? \
                             If the work is finite, raise the bound with `.max_runs(n)`",
                            self.max_runs
                        )));
                    }
                    continue;
                }
                let Some(claimed) = store.claim(q, &owner, 1).await?.pop() else {
                    continue;
                };
                let kind = claimed.kind.clone();
                let status = run_claimed(&store, &owner, &registry, &data, claimed).await?;
                summary.total.count(status);
                summary.kinds.entry(kind).or_default().count(status);
                ran = true;
                // Queues are served in their order: start again from the first.
                break;
            }
            if ran {
                continue;
            }
            // Nothing due: wake blocked jobs as maintenance would (a slot freed without a
            // wake), and, moving time forward, let the rate windows they wait for pass.
            let mut woken = store.limits_pass().await?.1;
            if self.with_scheduled {
                let mut freed = 0;
                for q in &queues {
                    freed += store.free_rate_slots(q).await?;
                }
                if freed > 0 {
                    woken += store.limits_pass().await?.1;
                }
            }
            if woken > 0 {
                continue;
            }
            return match left_blocked(&store, &queues, self.with_scheduled).await? {
                Some(error) => Err(error),
                None => Ok(summary),
            };
        }
    }
}

/// The error of a drain that ends with jobs of its queues still `blocked` by a limit.
async fn left_blocked(
    store: &crate::store::Store,
    queues: &[String],
    with_scheduled: bool,
) -> Result<Option<Error>> {
    const SHOWN: u32 = 5;
    let mut jobs = Vec::new();
    for q in queues {
        for (id, kind, key) in store.blocked_in_queue(q, SHOWN).await? {
            let waits = match key.as_deref() {
                Some(k) if k.starts_with("r:") => format!("the rate key \"{}\"", &k[2..]),
                Some(k) if k.starts_with("c:") => {
                    format!("a slot of the concurrency key \"{}\"", &k[2..])
                }
                _ => "a slot of its limit".to_owned(),
            };
            jobs.push(format!(
                "job {id} (`{kind}`, queue `{q}`) waits for {waits}"
            ));
        }
    }
    if jobs.is_empty() {
        return Ok(None);
    }
    jobs.truncate(SHOWN as usize);
    let hint = if with_scheduled {
        "a concurrency slot is held by a job this drain did not run (a worker on the test \
         database, or a job left `running`): finish or cancel that job"
    } else {
        "a rate limit holds them until its window passes: drain `.with_scheduled()` to move \
         time forward, or assert on them as `blocked`"
    };
    Ok(Some(Error::Testing(format!(
        "drain ended with jobs still blocked by their limits: {}; {hint}",
        jobs.join("; ")
    ))))
}

/// Runs one claimed job and writes its outcome; returns the status written.
async fn run_claimed(
    store: &crate::store::Store,
    owner: &str,
    registry: &Registry,
    data: &DataMap,
    c: Claimed,
) -> Result<(JobStatus, bool)> {
    let ctx = JobContext::builder(c.id, c.task_key.clone())
        .max_attempts(c.max_attempts)
        .attempt(c.attempt)
        .kind(c.kind.clone())
        .queue(c.queue.clone())
        .data_map(data.clone())
        .build();
    let descriptor = registry.get(&c.kind);
    let ran = run_one(
        descriptor,
        c.payload,
        ctx.clone(),
        Duration::ZERO,
        CancellationToken::new(),
        registry,
        (&Chain::default(), None),
    )
    .await;
    let lost = || {
        Error::Testing(format!(
            "job {} was changed by someone else while the drain ran it (a worker running \
             on the test database?); stop other workers before draining",
            c.id
        ))
    };
    match decide(ran, &ctx, descriptor, Duration::from_secs(24 * 3600)) {
        // The drain's context holds no claim, so `complete_in` writes nothing there and the
        // drain completes the job itself, as for any job that returned Ok.
        Some(Outcome::Done {
            output: Some(output),
        }) => {
            if !store
                .complete_with_output(owner, c.id, c.attempt, &output)
                .await?
            {
                return Err(lost());
            }
            Ok((JobStatus::Done, false))
        }
        Some(Outcome::Done { output: None } | Outcome::DoneInTransaction { .. }) => {
            let lost_ids = store.complete(owner, &[(c.id, c.attempt)]).await?;
            if !lost_ids.is_empty() {
                return Err(lost());
            }
            Ok((JobStatus::Done, false))
        }
        Some(Outcome::Finish(finish)) => {
            let unrunnable = match &finish {
                Finish::Defer { error, .. } => Some(error.clone()),
                _ => None,
            };
            let snoozed = matches!(finish, Finish::Snooze { .. });
            let status = store
                .finish(owner, c.id, c.attempt, &finish)
                .await?
                .ok_or_else(lost)?;
            match unrunnable {
                Some(error) => Err(Error::Testing(format!(
                    "drain cannot run job {} (`{}`), which was put back to wait for a \
                     worker that can: {error}",
                    c.id, c.kind
                ))),
                None => Ok((status, snoozed)),
            }
        }
        None => Err(lost()),
    }
}

impl IntoFuture for Drain {
    type Output = Result<DrainSummary>;
    type IntoFuture = Pin<Box<dyn Future<Output = Self::Output> + Send>>;

    fn into_future(self) -> Self::IntoFuture {
        Box::pin(self.run())
    }
}

impl std::fmt::Debug for Drain {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Drain")
            .field("queues", &self.queues)
            .field("data", &self.data)
            .field("with_scheduled", &self.with_scheduled)
            .field("max_runs", &self.max_runs)
            .finish_non_exhaustive()
    }
}
