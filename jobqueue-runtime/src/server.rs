//! Start-up checks: the server facts that decide whether a queue is safe to run.

use std::collections::HashMap;

use sqlx::mysql::MySqlPool;

use crate::error::{Error, Result};

/// What the server said about itself, read once when a [`Queue`](crate::Queue) connects.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct ServerInfo {
    /// `VERSION()`, e.g. `10.11.6-MariaDB` or `8.0.36`.
    pub version: String,
    /// True for MariaDB, false for MySQL.
    pub mariadb: bool,
    /// The version as (major, minor, patch).
    pub version_number: (u32, u32, u32),
    /// `read_only`: a replica, or a primary fenced for maintenance.
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
}

pub(crate) async fn inspect(pool: &MySqlPool) -> Result<ServerInfo> {
    let rows = sqlx::query(
        "SHOW VARIABLES WHERE Variable_name IN ('version', 'read_only', 'log_bin', 'binlog_format', \
         'wsrep_on', 'tx_isolation', 'transaction_isolation', 'innodb_flush_log_at_trx_commit')",
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
    Ok(ServerInfo {
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
    pub fn check(&self) -> Result<()> {
        let refuse = |msg: String| Err(Error::UnsupportedServer(msg));
        let v = self.version_number;
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
}

#[cfg(test)]
mod tests {
    use super::*;

    fn info(version: &str) -> ServerInfo {
        ServerInfo {
            version: version.into(),
            mariadb: version.contains("MariaDB"),
            version_number: parse_version(version),
            read_only: false,
            log_bin: false,
            binlog_format: "MIXED".into(),
            wsrep_on: false,
            isolation: "READ-COMMITTED".into(),
            flush_log_at_trx_commit: "1".into(),
        }
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
