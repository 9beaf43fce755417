//! Shared state for jobs: what a worker is given with [`WorkerBuilder::data`] and a job
//! receives as a [`Data<T>`] parameter.
//!
//! Kinds register themselves globally (there is no router to type-check against, as axum's
//! `State<S>` has), so state is kept by type, as apalis' `Data<T>` and graphile_worker's
//! extensions do. What makes it safe here: every kind declares the types it needs
//! ([`Job::DATA`](crate::Job::DATA)), and [`WorkerBuilder::build`] refuses a worker that
//! lacks one, naming the kind and the type, before any job runs.
//!
//! [`WorkerBuilder::data`]: crate::WorkerBuilder::data
//! [`WorkerBuilder::build`]: crate::WorkerBuilder::build

use std::any::{Any, TypeId};
use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::ops::{Deref, DerefMut};
use std::sync::{Arc, Mutex};

/// A value the worker was given with [`WorkerBuilder::data`](crate::WorkerBuilder::data),
/// as a parameter of a job function: a pool, an HTTP client, a configuration.
///
/// A `#[job]` parameter whose type is named `Data<T>` is not part of the payload: the worker
/// passes a clone of its `T` (so give it something cheap to clone, such as a pool or an
/// `Arc`). A worker that serves the kind's queue without a `T` is refused by `build()`.
/// (This example is compiled in the `jobqueue` crate's documentation of `#[job]`.)
///
/// ```ignore
/// use jobqueue::{job, Data, JobError, Queue, Worker};
/// use sqlx::MySqlPool;
///
/// #[job(queue = "emails")]
/// async fn send_welcome(db: Data<MySqlPool>, user_id: u64) -> Result<(), JobError> {
///     sqlx::query("UPDATE users SET welcomed = 1 WHERE id = ?")
///         .bind(user_id)
///         .execute(&*db)
///         .await?;
///     Ok(())
/// }
///
/// # async fn demo(queue: Queue, pool: MySqlPool) -> jobqueue::Result<()> {
/// Worker::builder(queue).queues(["emails"]).data(pool).build()?.run().await?;
/// # Ok(()) }
/// ```
///
/// Every worker also holds its own [`Queue`](crate::Queue): a job that takes
/// `Data<Queue>` enqueues follow-up jobs, in a transaction of its own if it likes.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Data<T>(pub T);

impl<T> Data<T> {
    /// The value itself.
    pub fn into_inner(self) -> T {
        self.0
    }
}

impl<T> Deref for Data<T> {
    type Target = T;

    fn deref(&self) -> &T {
        &self.0
    }
}

impl<T> DerefMut for Data<T> {
    fn deref_mut(&mut self) -> &mut T {
        &mut self.0
    }
}

/// A type of shared state a kind needs; see [`Job::DATA`](crate::Job::DATA).
#[derive(Clone, Copy)]
pub struct DataNeed {
    type_id: fn() -> TypeId,
    type_name: fn() -> &'static str,
    written: Option<&'static str>,
}

impl DataNeed {
    /// The need for a `T`.
    pub const fn of<T: 'static>() -> Self {
        DataNeed {
            type_id: TypeId::of::<T>,
            type_name: std::any::type_name::<T>,
            written: None,
        }
    }

    /// The same need, with `T` named in messages as `name`: the type as the job's code
    /// writes it (`#[job]` records the text of each `Data<T>` parameter this way).
    ///
    /// ```
    /// # extern crate jobqueue_runtime as jobqueue;
    /// use jobqueue::DataNeed;
    ///
    /// const NEED: DataNeed = DataNeed::of::<std::sync::Arc<String>>().named("Arc<String>");
    /// assert_eq!(NEED.type_name(), "Arc<String>");
    /// ```
    pub const fn named(self, name: &'static str) -> Self {
        DataNeed {
            written: Some(name),
            ..self
        }
    }

    /// The type's name, for messages: as [`DataNeed::named`] gave it, or else the type's
    /// [`std::any::type_name`] without the module paths (`Arc<Greeting>`, not
    /// `alloc::sync::Arc<app::Greeting>`).
    pub fn type_name(&self) -> &'static str {
        match self.written {
            Some(name) => name,
            None => short_type_name((self.type_name)()),
        }
    }

    pub(crate) fn type_id(&self) -> TypeId {
        (self.type_id)()
    }
}

impl fmt::Debug for DataNeed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("DataNeed").field(&self.type_name()).finish()
    }
}

/// `full` (a [`std::any::type_name`]) with every path cut down to its last segment:
/// `alloc::sync::Arc<app::Greeting>` becomes `Arc<Greeting>`. Each distinct name is
/// shortened once and kept for the life of the process (there are as many as types named
/// in messages).
pub(crate) fn short_type_name(full: &'static str) -> &'static str {
    static NAMES: Mutex<BTreeMap<&'static str, &'static str>> = Mutex::new(BTreeMap::new());
    let mut names = NAMES.lock().unwrap_or_else(|e| e.into_inner());
    names.entry(full).or_insert_with(|| {
        let short = strip_paths(full);
        if short == full {
            full
        } else {
            Box::leak(short.into_boxed_str())
        }
    })
}

fn strip_paths(full: &str) -> String {
    let mut out = String::with_capacity(full.len());
    let mut path = String::new();
    let flush = |path: &mut String, out: &mut String| {
        out.push_str(path.rsplit("::").next().unwrap_or(""));
        path.clear();
    };
    for c in full.chars() {
        if c.is_alphanumeric() || c == '_' || c == ':' {
            path.push(c);
        } else {
            flush(&mut path, &mut out);
            out.push(c);
        }
    }
    flush(&mut path, &mut out);
    out
}

/// One value a worker holds, with its type's name for messages.
type Entry = (&'static str, Arc<dyn Any + Send + Sync>);

/// The values a worker holds for its jobs, by type.
#[derive(Clone, Default)]
pub(crate) struct DataMap {
    values: Arc<HashMap<TypeId, Entry>>,
}

impl DataMap {
    pub(crate) fn insert<T: Send + Sync + 'static>(&mut self, value: T) {
        Arc::make_mut(&mut self.values).insert(
            TypeId::of::<T>(),
            (std::any::type_name::<T>(), Arc::new(value)),
        );
    }

    pub(crate) fn get<T: 'static>(&self) -> Option<&T> {
        self.values
            .get(&TypeId::of::<T>())
            .and_then(|(_, v)| v.downcast_ref())
    }

    pub(crate) fn contains(&self, need: &DataNeed) -> bool {
        self.values.contains_key(&need.type_id())
    }

    pub(crate) fn contains_type<T: 'static>(&self) -> bool {
        self.values.contains_key(&TypeId::of::<T>())
    }
}

impl fmt::Debug for DataMap {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut names: Vec<_> = self.values.values().map(|(name, _)| *name).collect();
        names.sort_unstable();
        f.debug_set().entries(names).finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn type_names_lose_their_paths_but_keep_their_shape() {
        assert_eq!(
            strip_paths("alloc::sync::Arc<app::Greeting>"),
            "Arc<Greeting>"
        );
        assert_eq!(
            strip_paths("(u64, &str, [core::option::Option<a::B>; 2])"),
            "(u64, &str, [Option<B>; 2])"
        );
        assert_eq!(
            DataNeed::of::<std::sync::Arc<String>>().type_name(),
            "Arc<String>"
        );
        assert_eq!(DataNeed::of::<u8>().named("Byte").type_name(), "Byte");
    }
}
