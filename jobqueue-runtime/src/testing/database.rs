//! A database of its own for each test, dropped when the test is done with it.

use std::fmt;

use jobqueue_testserver::{Error, Result, TestServer};

use crate::queue::Queue;

/// A new database on the shared test server ([`TestServer::shared`]: a throwaway server, or
/// the one `JOBQUEUE_TEST_DATABASE_URL` names), dropped when this guard is dropped.
///
/// [`TestDatabase::new`] migrates it and connects a [`Queue`] to it; tests in parallel each
/// get their own, so none sees another's jobs.
///
/// ```no_run
/// # extern crate jobqueue_runtime as jobqueue;
/// use jobqueue::testing::TestDatabase;
///
/// # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
/// let db = TestDatabase::new("signup").await?;
/// let queue = db.queue();
/// // ... enqueue, drain, assert ...
/// # Ok(()) }
/// // `db` goes out of scope: its database is dropped.
/// ```
///
/// # Dropping
///
/// `Drop` cannot await, so the guard drops the database with a blocking call on a connection
/// and a runtime of its own, in a thread of its own: it works inside `#[tokio::test]` of
/// either flavour and takes a few milliseconds. Stop the test's workers first: a session that
/// still holds one of its tables in an open transaction delays the drop by up to 10 s, after
/// which the database is left behind (and logged at WARN). A database of a server this
/// process started goes away with the server anyway, even when a test process is killed;
/// on an external server, a database left behind is named `jqtest_...`.
///
/// [`TestDatabase::keep`] leaves the database in place, for looking at it after a test.
pub struct TestDatabase {
    server: &'static TestServer,
    name: String,
    url: String,
    queue: Option<Queue>,
    keep: bool,
}

/// The size of the pool of a [`TestDatabase`]'s queue.
pub const TEST_POOL_CONNECTIONS: u32 = 10;

impl TestDatabase {
    /// A new database, migrated, with a [`Queue`] connected to it. `prefix` (a test's name)
    /// goes into the database's name, to find it on the server.
    ///
    /// The queue's pool holds up to [`TEST_POOL_CONNECTIONS`] connections, not the default
    /// two: a test reads and writes beside its workers (assertions, a transaction held
    /// open, `Queue::wait`), and should not wait for a connection its worker holds. A test of
    /// the defaults themselves connects a queue of its own with `Queue::connect(db.url())`.
    pub async fn new(prefix: &str) -> Result<TestDatabase> {
        Self::new_on(crate::Backend::MySql, prefix).await
    }

    /// [`TestDatabase::new`] on `backend`'s shared test server: for PostgreSQL,
    /// [`TestServer::shared_postgres`] (a throwaway server, or the one
    /// `JOBQUEUE_TEST_POSTGRES_URL` names).
    pub async fn new_on(backend: crate::Backend, prefix: &str) -> Result<TestDatabase> {
        let mut db = TestDatabase::empty_on(backend, prefix).await?;
        let config = crate::QueueConfig::default().max_connections(TEST_POOL_CONNECTIONS);
        let queue = Queue::connect_with(&db.url, config)
            .await
            .map_err(|e| db.error("connect to", e))?;
        queue.migrate().await.map_err(|e| db.error("migrate", e))?;
        db.queue = Some(queue);
        Ok(db)
    }

    /// A new, empty database: not migrated, no queue connected (for tests of migrations and
    /// of the schema checks). [`TestDatabase::url`] connects to it.
    pub async fn empty(prefix: &str) -> Result<TestDatabase> {
        Self::empty_on(crate::Backend::MySql, prefix).await
    }

    /// [`TestDatabase::empty`] on `backend`'s shared test server.
    pub async fn empty_on(backend: crate::Backend, prefix: &str) -> Result<TestDatabase> {
        let server = match backend {
            crate::Backend::Postgres => TestServer::shared_postgres()?,
            _ => TestServer::shared()?,
        };
        let url = server.create_database(prefix).await?;
        let name = database_name(&url).to_owned();
        Ok(TestDatabase {
            server,
            name,
            url,
            queue: None,
            keep: false,
        })
    }

