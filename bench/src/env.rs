//! Where the benchmark runs: a throwaway server with durable settings, or `DATABASE_URL`;
//! databases of its own on it; and the fast fills that set up each measurement.

use std::collections::BTreeMap;

use anyhow::Context as _;
use jobqueue::testing::TestServer;
use jobqueue::Queue;
use sqlx::{Connection as _, MySqlConnection, MySqlPool};

use crate::jobs::{LEASE_MS, MAX_ATTEMPTS, NOOP_KIND, QUEUE};
use crate::measure::text;

/// Options the throwaway server gets from the benchmark, before any the user sets in
/// `JOBQUEUE_TEST_SERVER_ARGS` (which come later and so win): the durable default of a
/// production server, a flush of the redo log at every commit, instead of the test suite's
/// faster setting.
pub(crate) const DURABLE_ARGS: &str = "--innodb-flush-log-at-trx-commit=1";

/// Puts [`DURABLE_ARGS`] in front of `JOBQUEUE_TEST_SERVER_ARGS`. Call before any thread starts.
pub(crate) fn prefer_durable_server_settings() {
    let user = std::env::var("JOBQUEUE_TEST_SERVER_ARGS").unwrap_or_default();
    std::env::set_var(
        "JOBQUEUE_TEST_SERVER_ARGS",
        format!("{DURABLE_ARGS} {user}").trim(),
    );
}

/// The process id of the throwaway server, once started (none with `DATABASE_URL`): the
/// drains report its CPU time per job.
pub(crate) static SERVER_PID: std::sync::OnceLock<u32> = std::sync::OnceLock::new();

/// The server of this run.
pub(crate) struct Env {
    /// Keeps a throwaway server alive; `None` with `DATABASE_URL`.
    server: Option<TestServer>,
    /// `DATABASE_URL`, if given.
    external: Option<String>,
    /// Databases made on an external server, dropped at the end.
    made: Vec<String>,
    /// What the server says about itself.
    pub(crate) settings: BTreeMap<String, String>,
}

impl Env {
    /// Starts a throwaway server, or uses `DATABASE_URL`.
    pub(crate) async fn open() -> anyhow::Result<Env> {
        let external = std::env::var("DATABASE_URL")
            .ok()
            .filter(|u| !u.trim().is_empty());
        let server = match &external {
            Some(_) => None,
            None => {
                eprintln!("DATABASE_URL is not set: starting a throwaway database server...");
                Some(tokio::task::spawn_blocking(TestServer::start).await??)
            }
        };
        if let Some(pid) = server.as_ref().and_then(TestServer::server_pid) {
            let _ = SERVER_PID.set(pid);
        }
        let mut env = Env {
            server,
            external,
            made: Vec::new(),
            settings: BTreeMap::new(),
        };
        let mut conn = MySqlConnection::connect(env.server_url()).await?;
        let rows = sqlx::raw_sql(
            "SHOW GLOBAL VARIABLES WHERE Variable_name IN ('version', 'version_comment', \
             'innodb_flush_log_at_trx_commit', 'sync_binlog', 'log_bin', 'binlog_format', \
             'innodb_buffer_pool_size', 'innodb_doublewrite', 'innodb_flush_method', \
             'innodb_log_file_size', 'transaction_isolation', 'tx_isolation', 'max_connections')",
        )
        .fetch_all(&mut conn)
        .await?;
        for row in &rows {
            env.settings.insert(text(row, 0), text(row, 1));
        }
        conn.close().await?;
        Ok(env)
    }

    /// No MySQL/MariaDB server: for a run of PostgreSQL's scenario alone, which brings its
    /// own. Its settings say so in the report's server line.
    pub(crate) fn without_server() -> Env {
        let mut settings = BTreeMap::new();
        settings.insert(
            "version".to_owned(),
            "none: the PostgreSQL scenario alone".to_owned(),
        );
        Env {
            server: None,
            external: None,
            made: Vec::new(),
            settings,
        }
    }

    /// True when the server is shared with others (`DATABASE_URL`): server-wide counters
    /// then include their traffic too.
    pub(crate) fn is_external(&self) -> bool {
        self.external.is_some()
    }

