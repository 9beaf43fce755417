//! The databases a queue runs on, and the types through which an application hands the queue
//! a pool or a connection of its own.
//!
//! A [`Queue`](crate::Queue) is one type whatever its database: the backend is chosen by the
//! URL given to [`Queue::connect`](crate::Queue::connect) (`mysql://`, `mariadb://`,
//! `postgres://` or `postgresql://`) or by the pool given to
//! [`Queue::from_pool`](crate::Queue::from_pool). Where an application passes its own
//! connection or transaction ([`Queue::enqueue_in`](crate::Queue::enqueue_in),
//! [`JobContext::complete_in`](crate::JobContext::complete_in)), that stays typed: a
//! `&mut MySqlConnection` or a `&mut PgConnection`, a `Transaction<'_, MySql>` or a
//! `Transaction<'_, Postgres>`. Handing a queue a connection of the other database is an
//! [`Error::WrongBackend`](crate::Error::WrongBackend).

use std::fmt;

use sqlx::mysql::{MySqlConnection, MySqlPool};
use sqlx::postgres::{PgConnection, PgPool};

/// A database a queue runs on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Backend {
    /// MySQL 8.0+ or MariaDB 10.6+.
    MySql,
    /// PostgreSQL 13+.
    Postgres,
}

impl Backend {
    /// The backend a database URL names by its scheme: `mysql://` and `mariadb://` for
    /// [`Backend::MySql`], `postgres://` and `postgresql://` for [`Backend::Postgres`].
    pub fn of_url(url: &str) -> Option<Backend> {
        let scheme = url.split_once("://")?.0.to_ascii_lowercase();
        match scheme.as_str() {
            "mysql" | "mariadb" => Some(Backend::MySql),
            "postgres" | "postgresql" => Some(Backend::Postgres),
            _ => None,
        }
    }

    /// The backend's name as users know it: `"MySQL/MariaDB"` or `"PostgreSQL"`.
    pub fn name(self) -> &'static str {
        match self {
            Backend::MySql => "MySQL/MariaDB",
            Backend::Postgres => "PostgreSQL",
        }
    }
}

impl fmt::Display for Backend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A pool of either database, as [`Queue::pool`](crate::Queue::pool) returns it and
/// [`Queue::from_pool`](crate::Queue::from_pool) takes it (a `MySqlPool` or a `PgPool`
/// converts into it).
#[derive(Debug, Clone)]
#[non_exhaustive]
pub enum DatabasePool {
    /// A MySQL/MariaDB pool.
    MySql(MySqlPool),
    /// A PostgreSQL pool.
    Postgres(PgPool),
}

impl DatabasePool {
    /// The MySQL/MariaDB pool, if the queue is on MySQL or MariaDB.
    pub fn mysql(&self) -> Option<&MySqlPool> {
        match self {
            DatabasePool::MySql(pool) => Some(pool),
            DatabasePool::Postgres(_) => None,
        }
    }

    /// The PostgreSQL pool, if the queue is on PostgreSQL.
    pub fn postgres(&self) -> Option<&PgPool> {
        match self {
            DatabasePool::Postgres(pool) => Some(pool),
            DatabasePool::MySql(_) => None,
        }
    }

    /// Which database the pool is connected to.
    pub fn backend(&self) -> Backend {
        match self {
            DatabasePool::MySql(_) => Backend::MySql,
            DatabasePool::Postgres(_) => Backend::Postgres,
        }
    }
}

impl From<MySqlPool> for DatabasePool {
    fn from(pool: MySqlPool) -> Self {
        DatabasePool::MySql(pool)
    }
}

impl From<PgPool> for DatabasePool {
    fn from(pool: PgPool) -> Self {
        DatabasePool::Postgres(pool)
    }
}

/// A connection of the application's, borrowed for one call: the backend-typed form the store
/// takes.
#[derive(Debug)]
pub(crate) enum ConnRef<'c> {
    MySql(&'c mut MySqlConnection),
    Postgres(&'c mut PgConnection),
}

impl ConnRef<'_> {
    pub(crate) fn backend(&self) -> Backend {
        match self {
            ConnRef::MySql(_) => Backend::MySql,
            ConnRef::Postgres(_) => Backend::Postgres,
        }
    }
}

mod sealed {
    pub trait Sealed {}
    impl Sealed for sqlx::mysql::MySqlConnection {}
    impl Sealed for sqlx::postgres::PgConnection {}
    impl Sealed for sqlx::Transaction<'_, sqlx::MySql> {}
    impl Sealed for sqlx::Transaction<'_, sqlx::Postgres> {}
    impl Sealed for sqlx::pool::PoolConnection<sqlx::MySql> {}
    impl Sealed for sqlx::pool::PoolConnection<sqlx::Postgres> {}
    impl Sealed for sqlx::MySql {}
    impl Sealed for sqlx::Postgres {}
}

/// A connection a queue can enqueue on, inside whatever transaction it has open: a
/// `MySqlConnection` or `PgConnection`, a `Transaction` of either database (pass `&mut tx`),
/// or a connection taken from a pool. Sealed: the library implements it for those.
pub trait JobConnection: sealed::Sealed + Send {
    #[doc(hidden)]
    #[allow(private_interfaces)]
    fn conn_ref(&mut self) -> ConnRef<'_>;
}

macro_rules! job_connection {
    ($variant:ident, $($ty:ty),+) => {$(
        impl JobConnection for $ty {
            #[allow(private_interfaces)]
            fn conn_ref(&mut self) -> ConnRef<'_> {
                ConnRef::$variant(&mut *self)
            }
        }
    )+};
}

job_connection!(
    MySql,
    MySqlConnection,
    sqlx::Transaction<'_, sqlx::MySql>,
    sqlx::pool::PoolConnection<sqlx::MySql>
);
job_connection!(
    Postgres,
    PgConnection,
    sqlx::Transaction<'_, sqlx::Postgres>,
    sqlx::pool::PoolConnection<sqlx::Postgres>
);

/// A database whose transactions a job can complete in: `sqlx::MySql` or `sqlx::Postgres`
/// (see [`JobContext::complete_in`](crate::JobContext::complete_in)). Sealed.
pub trait JobDatabase: sqlx::Database + sealed::Sealed {
    #[doc(hidden)]
    #[allow(private_interfaces)]
    fn transaction_ref<'t>(tx: &'t mut sqlx::Transaction<'_, Self>) -> ConnRef<'t>;
}

impl JobDatabase for sqlx::MySql {
    #[allow(private_interfaces)]
    fn transaction_ref<'t>(tx: &'t mut sqlx::Transaction<'_, Self>) -> ConnRef<'t> {
        ConnRef::MySql(&mut *tx)
    }
}

impl JobDatabase for sqlx::Postgres {
    #[allow(private_interfaces)]
    fn transaction_ref<'t>(tx: &'t mut sqlx::Transaction<'_, Self>) -> ConnRef<'t> {
        ConnRef::Postgres(&mut *tx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn url_schemes_name_their_backend() {
        assert_eq!(Backend::of_url("mysql://root@h/db"), Some(Backend::MySql));
        assert_eq!(Backend::of_url("MariaDB://root@h/db"), Some(Backend::MySql));
        assert_eq!(
            Backend::of_url("postgres://u@h/db"),
            Some(Backend::Postgres)
        );
        assert_eq!(
            Backend::of_url("postgresql://u@h/db"),
            Some(Backend::Postgres)
        );
        assert_eq!(Backend::of_url("sqlite://x.db"), None);
        assert_eq!(Backend::of_url("no scheme"), None);
    }
}
