//! Enqueue: typed jobs in, one row each, idempotent by task key.

use std::time::Duration;

use crate::backend::{ConnRef, JobConnection};
use chrono::{DateTime, Utc};

use crate::error::{Error, Result};
use crate::job::Job;
use crate::key::{validate_key, validate_queue};
use crate::model::{valid_meta_key, Enqueued, JobLimits, JobStatus, NewJob, Uniqueness};
use crate::queue::Queue;
use crate::store;

/// Per-enqueue overrides of the kind's defaults.
///
/// ```
/// # extern crate jobqueue_runtime as jobqueue;
/// use std::time::Duration;
/// use jobqueue::EnqueueOptions;
///
/// let opts = EnqueueOptions::default()
///     .delay(Duration::from_secs(60))
///     .priority(-10)
///     .key("invoice:2026-11:customer-42");
/// ```
#[derive(Debug, Clone, Default)]
#[non_exhaustive]
pub struct EnqueueOptions {
    /// Queue instead of the kind's.
    pub queue: Option<String>,
    /// Priority instead of the kind's (lower runs first).
    pub priority: Option<i16>,
    /// Task key instead of the kind's template or derived key. At most 255 characters, not
    /// empty, no control characters. Keys compare byte for byte (case and trailing spaces
    /// count).
    pub key: Option<String>,
    /// Attempts instead of the kind's.
    pub max_attempts: Option<u32>,
    /// Do not start before this instant.
    pub run_at: Option<DateTime<Utc>>,
    /// Do not start before this long from now (the database's now).
    pub delay: Option<Duration>,
    /// How long the key blocks another enqueue, instead of the kind's.
    pub unique: Option<Uniqueness>,
    /// A JSON object kept with the job (tags, a tenant...): at most
    /// [`MAX_METADATA_BYTES`] as JSON, keys of 1 to 64 ASCII letters, digits, `_`, `-` or
    /// `.`. Shown by `jobqueue show`, filtered on with [`JobFilter::meta`](crate::JobFilter::meta).
    pub metadata: Option<serde_json::Value>,
    /// The key of the kind's concurrency limit instead of [`Job::concurrency_key`]. Ignored
    /// for a kind without a concurrency limit.
    pub concurrency_key: Option<String>,
    /// The key of the kind's rate limit instead of [`Job::rate_key`]. Ignored for a kind
    /// without a rate limit.
    pub rate_key: Option<String>,
}

/// The largest metadata object a job may carry, in bytes of JSON.
pub const MAX_METADATA_BYTES: usize = 4096;

impl EnqueueOptions {
    /// Sets the queue.
    pub fn queue(mut self, queue: impl Into<String>) -> Self {
        self.queue = Some(queue.into());
        self
    }

    /// Sets the priority (lower runs first).
    pub fn priority(mut self, priority: i16) -> Self {
        self.priority = Some(priority);
        self
    }

    /// Sets an explicit task key.
    pub fn key(mut self, key: impl Into<String>) -> Self {
        self.key = Some(key.into());
        self
    }

    /// Sets the number of attempts.
    pub fn max_attempts(mut self, n: u32) -> Self {
        self.max_attempts = Some(n);
        self
    }

    /// Starts the job no earlier than `at` (UTC).
    pub fn run_at(mut self, at: DateTime<Utc>) -> Self {
        self.run_at = Some(at);
        self
    }

    /// Starts the job no earlier than `delay` from now, measured by the database's clock.
    pub fn delay(mut self, delay: Duration) -> Self {
        self.delay = Some(delay);
        self
    }

    /// Sets how long the job's key blocks another enqueue of it (see [`Uniqueness`]).
    pub fn unique(mut self, unique: Uniqueness) -> Self {
        self.unique = Some(unique);
        self
    }

    /// Sets the job's metadata object, replacing any set before.
    pub fn metadata(mut self, metadata: serde_json::Value) -> Self {
        self.metadata = Some(metadata);
        self
    }

