//! The registry of job kinds: every `#[job]` submits one [`JobDescriptor`] at link time, and
//! the worker looks kinds up here by name. There is no list to maintain.

use std::collections::HashMap;
use std::fmt;
use std::future::Future;
use std::pin::Pin;

use serde_json::Value;

use crate::data::DataNeed;
use crate::error::{Error, JobError, Result};
use crate::job::{Job, JobContext, JobOptions};

/// The future of one erased job run.
pub type RunFuture = Pin<Box<dyn Future<Output = Result<(), RunError>> + Send + 'static>>;

/// Runs a job from its JSON payload: the erased form of [`Job::run`].
pub type RunFn = fn(Value, JobContext) -> RunFuture;

/// Builds the arguments of a periodic job's tick.
pub type CronPayloadFn = fn() -> std::result::Result<Value, serde_json::Error>;

/// The limit keys of a periodic job's tick: [`Job::concurrency_key`] and [`Job::rate_key`]
/// of the arguments the tick is built with.
pub type CronKeysFn = fn() -> (Option<String>, Option<String>);

/// How one erased run ended, when it did not succeed.
#[derive(Debug)]
pub enum RunError {
    /// The payload does not deserialize into the kind's arguments: retrying cannot help.
    Payload(String),
    /// The job returned an error.
    Job(JobError),
}

/// One job kind as the runtime sees it: its name, options and an erased `run`.
///
/// Built at compile time by [`JobDescriptor::of`]; `#[job]` submits one per kind to
/// `inventory`. To register a hand-written [`Job`] impl, use `jobqueue::register!`.
pub struct JobDescriptor {
    kind: &'static str,
    type_name: &'static str,
    options: JobOptions,
    run: RunFn,
    cron_payload: Option<CronPayloadFn>,
    cron_keys: Option<CronKeysFn>,
    data: &'static [DataNeed],
}

impl JobDescriptor {
    /// The descriptor of `J`; `type_name` names the argument type in error messages (the
    /// macro passes `module_path!()` and the struct name).
    pub const fn of<J: Job>(type_name: &'static str) -> Self {
        JobDescriptor {
            kind: J::KIND,
            type_name,
            options: J::OPTIONS,
            run: run_erased::<J>,
            cron_payload: None,
            cron_keys: None,
            data: J::DATA,
        }
    }

    /// Sets how a periodic job's tick builds its arguments. Its limits take the kind's name
    /// as key; [`with_default_payload`](Self::with_default_payload) also takes the keys
    /// from the arguments.
    pub const fn with_cron_payload(mut self, f: CronPayloadFn) -> Self {
        self.cron_payload = Some(f);
        self
    }

    /// Sets the tick arguments of a periodic kind to `J::default()` (what `#[job(cron)]`
    /// and `jobqueue::register!(Type, periodic)` use), and its limit keys to those of
    /// `J::default()`, so that a tick shares its slots with enqueued jobs of the same key.
    pub const fn with_default_payload<J: Job + Default>(mut self) -> Self {
        self.cron_keys = Some(default_keys::<J>);
        self.with_cron_payload(default_payload::<J>)
    }

    /// The kind name.
    pub fn kind(&self) -> &'static str {
        self.kind
    }

    /// The argument type's path, for error messages.
    pub fn type_name(&self) -> &'static str {
        self.type_name
    }

    /// The kind's options.
    pub fn options(&self) -> &JobOptions {
        &self.options
    }

    /// The shared state its runs take from the worker ([`Job::DATA`]).
    pub fn data_needs(&self) -> &'static [DataNeed] {
        self.data
    }

    /// Runs a job of this kind from its payload.
    pub fn run(&self, payload: Value, ctx: JobContext) -> RunFuture {
        (self.run)(payload, ctx)
    }

    pub(crate) fn cron_payload(&self) -> Option<CronPayloadFn> {
        self.cron_payload
    }

    /// The tick's `(concurrency_key, rate_key)`; `None` each where the kind's name is used.
    pub(crate) fn cron_keys(&self) -> (Option<String>, Option<String>) {
        self.cron_keys.map_or((None, None), |f| f())
    }
}

