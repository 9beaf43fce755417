//! Start-up checks: the server facts that decide whether a queue is safe to run.

use std::collections::HashMap;

use sqlx::mysql::MySqlPool;

use crate::error::{Error, Result};

/// What the server said about itself, read once when a [`Queue`](crate::Queue) connects.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct ServerInfo {
    /// Which database the server is.
    pub backend: crate::Backend,
    /// `VERSION()`, e.g. `10.11.6-MariaDB` or `8.0.36`; PostgreSQL's `server_version`, e.g.
    /// `15.4 (Debian 15.4-1)`.
    pub version: String,
    /// True for MariaDB, false for MySQL.
    pub mariadb: bool,
    /// The version as (major, minor, patch).
    pub version_number: (u32, u32, u32),
    /// `read_only`: a replica, or a primary fenced for maintenance. On PostgreSQL: a standby
    /// (`pg_is_in_recovery()`), or `default_transaction_read_only` on.
    pub read_only: bool,
    /// `log_bin`: whether the binary log is on.
    pub log_bin: bool,
    /// `binlog_format`: ROW, MIXED or STATEMENT.
    pub binlog_format: String,
    /// `wsrep_on`: a Galera cluster node.
    pub wsrep_on: bool,
    /// The session isolation level of the connection that asked.
    pub isolation: String,
    /// `innodb_flush_log_at_trx_commit`: 1 is fully durable; 0 and 2 can lose the last
    /// second of commits, enqueues and completions included, in a server crash.
    pub flush_log_at_trx_commit: String,
    /// True for TiDB (`VERSION()` names it, or `tidb_version` exists), which parses
    /// `SKIP LOCKED` but does not honour it.
    pub tidb: bool,
    /// `max_prepared_stmt_count`: server-side prepared statements allowed across all
    /// clients, if the server said.
    pub max_prepared_stmt_count: Option<u64>,
    /// The `Prepared_stmt_count` status when the queue connected: statements prepared by all
    /// clients at that moment, if the server said.
    pub prepared_stmt_count: Option<u64>,
}

pub(crate) async fn inspect(pool: &MySqlPool) -> Result<ServerInfo> {
    let rows = sqlx::query(
        "SHOW VARIABLES WHERE Variable_name IN ('version', 'read_only', 'log_bin', 'binlog_format', \
         'wsrep_on', 'tx_isolation', 'transaction_isolation', 'innodb_flush_log_at_trx_commit', \
         'max_prepared_stmt_count', 'tidb_version')",
    )
    .fetch_all(pool)
    .await?;
    let mut vars = HashMap::new();
    for row in rows {
        // SHOW VARIABLES returns VARCHAR on MySQL and may return binary strings elsewhere.
        let name = crate::store::text(&row, 0)?;
        let value = crate::store::text(&row, 1)?;
        vars.insert(name.to_ascii_lowercase(), value);
    }
    let get = |k: &str| vars.get(k).cloned().unwrap_or_default();
    let on = |k: &str| matches!(get(k).to_ascii_uppercase().as_str(), "ON" | "1");
    let version = get("version");
    // A status, not a variable; a server that will not tell only loses the start-up warning.
    let prepared_stmt_count = match sqlx::query("SHOW GLOBAL STATUS LIKE 'Prepared_stmt_count'")
        .fetch_optional(pool)
        .await
    {
        Ok(Some(row)) => crate::store::text(&row, 1)?.parse().ok(),
        _ => None,
    };
    Ok(ServerInfo {
        backend: crate::Backend::MySql,
        tidb: is_tidb(&version, vars.get("tidb_version").map(String::as_str)),
        max_prepared_stmt_count: vars
            .get("max_prepared_stmt_count")
            .and_then(|v| v.parse().ok()),
        prepared_stmt_count,
        mariadb: version.to_ascii_lowercase().contains("mariadb"),
        version_number: parse_version(&version),
        version,
        read_only: on("read_only"),
        log_bin: on("log_bin"),
        binlog_format: get("binlog_format").to_ascii_uppercase(),
        wsrep_on: on("wsrep_on"),
        isolation: vars
            .get("transaction_isolation")
            .or_else(|| vars.get("tx_isolation"))
            .cloned()
            .unwrap_or_default(),
        flush_log_at_trx_commit: get("innodb_flush_log_at_trx_commit"),
    })
}