    /// Adds one entry to the job's metadata object.
    ///
    /// ```
    /// # extern crate jobqueue_runtime as jobqueue;
    /// use jobqueue::EnqueueOptions;
    ///
    /// let opts = EnqueueOptions::default().meta("tenant", "acme").meta("batch", 42);
    /// ```
    pub fn meta(mut self, key: impl Into<String>, value: impl Into<serde_json::Value>) -> Self {
        let map = match self.metadata.take() {
            Some(serde_json::Value::Object(map)) => map,
            // Anything else is refused at enqueue; keep it so that the error says so.
            Some(other) => {
                self.metadata = Some(other);
                return self;
            }
            None => serde_json::Map::new(),
        };
        let mut map = map;
        map.insert(key.into(), value.into());
        self.metadata = Some(serde_json::Value::Object(map));
        self
    }

    /// Sets the key of the kind's concurrency limit for this job.
    pub fn concurrency_key(mut self, key: impl Into<String>) -> Self {
        self.concurrency_key = Some(key.into());
        self
    }

    /// Sets the key of the kind's rate limit for this job.
    pub fn rate_key(mut self, key: impl Into<String>) -> Self {
        self.rate_key = Some(key.into());
        self
    }
}

/// The metadata as JSON text, checked.
fn metadata_text(kind: &str, metadata: &Option<serde_json::Value>) -> Result<Option<String>> {
    let Some(value) = metadata else {
        return Ok(None);
    };
    let invalid = |reason: String| Error::InvalidSetting {
        setting: "metadata",
        reason: format!("job `{kind}`: {reason}"),
    };
    let serde_json::Value::Object(map) = value else {
        return Err(invalid(format!(
            "metadata must be a JSON object such as {{\"tenant\": \"acme\"}}, not `{value}`"
        )));
    };
    if let Some(bad) = map.keys().find(|k| !valid_meta_key(k)) {
        return Err(invalid(format!(
            "metadata key {bad:?} is not allowed; use 1 to 64 ASCII letters, digits, `_`, `-` or `.`"
        )));
    }
    let text = value.to_string();
    if text.len() > MAX_METADATA_BYTES {
        return Err(invalid(format!(
            "metadata is {} bytes of JSON, more than the limit of {MAX_METADATA_BYTES}; keep ids and tags there, and the rest in the payload or your own tables",
            text.len()
        )));
    }
    Ok(Some(text))
}

impl Queue {
    /// Enqueues a job with its kind's defaults. A second enqueue with the same task key is
    /// [`Enqueued::Duplicate`] and is logged; it never runs twice.
    pub async fn enqueue<J: Job>(&self, job: J) -> Result<Enqueued> {
        self.enqueue_with(job, EnqueueOptions::default()).await
    }

    /// Enqueues a job with per-enqueue options.
    ///
    /// One autocommit statement (two for a duplicate). If it loses a deadlock, as two
    /// enqueues of one key do when both wait on a third session's uncommitted insert of it
    /// and that session rolls back, it is retried: the retry finds the other's row and
    /// reports [`Enqueued::Duplicate`].
    pub async fn enqueue_with<J: Job>(&self, job: J, options: EnqueueOptions) -> Result<Enqueued> {
        let new = self.prepare(&job, &options)?;
        let outcome = self.store().insert_autocommit(&new).await?;
        self.record(&new, outcome);
        if outcome.is_new() && new.run_at.is_none() && new.delay_us == 0 {
            self.wake_workers();
        }
        Ok(outcome)
    }