impl fmt::Debug for JobDescriptor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("JobDescriptor")
            .field("kind", &self.kind)
            .field("type_name", &self.type_name)
            .field("options", &self.options)
            .finish_non_exhaustive()
    }
}

inventory::collect!(JobDescriptor);

fn default_payload<J: Job + Default>() -> std::result::Result<Value, serde_json::Error> {
    serde_json::to_value(J::default())
}

fn default_keys<J: Job + Default>() -> (Option<String>, Option<String>) {
    let args = J::default();
    (args.concurrency_key(), args.rate_key())
}

fn run_erased<J: Job>(payload: Value, ctx: JobContext) -> RunFuture {
    Box::pin(async move {
        let args: J = serde_path_to_error::deserialize(payload).map_err(|e| {
            let path = e.path().to_string();
            let at = if path == "." {
                String::new()
            } else {
                format!(" at `{path}`")
            };
            RunError::Payload(format!(
                "payload does not match the arguments of job `{}`{at}: {}",
                J::KIND,
                e.inner()
            ))
        })?;
        args.run(ctx).await.map_err(RunError::Job)
    })
}

/// Every registered kind, by name.
#[derive(Debug)]
pub struct Registry {
    kinds: HashMap<&'static str, &'static JobDescriptor>,
}

impl Registry {
    /// Collects the kinds registered in this binary and checks them: no two with one name,
    /// valid queue names, at least one attempt, a lease of at least one second, a cron
    /// schedule that parses.
    pub fn load() -> Result<Self> {
        Self::from_descriptors(inventory::iter::<JobDescriptor>.into_iter())
    }

    pub(crate) fn from_descriptors(
        descriptors: impl Iterator<Item = &'static JobDescriptor>,
    ) -> Result<Self> {
        let mut kinds: HashMap<&'static str, &'static JobDescriptor> = HashMap::new();
        for d in descriptors {
            if let Some(other) = kinds.insert(d.kind, d) {
                return Err(Error::Registry(format!(
                    "two job kinds are named `{}`: `{}` and `{}`; give one of them another name with `#[job(name = \"...\")]`",
                    d.kind, other.type_name, d.type_name
                )));
            }
            check_descriptor(d)?;
        }
        Ok(Registry { kinds })
    }

    /// The kind registered under `name`.
    pub fn get(&self, name: &str) -> Option<&'static JobDescriptor> {
        self.kinds.get(name).copied()
    }

    /// All kinds, sorted by name.
    pub fn kinds(&self) -> Vec<&'static JobDescriptor> {
        let mut v: Vec<_> = self.kinds.values().copied().collect();
        v.sort_by_key(|d| d.kind);
        v
    }
}

/// The kind registered under `name` in this binary, if any.
pub fn lookup(name: &str) -> Option<&'static JobDescriptor> {
    inventory::iter::<JobDescriptor>
        .into_iter()
        .find(|d| d.kind == name)
}

/// Every kind registered in this binary, sorted by name (duplicates included: see
/// [`Registry::load`] for the checked view).
pub fn all() -> Vec<&'static JobDescriptor> {
    let mut v: Vec<_> = inventory::iter::<JobDescriptor>.into_iter().collect();
    v.sort_by_key(|d| d.kind);
    v
}

fn check_descriptor(d: &JobDescriptor) -> Result<()> {
    let o = &d.options;
    let bad = |what: String| Err(Error::Registry(format!("job `{}`: {what}", d.kind)));
    if d.kind.is_empty() || d.kind.len() > 128 {
        return bad("a kind name must be 1 to 128 bytes long".into());
    }
    if let Err(e) = crate::key::validate_queue(o.queue) {
        return bad(e.to_string());
    }
    if o.max_attempts == 0 {
        return bad("`max_attempts` must be at least 1".into());
    }
    if o.lease < std::time::Duration::from_secs(1) {
        return bad("`lease` must be at least 1s".into());
    }
    if let Some(expr) = o.cron {
        if let Err(e) = crate::cron::Schedule::parse(expr) {
            return bad(e.to_string());
        }
        if d.cron_payload.is_none() {
            return bad(
                "a `cron` job needs arguments it can build by itself (none, or all `Default`)"
                    .into(),
            );
        }
    }
    Ok(())
}