/// What a PostgreSQL server says about itself: its version, whether it is a standby or
/// read-only, the session's isolation and `synchronous_commit` (in
/// `flush_log_at_trx_commit`: `off` can lose the last commits in a crash, as MySQL's 0 and 2
/// can).
pub(crate) async fn inspect_postgres(pool: &sqlx::PgPool) -> Result<ServerInfo> {
    let (version, standby, read_only, isolation, synchronous): (String, bool, String, String, String) =
        sqlx::query_as(
            "SELECT current_setting('server_version'), pg_is_in_recovery(), \
             current_setting('default_transaction_read_only'), current_setting('transaction_isolation'), \
             current_setting('synchronous_commit')",
        )
        .fetch_one(pool)
        .await?;
    Ok(ServerInfo {
        backend: crate::Backend::Postgres,
        version_number: parse_version(&version),
        version,
        mariadb: false,
        read_only: standby || read_only == "on",
        log_bin: false,
        binlog_format: String::new(),
        wsrep_on: false,
        isolation,
        flush_log_at_trx_commit: synchronous,
        tidb: false,
        max_prepared_stmt_count: None,
        prepared_stmt_count: None,
    })
}

/// Whether the server is TiDB: its `VERSION()` reads like `8.0.11-TiDB-v7.5.0`, and it has a
/// `tidb_version` variable no other server has.
fn is_tidb(version: &str, tidb_version: Option<&str>) -> bool {
    version.to_ascii_lowercase().contains("tidb") || tidb_version.is_some_and(|v| !v.is_empty())
}

/// How many more processes that each keep `per_process` prepared statements fit under the
/// server's cap, given how many are prepared already.
fn processes_that_fit(max: u64, prepared: u64, per_process: u64) -> u64 {
    max.saturating_sub(prepared) / per_process.max(1)
}

/// Fewer processes than this fitting under `max_prepared_stmt_count` earn a warning.
const PROCESS_HEADROOM: u64 = 20;

fn parse_version(v: &str) -> (u32, u32, u32) {
    let mut parts = v
        .split(|c: char| !c.is_ascii_digit())
        .filter(|s| !s.is_empty())
        .map(|s| s.parse().unwrap_or(0));
    (
        parts.next().unwrap_or(0),
        parts.next().unwrap_or(0),
        parts.next().unwrap_or(0),
    )
}

impl ServerInfo {
    /// Refuses a server the queue cannot run on safely, saying what to change:
    /// MySQL older than 8.0.13 (no `SKIP LOCKED` before 8.0.1, no expression defaults before
    /// 8.0.13) or MariaDB older than 10.6 (no `SKIP LOCKED`), a read-only
    /// server (a replica: never claim there), statement-based binary logging (READ COMMITTED
    /// needs ROW or MIXED), and Galera (`wsrep_on`: locks are not cluster-wide, so two
    /// nodes could claim one job).
    ///
    /// TiDB is refused too: it accepts `FOR UPDATE SKIP LOCKED` but ignores `SKIP LOCKED`, so
    /// claimers would wait on each other's rows (pessimistic mode) or claim the same job
    /// (optimistic mode).
    ///
    /// On PostgreSQL: a version older than 13, and a standby or a server whose transactions
    /// are read-only by default.
    pub fn check(&self) -> Result<()> {
        let refuse = |msg: String| Err(Error::UnsupportedServer(msg));
        let v = self.version_number;
        if self.backend == crate::Backend::Postgres {
            if v < (13, 0, 0) {
                return refuse(format!(
                    "PostgreSQL {} is older than 13, the oldest release this library supports; upgrade to 13 or later",
                    self.version
                ));
            }
            if self.read_only {
                return refuse(format!(
                    "PostgreSQL {} is read-only (a standby in recovery, or default_transaction_read_only=on); point the queue at the primary",
                    self.version
                ));
            }
            return Ok(());
        }
        // Before the version checks: TiDB reports a MySQL version that would pass them.
        if self.tidb {
            return refuse(format!(
                "{} is TiDB, which parses SKIP LOCKED but ignores it, so claims would block on or \
                 take each other's jobs; use MySQL 8.0.13+ or MariaDB 10.6+",
                self.version
            ));
        }
        if self.mariadb && v < (10, 6, 0) {
            return refuse(format!(
                "MariaDB {} has no SKIP LOCKED; upgrade to 10.6 or later (10.6.6 or later recommended)",
                self.version
            ));
        }
        if !self.mariadb && v < (8, 0, 1) {
            return refuse(format!(
                "MySQL {} has no SKIP LOCKED; upgrade to 8.0.13 or later",
                self.version
            ));
        }
        // The schema's column defaults are expressions (`DEFAULT (UTC_TIMESTAMP(6))`), so
        // that other languages can enqueue with a plain INSERT.
        if !self.mariadb && v < (8, 0, 13) {
            return refuse(format!(
                "MySQL {} has no expression defaults, which the job table uses; upgrade to 8.0.13 or later",
                self.version
            ));
        }
        if self.read_only {
            return refuse(format!(
                "{} is read-only (read_only=ON), probably a replica; point the queue at the primary",
                self.version
            ));
        }
        if self.log_bin && self.binlog_format == "STATEMENT" {
            return refuse(
                "binlog_format=STATEMENT cannot log READ COMMITTED transactions; set binlog_format=ROW (or MIXED) on the server"
                    .into(),
            );
        }
        if self.wsrep_on {
            return refuse(
                "this is a Galera cluster node (wsrep_on=ON): row locks are not cluster-wide, so SKIP LOCKED cannot keep two nodes from claiming one job; use a single primary"
                    .into(),
            );
        }
        if self.mariadb && v < (10, 6, 6) {
            tracing::warn!(
                version = %self.version,
                "MariaDB before 10.6.6 has known SKIP LOCKED bugs; upgrade to 10.6.6 or later"
            );
        }
        Ok(())
    }

