//! Which jobs a command works on, and the one place where the command line's filters become
//! the runtime's filter.

use jobqueue::admin::JobFilter;
use jobqueue::{JobStatus, Queue};
use serde_json::{json, Value};

use crate::render::plural;

/// Which jobs a bulk command works on: the statuses it takes jobs out of, and the filter
/// given on the command line.
#[derive(Debug, Default, Clone)]
pub(crate) struct Scope {
    /// The statuses the command changes (each counted on its own).
    pub(crate) statuses: Vec<JobStatus>,
    /// Only this queue.
    pub(crate) queue: Option<String>,
    /// Only this kind.
    pub(crate) kind: Option<String>,
    /// Only task keys starting with this text.
    pub(crate) key_prefix: Option<String>,
    /// Only jobs whose metadata holds this key with this value.
    pub(crate) meta: Option<(String, String)>,
}

impl Scope {
    /// The runtime's filter for this scope, narrowed to `status` if given. Every filter the
    /// command line hands to the runtime is built here.
    pub(crate) fn query(&self, status: Option<JobStatus>) -> JobFilter {
        let mut query = JobFilter::default();
        if let Some(s) = status {
            query = query.status(s);
        }
        if let Some(q) = &self.queue {
            query = query.queue(q.clone());
        }
        if let Some(k) = &self.kind {
            query = query.kind(k.clone());
        }
        if let Some(p) = &self.key_prefix {
            query = query.key_prefix(p.clone());
        }
        if let Some((key, value)) = &self.meta {
            query = query.meta(key.clone(), value.clone());
        }
        query
    }

    /// The filter for the change itself: one status if the scope has one, else none (the
    /// runtime's bulk action then takes every status it can change).
    pub(crate) fn change_query(&self) -> JobFilter {
        match self.statuses.as_slice() {
            [one] => self.query(Some(*one)),
            _ => self.query(None),
        }
    }

    /// How many jobs of the scope's statuses match, one count per status.
    pub(crate) async fn count(&self, queue: &Queue) -> jobqueue::Result<u64> {
        let mut total = 0;
        for status in &self.statuses {
            total += queue.count(&self.query(Some(*status))).await?;
        }
        Ok(total)
    }

    /// ` in queue exports of kind export_order with task keys starting with export:`, or
    /// nothing.
    pub(crate) fn describe(&self) -> String {
        let mut s = String::new();
        if let Some(q) = &self.queue {
            s.push_str(&format!(" in queue {q}"));
        }
        if let Some(k) = &self.kind {
            s.push_str(&format!(" of kind {k}"));
        }
        if let Some(p) = &self.key_prefix {
            s.push_str(&format!(" with task keys starting with {p:?}"));
        }
        s
    }

    /// `failed or cancelled jobs`, `1 ready job`: `n` jobs of the scope's statuses.
    pub(crate) fn jobs(&self, n: u64, all: &str) -> String {
        let names: Vec<&str> = self.statuses.iter().map(|s| s.as_str()).collect();
        let adjective = match names.as_slice() {
            [one] => (*one).to_owned(),
            _ => all.to_owned(),
        };
        plural(n, &format!("{adjective} job"), &format!("{adjective} jobs"))
    }

    /// The `filter` object of the JSON output.
    pub(crate) fn json(&self) -> Value {
        json!({
            "queue": self.queue,
            "kind": self.kind,
            "key_prefix": self.key_prefix,
            "status": self.statuses.iter().map(|s| s.as_str()).collect::<Vec<_>>(),
        })
    }
}
