//! The conformance suite's plumbing: one test body run on every backend, and SQL that reads
//! the same on both.
//!
//! A test written once as `async fn name(backend: Backend)` runs on MySQL/MariaDB and on
//! PostgreSQL through [`on_every_backend!`](crate::on_every_backend), as `mysql::name` and
//! `postgres::name` (`cargo test postgres::` runs one backend's half). Its raw reads go through
//! [`sql_i64`], [`sql_text`] and [`sql_exec`], which take MySQL's `?` placeholders and number
//! them for PostgreSQL; the SQL itself must be what both accept (`COUNT(*)`, `CAST(x AS
//! CHAR)` is not: use the store's functions, or a column that is text on both).

use jobqueue::testing::TestDatabase;
use jobqueue::{Backend, Queue};

/// Runs each listed test body, an `async fn name(backend: Backend)` of the calling file, on
/// every backend: as `#[tokio::test]`s `mysql::name` and `postgres::name` (multi-threaded
/// runtime of two threads). Bodies listed after `; current_thread:` run on a single-threaded
/// runtime instead, as a test whose [`LogCapture`](crate::LogCapture) must see every task's
/// logs needs (the capture is the thread's default subscriber).
#[macro_export]
macro_rules! on_every_backend {
    ($($name:ident),* $(,)? ; current_thread: $($one:ident),+ $(,)?) => {
        $crate::on_every_backend!(@each mysql, MySql; [$($name),*]; [$($one),+]);
        $crate::on_every_backend!(@each postgres, Postgres; [$($name),*]; [$($one),+]);
    };
    ($($name:ident),+ $(,)?) => {
        $crate::on_every_backend!(@each mysql, MySql; [$($name),+]; []);
        $crate::on_every_backend!(@each postgres, Postgres; [$($name),+]; []);
    };
    (@each $module:ident, $variant:ident; [$($name:ident),*]; [$($one:ident),*]) => {
        mod $module {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $name() {
                    super::$name($crate::Backend::$variant).await
                }
            )*
            $(
                #[tokio::test(flavor = "current_thread")]
                async fn $one() {
                    super::$one($crate::Backend::$variant).await
                }
            )*
        }
    };
}

/// A queue on a new, migrated database of `backend` ([`TestDatabase::new_on`], kept).
pub async fn fresh_queue_on(backend: Backend, prefix: &str) -> Queue {
    let db = TestDatabase::new_on(backend, prefix)
        .await
        .unwrap_or_else(|e| panic!("cannot create a {backend} test database: {e}"));
    let queue = db.queue().clone();
    db.keep();
    queue
}

/// The URL of the queue's database on its test server (the server's URL with the database's
/// name, without options), for a second pool or a proxy in front of it. On PostgreSQL it
/// asks for no TLS, so that a proxy can read the statements.
pub async fn plain_database_url(queue: &Queue) -> String {
    match queue.backend() {
        Backend::Postgres => {
            let name = sql_text(queue, "SELECT CAST(current_database() AS TEXT)", &[])
                .await
                .expect("a database name");
            let server =
                jobqueue::testing::TestServer::shared_postgres().unwrap_or_else(|e| panic!("{e}"));
            format!(
                "{}?sslmode=disable",
                crate::with_database(server.url(), &name)
            )
        }
        _ => crate::database_url(queue.mysql_pool().expect("a MySQL queue")).await,
    }
}

/// The slot of a backend's run of a test in a pair of mailboxes or counters
/// (`static X: [Mailbox<T>; 2]`): a test's two runs go on at once in one process, and each
/// hears from its own jobs.
pub fn slot(backend: Backend) -> usize {
    match backend {
        Backend::Postgres => 1,
        _ => 0,
    }
}

/// [`slot`] of the test whose worker gave a job `effects`.
pub fn on(effects: &crate::Effects) -> usize {
    match effects {
        crate::Effects::Postgres(_) => 1,
        crate::Effects::MySql(_) => 0,
    }
}

/// A value bound to a placeholder of [`sql_i64`], [`sql_text`] or [`sql_exec`].
#[derive(Debug, Clone, Copy)]
pub enum Arg<'a> {
    /// An integer (ids, counts, attempts).
    Int(i64),
    /// A text (statuses, queues, keys, owners).
    Text(&'a str),
}

/// `sql` with MySQL's `?` placeholders numbered `$1, $2...` for PostgreSQL (a `?` inside a
/// quoted string is left alone).
pub fn numbered(sql: &str) -> String {
    let mut out = String::with_capacity(sql.len() + 8);
    let mut n = 0;
    let mut quoted = false;
    for c in sql.chars() {
        match c {
            '\'' => {
                quoted = !quoted;
                out.push(c);
            }
            '?' if !quoted => {
                n += 1;
                out.push('$');
                out.push_str(&n.to_string());
            }
            _ => out.push(c),
        }
    }
    out
}

macro_rules! bound {
    ($q:expr, $args:expr) => {{
        let mut q = $q;
        for a in $args {
            q = match *a {
                Arg::Int(v) => q.bind(v),
                Arg::Text(v) => q.bind(v),
            };
        }
        q
    }};
}