    /// Logs a warning when fewer than 20 more processes, each keeping `per_process`
    /// server-side prepared statements, fit under the server's `max_prepared_stmt_count`:
    /// beyond it every new prepare fails (error 1461), renewals included.
    pub(crate) fn warn_on_statement_headroom(&self, per_process: u64) {
        let (Some(max), Some(prepared)) = (self.max_prepared_stmt_count, self.prepared_stmt_count)
        else {
            return;
        };
        let fit = processes_that_fit(max, prepared, per_process);
        if fit < PROCESS_HEADROOM {
            tracing::warn!(
                max_prepared_stmt_count = max,
                prepared_stmt_count = prepared,
                per_process,
                processes_that_fit = fit,
                "few more processes fit under the server's max_prepared_stmt_count; raise it on the server, or lower max_connections or statement_cache_capacity"
            );
        } else {
            tracing::debug!(
                max_prepared_stmt_count = max,
                prepared_stmt_count = prepared,
                per_process,
                processes_that_fit = fit,
                "prepared statement budget"
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn info(version: &str) -> ServerInfo {
        ServerInfo {
            backend: crate::Backend::MySql,
            version: version.into(),
            mariadb: version.contains("MariaDB"),
            version_number: parse_version(version),
            read_only: false,
            log_bin: false,
            binlog_format: "MIXED".into(),
            wsrep_on: false,
            isolation: "READ-COMMITTED".into(),
            flush_log_at_trx_commit: "1".into(),
            tidb: is_tidb(version, None),
            max_prepared_stmt_count: Some(16382),
            prepared_stmt_count: Some(0),
        }
    }

    #[test]
    fn tidb_is_refused_whatever_version_it_claims() {
        for version in [
            "8.0.11-TiDB-v7.5.0",
            "5.7.25-TiDB-v6.5.1",
            "8.0.11-tidb-v8.1.0",
        ] {
            assert!(is_tidb(version, None), "{version}");
            let err = info(version).check().unwrap_err().to_string();
            assert!(err.contains("TiDB") && err.contains("SKIP LOCKED"), "{err}");
        }
        // A TiDB that hides its name in VERSION() still has `tidb_version`.
        assert!(is_tidb("8.0.11", Some("Release Version: v7.5.0")));
        let mut i = info("8.0.11");
        i.tidb = is_tidb(&i.version, Some("Release Version: v7.5.0"));
        assert!(i.check().is_err());
        // Others are not TiDB.
        for version in ["8.0.36", "10.11.6-MariaDB-0+deb12u1", "8.4.3-percona"] {
            assert!(!is_tidb(version, None), "{version}");
            assert!(!is_tidb(version, Some("")), "{version}");
        }
    }

    #[test]
    fn statement_headroom_counts_whole_processes() {
        assert_eq!(processes_that_fit(16382, 0, 272), 60);
        assert_eq!(processes_that_fit(16382, 16000, 272), 1);
        assert_eq!(processes_that_fit(100, 200, 272), 0);
        assert_eq!(processes_that_fit(100, 0, 0), 100);
    }

    #[test]
    fn versions_are_checked() {
        assert!(info("10.11.6-MariaDB-0+deb12u1").check().is_ok());
        assert!(info("8.0.36").check().is_ok());
        let old = info("10.5.22-MariaDB").check().unwrap_err().to_string();
        assert!(old.contains("upgrade to 10.6"), "{old}");
        assert!(info("5.7.44-log").check().is_err());
        let no_defaults = info("8.0.12").check().unwrap_err().to_string();
        assert!(no_defaults.contains("upgrade to 8.0.13"), "{no_defaults}");
        assert!(info("8.0.13").check().is_ok());
    }

    #[test]
    fn unsafe_settings_are_refused_with_the_fix() {
        let mut i = info("8.0.36");
        i.log_bin = true;
        i.binlog_format = "STATEMENT".into();
        assert!(i
            .check()
            .unwrap_err()
            .to_string()
            .contains("binlog_format=ROW"));
        let mut i = info("8.0.36");
        i.read_only = true;
        assert!(i.check().unwrap_err().to_string().contains("primary"));
        let mut i = info("10.11.6-MariaDB");
        i.wsrep_on = true;
        assert!(i.check().unwrap_err().to_string().contains("Galera"));
    }
}