    fn server_url(&self) -> &str {
        match (&self.server, &self.external) {
            (Some(s), _) => s.url(),
            (None, Some(u)) => u,
            (None, None) => panic!("a MySQL scenario run without a MySQL server"),
        }
    }

    /// A new database with the queue's tables, for one scenario; returns its URL.
    pub(crate) async fn database(&mut self, what: &str) -> anyhow::Result<String> {
        let url = self.empty_database(what).await?;
        let queue = Queue::connect(&url).await?;
        queue.migrate().await?;
        queue.mysql_pool().unwrap().close().await;
        Ok(url)
    }

    /// A new database with the minimal table of the pattern (`baseline::MINIMAL_TABLE`)
    /// only; returns its URL.
    pub(crate) async fn minimal_database(&mut self, what: &str) -> anyhow::Result<String> {
        let url = self.empty_database(what).await?;
        let mut conn = MySqlConnection::connect(&url).await?;
        sqlx::raw_sql(crate::baseline::MINIMAL_TABLE)
            .execute(&mut conn)
            .await?;
        conn.close().await?;
        Ok(url)
    }

    async fn empty_database(&mut self, what: &str) -> anyhow::Result<String> {
        let name = format!("jqbench_{what}_{}", std::process::id());
        let mut conn = MySqlConnection::connect(self.server_url()).await?;
        sqlx::raw_sql(&format!(
            "DROP DATABASE IF EXISTS `{name}`; CREATE DATABASE `{name}` CHARACTER SET utf8mb4"
        ))
        .execute(&mut conn)
        .await
        .with_context(|| format!("cannot create the database {name}"))?;
        conn.close().await?;
        if self.external.is_some() {
            self.made.push(name.clone());
        }
        Ok(with_database(self.server_url(), &name))
    }

    /// Drops the databases made on an external server; a throwaway server goes away whole.
    pub(crate) async fn close(self) -> anyhow::Result<()> {
        if !self.made.is_empty() {
            let mut conn = MySqlConnection::connect(self.server_url()).await?;
            for name in &self.made {
                sqlx::raw_sql(&format!("DROP DATABASE IF EXISTS `{name}`"))
                    .execute(&mut conn)
                    .await?;
            }
            conn.close().await?;
        }
        if let Some(server) = self.server {
            tokio::task::spawn_blocking(move || drop(server)).await?;
        }
        Ok(())
    }
}

/// `url` with its database part set to `name` (any `?options` kept).
fn with_database(url: &str, name: &str) -> String {
    let (head, options) = url.split_at(url.find('?').unwrap_or(url.len()));
    let host_start = head.find("://").map_or(0, |i| i + 3);
    let host_end = head[host_start..]
        .find('/')
        .map_or(head.len(), |i| host_start + i);
    format!("{}/{name}{options}", &head[..host_end])
}

/// What rows a fill writes.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Rows {
    /// No-op jobs ready to run now, in enqueue order.
    Ready,
    /// Jobs that finished over the last six days (inside the default retention of 7 days,
    /// so that pruning leaves them).
    Done,
    /// Jobs scheduled between one hour and one day ahead.
    Scheduled,
}

/// Numbers `base..base + count` as a derived table `nums(n)`, from a cross join of digits
/// (MySQL 8.0 and MariaDB alike, no recursion limit to raise).
pub(crate) fn numbers(base: u64, count: u64) -> String {
    let places = count.max(2).saturating_sub(1).to_string().len();
    let digit = "(SELECT 0 AS d UNION ALL SELECT 1 UNION ALL SELECT 2 UNION ALL SELECT 3 \
                 UNION ALL SELECT 4 UNION ALL SELECT 5 UNION ALL SELECT 6 UNION ALL SELECT 7 \
                 UNION ALL SELECT 8 UNION ALL SELECT 9)";
    let terms: Vec<String> = (0..places)
        .map(|i| format!("d{i}.d * {}", 10u64.pow(i as u32)))
        .collect();
    let tables: Vec<String> = (0..places).map(|i| format!("{digit} AS d{i}")).collect();
    format!(
        "(SELECT {base} + {} AS n FROM {}) AS nums WHERE n < {}",
        terms.join(" + "),
        tables.join(" CROSS JOIN "),
        base + count
    )
}

