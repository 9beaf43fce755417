//! The `#[job]` attribute of `jobqueue`. Use it through the `jobqueue` crate, which
//! re-exports it as `jobqueue::job`.

mod args;
mod diagnostics;
mod expand;
mod sig;

use proc_macro::TokenStream;

/// Turns an `async fn` into a kind of background job.
///
/// ```no_run
/// use jobqueue::{job, JobContext, JobError, Queue};
///
/// /// Export one order as a file.
/// #[job(queue = "exports", max_attempts = 5, key = "export:{order_id}:{format}")]
/// async fn export_order(ctx: JobContext, order_id: u64, format: String) -> Result<(), JobError> {
///     println!("exporting order {order_id} as {format} (attempt {})", ctx.attempt());
///     Ok(())
/// }
///
/// # async fn demo(queue: Queue) -> jobqueue::Result<()> {
/// // The arguments become a struct: enqueue one, and a worker calls `export_order` with them.
/// queue.enqueue(ExportOrder { order_id: 7412, format: "csv".into() }).await?;
/// # Ok(())
/// # }
/// ```
///
/// # What it generates
///
/// - The function itself, exactly as written: it stays callable, from tests for instance
///   (`JobContext::detached` or `JobContext::builder` makes a context outside a worker, and
///   `jobqueue::testing::perform` runs one attempt as a worker would).
/// - A struct named after the function in `UpperCamelCase` (`export_order` gives
///   `ExportOrder`), with the function's visibility and one `pub` field per argument, in
///   order; the `JobContext` and `Data<T>` parameters are not fields. It derives `Debug`,
///   `Clone`, `serde::Serialize` and `serde::Deserialize` (and `Default` for a
///   [`cron`](#cron) job): it is the job's payload, stored as JSON. `#[serde(...)]`
///   attributes written on a parameter move to its field (`#[serde(default)]`,
///   `#[serde(rename = "...")]`), which lets a payload evolve.
/// - `impl jobqueue::Job` for the struct: the kind name, the options below, the task key
///   and `run`, which calls the function with the fields and the worker's context.
/// - A registration of the kind, so that every worker of the binary finds it by name with
///   no list to maintain. Two kinds with one name are refused when a worker starts.
///
/// # The function
///
/// - It is an `async fn`, without generics or a `where` clause, and not a method (no
///   `self`).
/// - Each argument is a plain name (`mut` is fine) with an owned type: `String`, not `&str`.
///   The type implements `Serialize`, `Deserialize`, `Send` and `Sync`; a payload stored by
///   one release is decoded by the next, so change argument types with care (a new
///   `Option` argument decodes old payloads as `None`).
/// - It may take a `JobContext`, in any position: the parameter whose type is named
///   `JobContext` (`JobContext`, `jobqueue::JobContext`). The context gives the job's id,
///   attempt and task key, and `ctx.cancelled()`, which resolves when the job should stop.
/// - It may take shared state the worker was given, as parameters whose type is named
///   `Data<T>` (`jobqueue::Data`): see [Shared state](#shared-state-datat).
/// - It returns `()` or `Result<T, E>` for any `E` that converts into `JobError`: every
///   `std` error, `anyhow::Error`, `String`. An error fails the attempt, and the job is
///   retried after its [`backoff`](#backoff) while attempts remain; return
///   `JobError::permanent(..)` for a failure that retrying cannot fix,
///   `JobError::snooze(delay)` to run again later without spending an attempt (see
///   [`max_snoozes`](#max_snoozes)), and `JobError::cancel(reason)` to end the job
///   `cancelled`.
/// - `T` is the job's output: `()` (nothing is stored), or any type that is `Serialize` and
///   `DeserializeOwned`, stored as JSON with the job when it is done (at most 64 KiB; a
///   larger output fails the job) and read back typed with `queue.output::<ExportOrder>(id)`
///   or `queue.wait_output::<ExportOrder>(id, timeout)`: the struct implements
///   `jobqueue::context::JobOutput` with `type Output = T`.
///
/// Every mistake in the function or the options is reported in one build, at the offending
/// token, and the function is still compiled so the rest of the crate keeps working.
///
/// # Shared state: `Data<T>`
///
/// A job reaches the application's pool, HTTP client or configuration through a `Data<T>`
/// parameter, filled from what the worker was given with `.data(value)` (a clone per run),
/// as axum's `State` or apalis' `Data` are. The kind records the types it takes, and a
/// worker that serves its queue without one is refused when it is built, with a message
/// naming the kind and the type. Every worker also holds its own `Queue`, for follow-up
/// jobs.
///
/// ```no_run
/// use jobqueue::{job, Data, JobError, Queue, Worker};
/// use sqlx::MySqlPool;
///
/// #[job(queue = "orders")]
/// async fn ship_order(db: Data<MySqlPool>, queue: Data<Queue>, order_id: u64) -> Result<(), JobError> {
///     let mut tx = db.begin().await?;
///     sqlx::query("UPDATE orders SET shipped = 1 WHERE id = ?").bind(order_id).execute(&mut *tx).await?;
///     // The follow-up commits with the update, or not at all.
///     queue.enqueue_in(&mut *tx, NotifyCustomer { order_id }).await?;
///     tx.commit().await?;
///     Ok(())
/// }
///
/// #[job(queue = "orders")]
/// async fn notify_customer(order_id: u64) {}
///
/// # async fn demo(queue: Queue, pool: MySqlPool) -> jobqueue::Result<()> {
/// Worker::builder(queue).queues(["orders"]).data(pool).build()?.run().await?;
/// # Ok(()) }
/// ```
///
/// # Options
///
/// All are optional: `#[job]` alone gives a job with every default. This is the reference of
/// every option: [`name`](#name), [`queue`](#queue), [`max_attempts`](#max_attempts),
/// [`lease`](#lease), [`timeout`](#timeout), [`priority`](#priority), [`key`](#key),
/// [`backoff`](#backoff), [`cron`](#cron), [`overlap`](#overlap),
/// [`unique`, `unique_for`](#unique-unique_for), [`max_snoozes`](#max_snoozes),
/// [`concurrency`](#concurrency), [`concurrency_key`](#concurrency_key),
/// [`rate_limit`](#rate_limit), [`rate_key`](#rate_key) and [`crate`](#crate). The guides
/// (`jobqueue::guide`) show them at work.
///
/// ## `name`
///
/// The kind name stored with each job and used to find its code: 1 to 128 bytes, unique in
/// the binary. Default: the function's name. Set it when two jobs in different modules share
/// a function name, or to rename a function while jobs of the old name may still wait in
/// the table.
///
/// ```
/// # use jobqueue::job;
/// #[job(name = "billing.sync_account")]
/// async fn sync(account_id: u64) {}
/// ```
///
/// ## `queue`
///
/// The queue the kind's jobs go to; workers choose the queues they serve. 1 to 64
/// characters of `A-Z a-z 0-9 _ . : -`. Default: `"default"`.
///
/// ```
/// # use jobqueue::job;
/// #[job(queue = "exports")]
/// async fn export_order(order_id: u64) {}
/// ```
///
/// ## `max_attempts`
///
/// How many times a job runs before it is marked `failed`, counting the first run. At
/// least 1. Default: 25.
///
/// ```
/// # use jobqueue::job;
/// #[job(max_attempts = 5)]
/// async fn charge_card(payment_id: u64) {}
/// ```
///
/// ## `lease`
///
/// How long a worker's claim on a running job lasts without renewal. The worker renews it
/// each time it is a quarter of the way through, so a job may run for much longer; a
/// crashed worker's job is claimed again after one lease. A renewal that gets no reply
/// within a quarter of the lease is sent again on a new connection, and a job whose lease
/// went unrenewed for three quarters of it is stopped. At least 1 s. Default: 30 s.
///
/// Durations here and below are a number and a unit (`ms`, `s`, `m`, `h`, `d`), or several
/// from the largest unit down: `"500ms"`, `"30s"`, `"1h30m"`.
///
/// ```
/// # use jobqueue::job;
/// #[job(lease = "2m")]
/// async fn transcode(video_id: u64) {}
/// ```
///
/// ## `timeout`
///
/// The longest one attempt may run: then its context is cancelled and the attempt counts
/// as failed. Default: no limit.
///
/// ```
/// # use jobqueue::job;
/// #[job(timeout = "10m")]
/// async fn build_report(report_id: u64) {}
/// ```
///
/// ## `priority`
///
/// Within a queue, jobs with a lower priority are claimed first. `-32768` to `32767`.
/// Default: 0.
///
/// ```
/// # use jobqueue::job;
/// #[job(priority = -10)]
/// async fn send_password_reset(user_id: u64) {}
/// ```
///
/// ## `key`
///
/// The task key, the job's idempotency key: while a job holds a key, enqueueing another job
/// with an equal key is reported as a duplicate and adds nothing. How long a job holds its
/// key is its [`unique`](#unique-unique_for) policy: by default until it is pruned, 7 days
/// after it is done, so name every argument that makes a job different in the template. The
/// template is text with `{argument}` placeholders, each replaced by the argument's
/// `Display`; `{{` and `}}` are literal braces. A key longer than 255 characters keeps its
/// first 200 and ends with a hash of the whole.
///
/// Keys are one namespace shared by every kind, and a template's key is used as written,
/// with no kind added (so that keys stay the same across releases). Start each template
/// with text of its kind's own: with `key = "order:{id}"` on two kinds, the second kind's
/// enqueue of an order the first holds fails with `Error::KeyTaken` (it is never reported
/// as a duplicate of the other kind's job).
///
/// Default: derived from the arguments, `kind:` followed by 128 bits, in hex, of the
/// SHA-256 of the arguments' canonical JSON (object keys sorted, no whitespace): equal
/// arguments give equal keys, in every process and release.
///
/// ```
/// # use jobqueue::job;
/// // Every argument that makes a job different is in the key: a PDF export of an order
/// // after its CSV export is a job of its own, not a duplicate.
/// #[job(key = "export:{order_id}:{format}")]
/// async fn export_order(order_id: u64, format: String) {}
/// ```
///
/// ## `backoff`
///
/// The wait before each retry: `"exponential(base, max)"` waits `base`, then twice as
/// long after each failed attempt, up to `max`; `"linear(step, max)"` waits `step` times
/// the number of failed attempts, up to `max`; `"constant(wait)"` always waits `wait`.
/// Every wait is jittered by ±20 %. Default: `"exponential(1s, 1h)"`: about 1 s, 2 s, 4 s,
/// ... 2048 s, then 1 h.
///
/// ```
/// # use jobqueue::job;
/// #[job(backoff = "linear(10s, 10m)")]
/// async fn call_webhook(url: String) {}
/// ```
///
/// ## `cron`
///
/// A schedule on which the workers enqueue the job by themselves: six fields
/// `sec min hour day month weekday`, or five without the seconds, in UTC unless a time zone
/// comes first (`CRON_TZ=Europe/Berlin 0 0 9 * * Mon-Fri`: 09:00 Berlin time, summer and
/// winter). Its arguments are built with `Default`, so every argument type implements
/// `Default` (or there are none). The schedule is checked at compile time, the time zone's
/// name when the worker starts. Default: none.
///
/// Each tick is enqueued at most once, with the task key `kind@<tick in UTC>`, however many
/// workers run and restart and whatever was pruned since: the workers record the latest
/// tick of each kind in the `job_queue_cron` table and enqueue a tick only while moving
/// that record past it. A new kind's first tick is the first one after a worker first
/// schedules it, never an earlier one. Ticks missed for longer than the catch-up window
/// (three maintenance intervals, at least 5 s: every worker was down, or the kind's queue
/// was paused) collapse into the latest of them, which runs once. See also
/// [`overlap`](#overlap).
///
/// ```
/// # use jobqueue::job;
/// #[job(cron = "0 */5 * * * *")]
/// async fn prune_sessions() {}
///
/// #[job(cron = "CRON_TZ=Europe/Berlin 0 0 9 * * Mon-Fri")]
/// async fn morning_report() {}
/// ```
///
/// ## `overlap`
///
/// For a `cron` job: whether a tick is enqueued while the job of the previous tick is still
/// scheduled, ready or running. Default `false`: such a tick is skipped, so runs never
/// overlap and a queue that no worker serves holds at most one waiting tick. `true`
/// enqueues every tick.
///
/// ```
/// # use jobqueue::job;
/// // Each tick runs, even while the previous one still does.
/// #[job(cron = "*/10 * * * * *", overlap = true)]
/// async fn sample_metrics() {}
/// ```
///
/// ## `unique`, `unique_for`
///
/// How long a job's task key blocks another enqueue of the same key
/// (`jobqueue::Uniqueness`). `unique = "until_pruned"` (the
/// default): while the job's row exists, until it is pruned. `unique = "while_active"`:
/// while the job is scheduled, ready or running; once it is done, failed or cancelled the
/// next enqueue of the key makes a new job, and the old row stays as history.
/// `unique_for = "1h"`: for that long after the enqueue, whatever the job's status (a
/// duration as for `lease`). Give one of the two; `EnqueueOptions::unique` overrides it for
/// one enqueue.
///
/// ```
/// # use jobqueue::job;
/// // One sync per account at a time; a new one may start once it has finished.
/// #[job(key = "sync:{account_id}", unique = "while_active")]
/// async fn sync_account(account_id: u64) {}
///
/// // At most one digest per user per hour, however often it is asked for.
/// #[job(key = "digest:{user_id}", unique_for = "1h")]
/// async fn send_digest(user_id: u64) {}
/// ```
///
/// ## `max_snoozes`
///
/// How many times a job of this kind may return `JobError::snooze(delay)`: each snooze
/// runs the job again after `delay` without spending an attempt. Default 100; the snooze
/// after the last one fails the job, saying it snoozed that many times.
///
/// ```
/// # use jobqueue::{job, JobError};
/// # use std::time::Duration;
/// // Waits for a report that another system prepares, for at most a day.
/// #[job(max_snoozes = 1440)]
/// async fn fetch_report(report_id: u64) -> Result<String, JobError> {
///     # let ready = true;
///     if !ready {
///         return Err(JobError::snooze(Duration::from_secs(60)));
///     }
///     Ok(format!("report {report_id}"))
/// }
/// ```
///
/// ## `concurrency`
///
/// At most this many jobs of one key run at once, across every worker of every process on
/// the database: 1 to 1000. The key is the kind's name, or [`concurrency_key`](#concurrency_key)
/// rendered from the job's arguments. A job whose key is full when a worker claims it is
/// set `blocked` and steps aside for the jobs behind it; the job that frees a slot makes the
/// key's next blocked job `ready`. A slot is held from the claim to the write of the job's
/// outcome (whatever it is) or the reclaim of its lease. Default: no limit.
///
/// ```
/// # use jobqueue::job;
/// // One rebuild at a time, fleet-wide.
/// #[job(concurrency = 1)]
/// async fn rebuild_search_index() {}
/// ```
///
/// ## `concurrency_key`
///
/// The key of the [`concurrency`](#concurrency) limit, a template like [`key`](#key)'s:
/// `{argument}` placeholders replaced by the arguments' `Display`. Kinds that render the same
/// key share its slots, so keep their limits equal. `EnqueueOptions::concurrency_key`
/// overrides it for one enqueue. Default: the kind's name (one limit for the whole kind).
///
/// ```
/// # use jobqueue::job;
/// // At most 2 exports per account at once; other accounts' exports are not held up.
/// #[job(concurrency = 2, concurrency_key = "account:{account_id}")]
/// async fn export_account(account_id: u64, format: String) {}
/// ```
///
/// ## `rate_limit`
///
/// At most N jobs of one key start in any window of the given length, by the server's
/// clock: `"N/window"` with N from 1 to 1000 and a window as for [`lease`](#lease) (`"100/1m"`,
/// `"5/2s"`). Starts are counted at the claim: a retry starts again and counts again, and a
/// long job does not hold back the next start. A job over the rate waits `blocked` until the
/// window lets it start. Default: no limit.
///
/// ```
/// # use jobqueue::job;
/// // The mail provider takes 100 messages a minute.
/// #[job(rate_limit = "100/1m")]
/// async fn send_newsletter(user_id: u64) {}
/// ```
///
/// ## `rate_key`
///
/// The key of the [`rate_limit`](#rate_limit), a template like [`key`](#key)'s.
/// `EnqueueOptions::rate_key` overrides it for one enqueue. Default: the kind's name.
///
/// ```
/// # use jobqueue::job;
/// // 100 starts a minute per provider.
/// #[job(rate_limit = "100/1m", rate_key = "provider:{provider}")]
/// async fn send_mail(provider: String, to: String) {}
/// ```
///
/// A kind may have both limits. The guide `jobqueue::guide::limits` says what holds across
/// workers and what a limit costs.
///
/// ## `crate`
///
/// The path of the `jobqueue` crate, for code that reaches it under another name (a
/// renamed dependency, or a re-export). Default: `::jobqueue`.
///
/// ```
/// extern crate jobqueue as jq;
///
/// #[jq::job(crate = "jq")]
/// async fn ping() {}
/// ```
///
/// # Equivalent code without `#[job]`
///
/// The first example expands to this (and to a compile-time check of each argument type,
/// placed so that a type that does not fit is reported at the type itself). Write it by
/// hand where the macro does not fit, for instance to implement `run` differently:
///
/// ```
/// use jobqueue::{Job, JobContext, JobError, JobOptions};
/// use jobqueue::context::{IntoJobResult, JobOutput};
///
/// /// Export one order as a file.
/// async fn export_order(ctx: JobContext, order_id: u64, format: String) -> Result<(), JobError> {
///     Ok(())
/// }
///
/// /// Arguments of the [`export_order`] job.
/// #[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
/// struct ExportOrder {
///     /// The `order_id` argument.
///     pub order_id: u64,
///     /// The `format` argument.
///     pub format: String,
/// }
///
/// impl Job for ExportOrder {
///     const KIND: &'static str = "export_order";
///     const OPTIONS: JobOptions = JobOptions::DEFAULT.queue("exports").max_attempts(5);
///
///     fn task_key(&self) -> jobqueue::Result<String> {
///         Ok(jobqueue::key::fit_key(format!("export:{}:{}", self.order_id, self.format)))
///     }
///
///     async fn run(self, ctx: JobContext) -> Result<(), JobError> {
///         // The function takes the context: its output slot is kept aside.
///         let slot = ctx.clone();
///         let output = export_order(ctx, self.order_id, self.format).await;
///         slot.set_output(&output.into_job_result()?);
///         Ok(())
///     }
/// }
///
/// impl JobOutput for ExportOrder {
///     type Output = <Result<(), JobError> as IntoJobResult>::Output;
/// }
///
/// jobqueue::register!(ExportOrder);
/// # assert!(jobqueue::registry::lookup("export_order").is_some());
/// ```
///
/// An option given as a duration becomes a `Duration` (`lease = "2m"` gives
/// `.lease(Duration::from_secs(120))`), and `backoff` a `jobqueue::Backoff`
/// (`"linear(10s, 10m)"` gives `.backoff(Backoff::Linear { step: Duration::from_secs(10),
/// max: Duration::from_secs(600) })`).
#[proc_macro_attribute]
pub fn job(args: TokenStream, item: TokenStream) -> TokenStream {
    match expand::job(args.into(), item.clone().into()) {
        Ok(tokens) => tokens.into(),
        Err(errors) => {
            // The function as written still compiles beside the errors, so the rest of the
            // crate (and the IDE) keeps working.
            let mut out = item;
            out.extend(TokenStream::from(errors.to_compile_error()));
            out
        }
    }
}