    /// Enqueues inside the caller's transaction or connection (transactional outbox): the
    /// job exists if and only if the transaction commits. Workers in this process find the
    /// job at their next poll, or at once after [`Queue::wake_workers`].
    ///
    /// # What holds inside your transaction
    ///
    /// - A duplicate does not abort the transaction: the failed `INSERT` undoes only itself,
    ///   and the existing row is read with a locking read, which sees the latest committed
    ///   row at any isolation level. This holds under REPEATABLE READ with MariaDB's
    ///   `innodb_snapshot_isolation=ON` too, even for a row committed after your snapshot
    ///   began (tested on MariaDB 10.11).
    /// - A deadlock ([`DbErrorKind::Deadlock`](crate::DbErrorKind::Deadlock)) rolls back
    ///   your *whole* transaction, as it does for any InnoDB statement; so does a lock wait
    ///   timeout ([`DbErrorKind::LockWaitTimeout`](crate::DbErrorKind::LockWaitTimeout)) when
    ///   the server runs with `innodb_rollback_on_timeout=ON` (with it OFF, the default, only
    ///   the statement is undone). The queue cannot retry what is yours: retry the
    ///   transaction from its start ([`Error::database_class`](crate::Error::database_class)
    ///   tells these errors).
    /// - A key whose holder's [`Uniqueness`] no longer blocks it is released with a locking
    ///   `UPDATE` of the holder. Under REPEATABLE READ with MariaDB's
    ///   `innodb_snapshot_isolation=ON`, that fails with
    ///   [`DbErrorKind::SnapshotConflict`](crate::DbErrorKind::SnapshotConflict) when the holder changed after
    ///   your snapshot began (retry your transaction from its start); at READ COMMITTED it
    ///   cannot. Keys of the default policy are never released.
    ///
    /// ```no_run
    /// # extern crate jobqueue_runtime as jobqueue;
    /// # async fn demo<J: jobqueue::Job>(queue: jobqueue::Queue, pool: sqlx::MySqlPool, job: J) -> jobqueue::Result<()> {
    /// let mut tx = pool.begin().await?;
    /// sqlx::query("INSERT INTO orders (id) VALUES (?)").bind(7412).execute(&mut *tx).await?;
    /// queue.enqueue_in(&mut tx, job).await?;
    /// tx.commit().await?;
    /// queue.wake_workers();
    /// # Ok(()) }
    /// ```
    pub async fn enqueue_in<J: Job, C: JobConnection>(
        &self,
        conn: &mut C,
        job: J,
    ) -> Result<Enqueued> {
        self.enqueue_in_with(conn, job, EnqueueOptions::default())
            .await
    }

    /// [`Queue::enqueue_in`] with per-enqueue options.
    pub async fn enqueue_in_with<J: Job, C: JobConnection>(
        &self,
        conn: &mut C,
        job: J,
        options: EnqueueOptions,
    ) -> Result<Enqueued> {
        let new = self.prepare(&job, &options)?;
        let conn = self.own_connection(conn)?;
        let outcome = store::insert_on(conn, &new).await?;
        self.record(&new, outcome);
        Ok(outcome)
    }

    /// Enqueues many jobs of one kind in one transaction, with a few statements per 1,000
    /// jobs. Returns one outcome per job, in order; equal keys within the batch give one
    /// `New` and then `Duplicate`s of it. Either all of them are enqueued or (on error) none.
    pub async fn enqueue_many<J, I>(&self, jobs: I) -> Result<Vec<Enqueued>>
    where
        J: Job,
        I: IntoIterator<Item = J>,
    {
        let news = self.prepare_many(jobs, &EnqueueOptions::default())?;
        let outcomes = self.store().insert_many(&news).await?;
        for (n, o) in news.iter().zip(&outcomes) {
            self.record(n, *o);
        }
        if outcomes.iter().any(|o| o.is_new()) {
            self.wake_workers();
        }
        Ok(outcomes)
    }

    /// [`Queue::enqueue_many`] inside the caller's transaction, with shared options (an
    /// explicit `key` is refused here: every job needs its own).
    ///
    /// Which keys exist already is decided with a plain read of your transaction's snapshot
    /// (a locking read would take gap locks that deadlock concurrent batches). Under READ
    /// COMMITTED that is the latest committed state. Under REPEATABLE READ it is the state
    /// when your snapshot began: a key whose job was pruned since is reported
    /// [`Enqueued::Duplicate`] of a row that no longer exists, and is not enqueued. Run outbox
    /// transactions that may meet such keys at READ COMMITTED, or use
    /// [`Queue::enqueue_in`], which reads the latest row. Deadlocks and lock wait timeouts
    /// behave as for [`Queue::enqueue_in`].
    pub async fn enqueue_many_in<J, I, C>(
        &self,
        conn: &mut C,
        jobs: I,
        options: EnqueueOptions,
    ) -> Result<Vec<Enqueued>>
    where
        J: Job,
        I: IntoIterator<Item = J>,
        C: JobConnection,
    {
        let news = self.prepare_many(jobs, &options)?;
        let conn = self.own_connection(conn)?;
        let outcomes = store::insert_many_on(conn, &news).await?;
        for (n, o) in news.iter().zip(&outcomes) {
            self.record(n, *o);
        }
        Ok(outcomes)
    }