/// Writes `count` rows of `rows` with task keys `{prefix}{n}`, in statements of at most
/// 100,000 rows (`INSERT ... SELECT` over generated numbers; no `ORDER BY`, which would sort
/// through a large temporary table for nothing).
pub(crate) async fn fill(
    pool: &MySqlPool,
    rows: Rows,
    prefix: &str,
    count: u64,
) -> anyhow::Result<()> {
    const CHUNK: u64 = 100_000;
    let (status, attempts, at, finished) = match rows {
        Rows::Ready => ("ready", 0, "UTC_TIMESTAMP(6)", "NULL"),
        Rows::Done => (
            "done",
            1,
            "UTC_TIMESTAMP(6) - INTERVAL (n MOD 518400) SECOND",
            "UTC_TIMESTAMP(6) - INTERVAL (n MOD 518400) SECOND",
        ),
        Rows::Scheduled => (
            "scheduled",
            0,
            "UTC_TIMESTAMP(6) + INTERVAL (3600 + n MOD 82800) SECOND",
            "NULL",
        ),
    };
    let created = match rows {
        Rows::Scheduled => "UTC_TIMESTAMP(6)",
        _ => at,
    };
    let mut base = 0;
    while base < count {
        let chunk = CHUNK.min(count - base);
        let sql = format!(
            "INSERT INTO job_queue (queue, kind, task_key, payload, status, priority, run_at, \
             attempts, max_attempts, lease_ms, created_at, updated_at, finished_at) \
             SELECT '{QUEUE}', '{NOOP_KIND}', CONCAT(?, n), CONCAT('{{\"n\":', n, '}}'), '{status}', 0, \
             {at}, {attempts}, {MAX_ATTEMPTS}, {LEASE_MS}, {created}, {created}, {finished} \
             FROM {}",
            numbers(base, chunk)
        );
        sqlx::query(&sql)
            .persistent(false)
            .bind(prefix)
            .execute(pool)
            .await
            .with_context(|| format!("cannot fill {count} {status} rows"))?;
        base += chunk;
    }
    Ok(())
}

/// Writes `count` ready rows with task keys `{prefix}{n}` into the minimal table, with the
/// payloads [`fill`] writes.
pub(crate) async fn fill_minimal(pool: &MySqlPool, prefix: &str, count: u64) -> anyhow::Result<()> {
    let sql = format!(
        "INSERT INTO job_queue (task_key, payload, status, attempts, created_at, updated_at) \
         SELECT CONCAT(?, n), CONCAT('{{\"n\":', n, '}}'), 'ready', 0, UTC_TIMESTAMP(6), \
         UTC_TIMESTAMP(6) FROM {}",
        numbers(0, count)
    );
    sqlx::query(&sql)
        .persistent(false)
        .bind(prefix)
        .execute(pool)
        .await
        .with_context(|| format!("cannot fill {count} rows of the minimal table"))?;
    Ok(())
}

/// Empties the job table.
pub(crate) async fn truncate(pool: &MySqlPool) -> anyhow::Result<()> {
    sqlx::raw_sql("TRUNCATE TABLE job_queue")
        .execute(pool)
        .await?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_and_numbers() {
        assert_eq!(
            with_database("mysql://root@127.0.0.1:3306", "x"),
            "mysql://root@127.0.0.1:3306/x"
        );
        assert_eq!(
            with_database("mysql://u:p@h/db?ssl-mode=disabled", "x"),
            "mysql://u:p@h/x?ssl-mode=disabled"
        );
        assert!(numbers(0, 20_000).contains("d4.d * 10000"));
        assert!(!numbers(0, 20_000).contains("d5"));
        assert!(numbers(0, 100_000).contains("d4.d * 10000"));
        assert!(!numbers(0, 100_000).contains("d5"));
        assert!(numbers(0, 10).contains("d0") && !numbers(0, 10).contains("d1"));
    }
}