/// The one integer `sql` selects on the queue's database (a `COUNT(*)`, an id, an
/// `attempts`); panics with the statement if it fails.
pub async fn sql_i64(queue: &Queue, sql: &str, args: &[Arg<'_>]) -> i64 {
    let r = match queue.backend() {
        Backend::Postgres => {
            let sql = numbered(sql);
            let q = bound!(sqlx::query_scalar::<_, i64>(&sql), args);
            q.fetch_one(queue.postgres_pool().expect("a PostgreSQL queue"))
                .await
        }
        _ => {
            let q = bound!(sqlx::query_scalar::<_, i64>(sql), args);
            q.fetch_one(queue.mysql_pool().expect("a MySQL queue"))
                .await
        }
    };
    r.unwrap_or_else(|e| panic!("{sql}: {e}"))
}

/// The one text (or NULL) `sql` selects on the queue's database; panics with the statement
/// if it fails or selects no row.
pub async fn sql_text(queue: &Queue, sql: &str, args: &[Arg<'_>]) -> Option<String> {
    let r = match queue.backend() {
        Backend::Postgres => {
            let sql = numbered(sql);
            let q = bound!(sqlx::query_scalar::<_, Option<String>>(&sql), args);
            q.fetch_one(queue.postgres_pool().expect("a PostgreSQL queue"))
                .await
        }
        _ => {
            let q = bound!(sqlx::query_scalar::<_, Option<Vec<u8>>>(sql), args);
            q.fetch_one(queue.mysql_pool().expect("a MySQL queue"))
                .await
                .map(|b| b.map(|b| String::from_utf8_lossy(&b).into_owned()))
        }
    };
    r.unwrap_or_else(|e| panic!("{sql}: {e}"))
}

/// Runs `sql` on the queue's database and returns the rows it changed; panics with the
/// statement if it fails.
pub async fn sql_exec(queue: &Queue, sql: &str, args: &[Arg<'_>]) -> u64 {
    let r = match queue.backend() {
        Backend::Postgres => {
            let sql = numbered(sql);
            let q = bound!(sqlx::query(&sql), args);
            q.execute(queue.postgres_pool().expect("a PostgreSQL queue"))
                .await
                .map(|r| r.rows_affected())
        }
        _ => {
            let q = bound!(sqlx::query(sql), args);
            q.execute(queue.mysql_pool().expect("a MySQL queue"))
                .await
                .map(|r| r.rows_affected())
        }
    };
    r.unwrap_or_else(|e| panic!("{sql}: {e}"))
}

/// A transaction of the test's own on a queue's database that holds row locks, as another
/// session of the application would; [`RowLocks::release`] rolls it back (so does a drop).
#[derive(Debug)]
pub enum RowLocks {
    /// On MySQL/MariaDB.
    MySql(sqlx::Transaction<'static, sqlx::MySql>),
    /// On PostgreSQL.
    Postgres(sqlx::Transaction<'static, sqlx::Postgres>),
}

impl RowLocks {
    /// Ends the transaction (a rollback), releasing its locks.
    pub async fn release(self) {
        match self {
            RowLocks::MySql(tx) => tx.rollback().await,
            RowLocks::Postgres(tx) => tx.rollback().await,
        }
        .expect("roll the locking transaction back")
    }
}

/// Runs `sql`, a locking read of job ids (`SELECT id FROM job_queue WHERE ... FOR UPDATE`,
/// MySQL placeholders), in a new transaction on the queue's database, and returns the
/// transaction, which holds the rows until it is released, with the ids read.
pub async fn lock_rows(queue: &Queue, sql: &str, args: &[Arg<'_>]) -> (RowLocks, Vec<u64>) {
    match queue.backend() {
        Backend::Postgres => {
            let pool = queue.postgres_pool().expect("a PostgreSQL queue");
            let mut tx = pool.begin().await.expect("begin");
            let sql = numbered(sql);
            let q = bound!(sqlx::query_scalar::<_, i64>(&sql), args);
            let ids = q
                .fetch_all(&mut *tx)
                .await
                .unwrap_or_else(|e| panic!("{sql}: {e}"));
            (
                RowLocks::Postgres(tx),
                ids.into_iter().map(|id| id as u64).collect(),
            )
        }
        _ => {
            let pool = queue.mysql_pool().expect("a MySQL queue");
            let mut tx = pool.begin().await.expect("begin");
            let q = bound!(sqlx::query_scalar::<_, u64>(sql), args);
            let ids = q
                .fetch_all(&mut *tx)
                .await
                .unwrap_or_else(|e| panic!("{sql}: {e}"));
            (RowLocks::MySql(tx), ids)
        }
    }
}

/// Locks job `id`'s row ([`lock_rows`]) until the [`RowLocks`] returned is released.
pub async fn lock_job(queue: &Queue, id: u64) -> RowLocks {
    let (locks, ids) = lock_rows(
        queue,
        "SELECT id FROM job_queue WHERE id = ? FOR UPDATE",
        &[Arg::Int(id as i64)],
    )
    .await;
    assert_eq!(ids, [id], "job {id} exists");
    locks
}

#[cfg(test)]
mod tests {
    use super::numbered;

    #[test]
    fn placeholders_are_numbered_outside_strings() {
        assert_eq!(
            numbered("SELECT ? FROM t WHERE a = '?' AND b IN (?, ?)"),
            "SELECT $1 FROM t WHERE a = '?' AND b IN ($2, $3)"
        );
    }
}