    /// `conn` as the store takes it, or [`Error::WrongBackend`] when it is a connection of
    /// another database than the queue's.
    fn own_connection<'c, C: JobConnection>(&self, conn: &'c mut C) -> Result<ConnRef<'c>> {
        let conn = conn.conn_ref();
        if conn.backend() != self.backend() {
            return Err(Error::WrongBackend {
                given: conn.backend(),
                queue: self.backend(),
            });
        }
        Ok(conn)
    }

    fn prepare_many<J: Job, I: IntoIterator<Item = J>>(
        &self,
        jobs: I,
        options: &EnqueueOptions,
    ) -> Result<Vec<NewJob>> {
        if options.key.is_some() {
            return Err(Error::InvalidSetting {
                setting: "key",
                reason: "a bulk enqueue cannot share one explicit `key` among its jobs; leave `key` unset or enqueue one by one".into(),
            });
        }
        jobs.into_iter()
            .map(|j| self.prepare(&j, options))
            .collect()
    }

    pub(crate) fn prepare<J: Job>(&self, job: &J, options: &EnqueueOptions) -> Result<NewJob> {
        let o = &J::OPTIONS;
        let queue = options.queue.clone().unwrap_or_else(|| o.queue.to_owned());
        validate_queue(&queue)?;
        let key = match &options.key {
            Some(k) => k.clone(),
            None => job.task_key()?,
        };
        validate_key(&key)?;
        let payload = serde_json::to_string(job).map_err(|source| Error::Serialize {
            kind: J::KIND,
            source,
        })?;
        let limit = self.inner.config.max_payload_bytes;
        if payload.len() > limit {
            return Err(Error::PayloadTooLarge {
                kind: J::KIND.to_owned(),
                size: payload.len(),
                limit,
            });
        }
        let max_attempts = options.max_attempts.unwrap_or(o.max_attempts);
        if max_attempts == 0 {
            return Err(Error::InvalidSetting {
                setting: "max_attempts",
                reason: format!("job `{}`: `max_attempts` must be at least 1", J::KIND),
            });
        }
        let unique = options.unique.unwrap_or(o.unique);
        if let Uniqueness::For(period) = unique {
            if period < Duration::from_millis(1) {
                return Err(Error::InvalidSetting {
                    setting: "unique_for",
                    reason: format!(
                        "job `{}`: a uniqueness period must be at least 1 ms (got {period:?}); use `Uniqueness::WhileActive` to free the key as soon as the job ends",
                        J::KIND
                    ),
                });
            }
        }
        let metadata = metadata_text(J::KIND, &options.metadata)?;
        let delay_us = options
            .delay
            .map(|d| i64::try_from(d.as_micros()).unwrap_or(i64::MAX))
            .unwrap_or(0);
        Ok(NewJob {
            kind: J::KIND.to_owned(),
            queue,
            key,
            payload,
            priority: options.priority.unwrap_or(o.priority),
            max_attempts,
            lease_ms: lease_ms(J::KIND, o.lease)?,
            run_at: options.run_at.map(|t| t.naive_utc()),
            delay_us,
            traceparent: crate::trace::current_traceparent(),
            unique,
            metadata,
            limits: job_limits(
                J::KIND,
                o,
                || {
                    options
                        .concurrency_key
                        .clone()
                        .or_else(|| job.concurrency_key())
                },
                || options.rate_key.clone().or_else(|| job.rate_key()),
            )?,
        })
    }

    fn record(&self, job: &NewJob, outcome: Enqueued) {
        let m = &self.inner.metrics;
        match outcome {
            Enqueued::New(id) => {
                m.enqueued(&job.queue, &job.kind);
                tracing::debug!(job.id = id, job.kind = %job.kind, task_key = %job.key, queue = %job.queue, "job enqueued");
            }
            Enqueued::Duplicate { id, status } => {
                m.duplicates(&job.queue, &job.kind);
                match status {
                    // The key still blocks after its job ended: nothing will run, which is
                    // rarely what an enqueue meant.
                    Some(status)
                        if matches!(
                            status,
                            JobStatus::Done | JobStatus::Failed | JobStatus::Cancelled
                        ) =>
                    {
                        tracing::warn!(
                            job.kind = %job.kind,
                            task_key = %job.key,
                            existing_id = id,
                            existing_status = %status,
                            "duplicate enqueue ignored: job {id} with task key {:?} is {status} and still holds the key, so nothing will run; to run a key again once its job ends, give the kind `unique = \"while_active\"` (or `unique_for`), or put the period in the key (e.g. `key = \"report:{{day}}\"`)",
                            job.key
                        )
                    }
                    _ => tracing::info!(
                        job.kind = %job.kind,
                        task_key = %job.key,
                        existing_id = id,
                        "duplicate enqueue ignored: job {id} already has task key {:?}",
                        job.key
                    ),
                }
            }
        }
    }
}