    /// Runs the application's own migrations (a [`sqlx::migrate!`] migrator, or one built
    /// with [`Migrator::new`](sqlx::migrate::Migrator::new)) on this database, so that a test
    /// has the application's tables beside the queue's. jobqueue keeps its history in a table
    /// of its own, so the two migrators share the database in either order.
    ///
    /// ```no_run
    /// # extern crate jobqueue_runtime as jobqueue;
    /// use jobqueue::testing::TestDatabase;
    ///
    /// // The application's `migrations/` folder, embedded at build time.
    /// static MIGRATOR: sqlx::migrate::Migrator = sqlx::migrate!("./migrations");
    ///
    /// # async fn demo() -> jobqueue::Result<()> {
    /// let db = TestDatabase::new("checkout").await?;
    /// db.migrate_with(&MIGRATOR).await?;
    /// sqlx::query("INSERT INTO orders (id) VALUES (1)")
    ///     .execute(db.queue().mysql_pool().expect("a MySQL test database"))
    ///     .await?;
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    ///
    /// [`Error::Migrate`](crate::Error::Migrate) when a migration fails, or a database error
    /// when the database cannot be reached.
    pub async fn migrate_with(&self, migrator: &sqlx::migrate::Migrator) -> crate::Result<()> {
        if crate::Backend::of_url(&self.url) == Some(crate::Backend::Postgres) {
            let mut conn = <sqlx::PgConnection as sqlx::Connection>::connect(&self.url).await?;
            let outcome = migrator.run(&mut conn).await;
            let _ = sqlx::Connection::close(conn).await;
            outcome?;
            return Ok(());
        }
        let mut conn = <sqlx::MySqlConnection as sqlx::Connection>::connect(&self.url).await?;
        let outcome = migrator.run(&mut conn).await;
        let _ = sqlx::Connection::close(conn).await;
        outcome?;
        Ok(())
    }

    /// The queue on this database.
    ///
    /// # Panics
    ///
    /// For a database made with [`TestDatabase::empty`], which has none: connect one with
    /// `Queue::connect(db.url())`.
    pub fn queue(&self) -> &Queue {
        self.queue.as_ref().unwrap_or_else(|| {
            panic!(
                "the test database `{}` was made with `TestDatabase::empty`, which connects no \
                 queue; use `TestDatabase::new`, or `Queue::connect(db.url())`",
                self.name
            )
        })
    }

    /// Its URL: the server's, with this database.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// Its name, `jqtest_{prefix}_...`.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Leaves the database in place when the guard goes, and returns its URL. On a server
    /// this process started it still goes away with the server.
    pub fn keep(mut self) -> String {
        self.keep = true;
        std::mem::take(&mut self.url)
    }

    fn error(&self, what: &str, e: crate::Error) -> Error {
        Error::Server(format!(
            "cannot {what} the test database `{}`: {e}",
            self.name
        ))
    }
}

impl Drop for TestDatabase {
    fn drop(&mut self) {
        if self.keep {
            return;
        }
        // Idle connections of the queue's pool do not hold the drop up, but there is no
        // reason to keep them either.
        drop(self.queue.take());
        if let Err(e) = self.server.drop_database_blocking(&self.name) {
            tracing::warn!(error = %e, "a test database was left behind");
        }
    }
}

impl fmt::Debug for TestDatabase {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TestDatabase")
            .field("name", &self.name)
            .field("migrated", &self.queue.is_some())
            .field("keep", &self.keep)
            .finish()
    }
}

/// The database part of a URL made by `TestServer::create_database`.
fn database_name(url: &str) -> &str {
    let base = url.split('?').next().unwrap_or(url);
    base.rsplit('/').next().unwrap_or(base)
}

#[cfg(test)]
mod tests {
    use super::database_name;

    #[test]
    fn the_name_is_the_last_part_of_the_path() {
        assert_eq!(database_name("mysql://root@h:1/jqtest_a_1"), "jqtest_a_1");
        assert_eq!(
            database_name("mysql://u:p@h/jqtest_b?ssl-mode=disabled"),
            "jqtest_b"
        );
    }
}
