//! What the scenarios measure with: clocks, statistics, process and server counters, and
//! how figures are printed.

use std::collections::BTreeMap;
use std::time::{SystemTime, UNIX_EPOCH};

use sqlx::mysql::MySqlRow;
use sqlx::{MySqlConnection, Row};

/// Microseconds since the Unix epoch: one clock for every process of the run.
pub(crate) fn now_us() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_micros() as u64)
        .unwrap_or(0)
}

/// The median (the mean of the middle two for an even count); 0 for none.
pub(crate) fn median(values: &[f64]) -> f64 {
    if values.is_empty() {
        return 0.0;
    }
    let mut v = values.to_vec();
    v.sort_by(f64::total_cmp);
    let mid = v.len() / 2;
    if v.len() % 2 == 1 {
        v[mid]
    } else {
        (v[mid - 1] + v[mid]) / 2.0
    }
}

/// The nearest-rank percentile `p` (0-100) of `values`; 0 for none.
pub(crate) fn percentile(values: &[u64], p: f64) -> f64 {
    if values.is_empty() {
        return 0.0;
    }
    let mut v = values.to_vec();
    v.sort_unstable();
    let rank = ((p / 100.0) * v.len() as f64).ceil() as usize;
    v[rank.clamp(1, v.len()) - 1] as f64
}

/// `VmHWM` (peak resident set) of process `pid`, in KiB, from `/proc/<pid>/status`.
pub(crate) fn peak_rss_kib(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
}

/// CPU time (user and system) that process `pid` has used so far, in milliseconds, from
/// `/proc/<pid>/stat` (in clock ticks of 10 ms, Linux's `USER_HZ`).
pub(crate) fn cpu_ms(pid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name, in parentheses, may hold spaces: count fields after it.
    let rest = &stat[stat.rfind(')')? + 2..];
    let mut fields = rest.split(' ').skip(11);
    let utime: u64 = fields.next()?.parse().ok()?;
    let stime: u64 = fields.next()?.parse().ok()?;
    Some((utime + stime) * 10)
}

/// A text column that the server may send as a binary string.
pub(crate) fn text(row: &MySqlRow, i: usize) -> String {
    match row.try_get::<String, _>(i) {
        Ok(s) => s,
        Err(_) => row
            .try_get::<Vec<u8>, _>(i)
            .map(|b| String::from_utf8_lossy(&b).into_owned())
            .unwrap_or_default(),
    }
}

/// The server's global counters that tell what the clients made it do.
pub(crate) const COUNTERS: &[&str] = &[
    "Questions",
    "Com_select",
    "Com_insert",
    "Com_update",
    "Com_delete",
    "Com_begin",
    "Com_commit",
    "Com_rollback",
    "Com_set_option",
    "Com_stmt_prepare",
    "Com_stmt_execute",
    "Com_stmt_close",
    "Com_admin_commands",
    "Innodb_os_log_fsyncs",
    "Innodb_data_fsyncs",
    "Innodb_buffer_pool_reads",
    "Innodb_buffer_pool_pages_flushed",
    "Handler_read_next",
];

/// A snapshot of [`COUNTERS`]. Read with the text protocol, so that it adds exactly one
/// statement (`Questions` counts the `SHOW` itself).
pub(crate) async fn server_counters(conn: &mut MySqlConnection) -> anyhow::Result<Counters> {
    let list = COUNTERS
        .iter()
        .map(|c| format!("'{c}'"))
        .collect::<Vec<_>>()
        .join(", ");
    let rows = sqlx::raw_sql(&format!(
        "SHOW GLOBAL STATUS WHERE Variable_name IN ({list})"
    ))
    .fetch_all(conn)
    .await?;
    let mut map = BTreeMap::new();
    for row in &rows {
        if let Ok(v) = text(row, 1).parse::<u64>() {
            map.insert(text(row, 0), v);
        }
    }
    Ok(Counters(map))
}

/// Global status counters at one moment.
#[derive(Debug, Clone, Default)]
pub(crate) struct Counters(pub(crate) BTreeMap<String, u64>);

impl Counters {
    /// `later - self`, less the one `SHOW` that took `later` (it counts itself as a
    /// question and a `Com_show_status`).
    pub(crate) fn delta(&self, later: &Counters) -> BTreeMap<String, u64> {
        later
            .0
            .iter()
            .map(|(k, v)| {
                let before = self.0.get(k).copied().unwrap_or(0);
                let own = u64::from(k == "Questions");
                (k.clone(), v.saturating_sub(before).saturating_sub(own))
            })
            .collect()
    }
}

/// `12,345` for 12345.
pub(crate) fn thousands(v: f64) -> String {
    let n = v.round() as i64;
    let digits = n.unsigned_abs().to_string();
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(c);
    }
    if n < 0 {
        out.insert(0, '-');
    }
    out
}

/// A figure with a sensible number of digits for the table.
pub(crate) fn figure(v: f64) -> String {
    if v.abs() >= 1000.0 {
        thousands(v)
    } else if v.abs() >= 100.0 {
        format!("{v:.0}")
    } else if v.abs() >= 10.0 {
        format!("{v:.1}")
    } else {
        format!("{v:.2}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statistics() {
        assert_eq!(median(&[3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(&[4.0, 1.0, 2.0, 3.0]), 2.5);
        let v: Vec<u64> = (1..=100).collect();
        assert_eq!(percentile(&v, 50.0), 50.0);
        assert_eq!(percentile(&v, 99.0), 99.0);
        assert_eq!(percentile(&[7], 99.0), 7.0);
        assert_eq!(thousands(1234567.0), "1,234,567");
        assert_eq!(thousands(999.0), "999");
    }
}