/// The limits of a job of `kind`: its options' limits under the keys given (the kind's name
/// when none is), each key checked as a task key is.
pub(crate) fn job_limits(
    kind: &str,
    o: &crate::job::JobOptions,
    concurrency_key: impl FnOnce() -> Option<String>,
    rate_key: impl FnOnce() -> Option<String>,
) -> Result<JobLimits> {
    let key = |k: Option<String>, setting: &'static str| -> Result<String> {
        let k = k.unwrap_or_else(|| kind.to_owned());
        validate_key(&k).map_err(|e| Error::InvalidSetting {
            setting,
            reason: format!("job `{kind}`: {e}"),
        })?;
        Ok(k)
    };
    let mut limits = JobLimits::default();
    if let Some(n) = o.concurrency {
        if n == 0 || n > store::MAX_SLOTS {
            return Err(Error::InvalidSetting {
                setting: "concurrency",
                reason: format!(
                    "job `{kind}`: a concurrency limit must be 1 to {} jobs at once, not {n}; leave it out for no limit",
                    store::MAX_SLOTS
                ),
            });
        }
        limits.concurrency = Some((key(concurrency_key(), "concurrency_key")?, n));
    }
    if let Some(rate) = o.rate_limit {
        let window = u32::try_from(rate.per.as_millis())
            .ok()
            .filter(|ms| *ms >= 1);
        let (Some(window), 1..=store::MAX_SLOTS) = (window, rate.starts) else {
            return Err(Error::InvalidSetting {
                setting: "rate_limit",
                reason: format!(
                    "job `{kind}`: a rate limit must allow 1 to {} starts per window of 1 ms to about 49.7 days, not {} per {:?}",
                    store::MAX_SLOTS, rate.starts, rate.per
                ),
            });
        };
        limits.rate = Some((key(rate_key(), "rate_key")?, rate.starts, window));
    }
    Ok(limits)
}

/// The longest lease the `lease_ms` column holds: `u32::MAX` milliseconds, about 49.7 days.
pub(crate) const MAX_LEASE: Duration = Duration::from_millis(u32::MAX as u64);

/// `kind`'s lease in milliseconds, as the `lease_ms` column holds it; a longer lease is
/// refused rather than cut short without a word.
pub(crate) fn lease_ms(kind: &str, lease: Duration) -> Result<u32> {
    u32::try_from(lease.as_millis()).map_err(|_| {
        Error::InvalidSetting {
            setting: "lease",
            reason: format!(
            "job `{kind}`: a lease of {} s is longer than the longest the queue holds ({} s, about 49.7 days); \
             use a shorter `lease`: the worker renews it while the job runs, so a job may run far longer than its lease",
            lease.as_secs(),
            MAX_LEASE.as_secs()
        ),
        }
    })
}
