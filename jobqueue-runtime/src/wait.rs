//! What a job ended with: waiting for its end, and reading its output typed by its kind.

use std::time::Duration;

use tokio::time::Instant;

use crate::error::{Error, JobRef, Result};
use crate::job::{Job, JobOutput};
use crate::model::{JobRecord, JobStatus};
use crate::queue::Queue;
use crate::store::JobLookup;

/// The first and the longest pause between two reads of a job another process runs.
const POLL_FIRST: Duration = Duration::from_millis(10);
const POLL_MAX: Duration = Duration::from_millis(500);

impl Queue {
    /// Waits until job `id` ends (`done`, `failed` or `cancelled`) and returns its record,
    /// or [`Error::WaitTimedOut`] after `timeout`, naming the status the job is in.
    ///
    /// A job that a worker of this process runs is seen the moment its outcome is written.
    /// One that another process runs is seen by reading its row (by primary key) after
    /// 10 ms, then at intervals that double up to 500 ms. A job pruned meanwhile, or never
    /// enqueued, is [`Error::JobNotFound`].
    pub async fn wait(&self, id: u64, timeout: Duration) -> Result<JobRecord> {
        let deadline = Instant::now() + timeout;
        let mut ended = self.subscribe_ended();
        let mut pause = POLL_FIRST;
        loop {
            // Marked seen before the read: an end written after it wakes the wait below.
            ended.borrow_and_update();
            let Some(job) = self.store().job(JobLookup::Id(id)).await? else {
                return Err(Error::JobNotFound(JobRef::Id(id)));
            };
            if matches!(
                job.status,
                JobStatus::Done | JobStatus::Failed | JobStatus::Cancelled
            ) {
                return Ok(job);
            }
            let now = Instant::now();
            if now >= deadline {
                return Err(Error::WaitTimedOut {
                    id,
                    waited: timeout,
                    status: job.status.as_str(),
                });
            }
            let wake_at = (now + pause).min(deadline);
            tokio::select! {
                _ = ended.changed() => {}
                _ = tokio::time::sleep_until(wake_at) => pause = (pause * 2).min(POLL_MAX),
            }
        }
    }

    /// The output of job `id`, of kind `J`, once it is `done`: what its function returned
    /// (`()` for one that returns nothing). `None` while the job has not succeeded (it is
    /// waiting, running, failed or cancelled). An error if there is no such job, if it is of
    /// another kind, or if the stored output does not read as `J::Output` (a job finished by
    /// a release whose function returned another type).
    pub async fn output<J: Job + JobOutput>(&self, id: u64) -> Result<Option<J::Output>> {
        let Some((kind, status, output)) = self.store().output(id).await? else {
            return Err(Error::JobNotFound(JobRef::Id(id)));
        };
        if kind != J::KIND {
            return Err(Error::Output {
                id,
                reason: format!(
                    "it is a job of kind `{kind}`, not `{}`; read it as its own kind",
                    J::KIND
                ),
            });
        }
        if status != JobStatus::Done {
            return Ok(None);
        }
        // `()` and `Option::None` are stored as no output at all.
        let json = output.as_deref().unwrap_or("null");
        serde_json::from_str(json)
            .map(Some)
            .map_err(|e| Error::Output {
                id,
                reason: format!(
                    "the stored output does not read as `{}`: {e}",
                    std::any::type_name::<J::Output>()
                ),
            })
    }

    /// The output of job `id` as stored, whatever its kind: the JSON its function
    /// returned, once it is `done`. `None` while it is not done, and when it returned `()`.
    /// An error if there is no such job. For operators; code that knows the kind reads it
    /// typed with [`Queue::output`].
    pub async fn output_json(&self, id: u64) -> Result<Option<serde_json::Value>> {
        let Some((_, status, output)) = self.store().output(id).await? else {
            return Err(Error::JobNotFound(JobRef::Id(id)));
        };
        match (status, output) {
            (JobStatus::Done, Some(json)) => {
                serde_json::from_str(&json)
                    .map(Some)
                    .map_err(|e| Error::Output {
                        id,
                        reason: format!("the stored output is not JSON: {e}"),
                    })
            }
            _ => Ok(None),
        }
    }

    /// [`Queue::wait`] for job `id` of kind `J`, then its output: the value its function
    /// returned. A job that ended `failed` or `cancelled` is an [`Error::Output`] saying so,
    /// with its `last_error`.
    pub async fn wait_output<J: Job + JobOutput>(
        &self,
        id: u64,
        timeout: Duration,
    ) -> Result<J::Output> {
        let job = self.wait(id, timeout).await?;
        match self.output::<J>(id).await? {
            Some(output) => Ok(output),
            None => Err(Error::Output {
                id,
                reason: format!(
                    "it ended {} and has no output: {}",
                    job.status,
                    job.last_error.as_deref().unwrap_or("no error was recorded")
                ),
            }),
        }
    }
}
