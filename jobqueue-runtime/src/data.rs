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
use std::collections::HashMap;
use std::fmt;
use std::ops::{Deref, DerefMut};
use std::sync::Arc;

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
}

impl DataNeed {
    /// The need for a `T`.
    pub const fn of<T: 'static>() -> Self {
        DataNeed {
            type_id: TypeId::of::<T>,
            type_name: std::any::type_name::<T>,
        }
    }

    /// The type's name, for messages.
    pub fn type_name(&self) -> &'static str {
        (self.type_name)()
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
