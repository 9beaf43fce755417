//! A running job's progress: the latest value it reported, until the worker writes it.

use std::sync::Mutex;

use tokio::sync::Notify;

/// The largest progress value a job may report, in bytes of JSON.
pub const MAX_PROGRESS_BYTES: usize = 4096;

/// The latest progress of one attempt, shared by its [`JobContext`](crate::JobContext) and
/// the worker task that writes it.
#[derive(Debug, Default)]
pub(crate) struct ProgressSlot {
    /// The latest value as JSON text, and whether it is still to be written.
    latest: Mutex<Option<(String, bool)>>,
    /// Woken at each new value.
    pub(crate) changed: Notify,
}

impl ProgressSlot {
    /// Keeps `json` as the latest value, to be written.
    pub(crate) fn set(&self, json: String) {
        *self.latest.lock().unwrap_or_else(|e| e.into_inner()) = Some((json, true));
        self.changed.notify_one();
    }

    /// The latest value, written or not.
    pub(crate) fn latest(&self) -> Option<String> {
        self.latest
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .as_ref()
            .map(|(json, _)| json.clone())
    }

    /// The latest value if it is still to be written, marked written.
    pub(crate) fn take_unwritten(&self) -> Option<String> {
        let mut latest = self.latest.lock().unwrap_or_else(|e| e.into_inner());
        match latest.as_mut() {
            Some((json, pending @ true)) => {
                *pending = false;
                Some(json.clone())
            }
            _ => None,
        }
    }

    /// Marks `json` to be written again (its write failed), unless a newer value came.
    pub(crate) fn unwritten(&self, json: &str) {
        let mut latest = self.latest.lock().unwrap_or_else(|e| e.into_inner());
        if let Some((current, pending)) = latest.as_mut() {
            if current == json {
                *pending = true;
            }
        }
    }
}
