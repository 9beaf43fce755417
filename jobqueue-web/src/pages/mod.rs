//! The pages and actions: one module per page family, and what they share here.

use std::borrow::Cow;
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::extract::{Form, OriginalUri, Path, Query, State};
use axum::http::{header, HeaderMap, StatusCode, Uri};
use axum::response::{Html, IntoResponse, Redirect, Response};
use chrono::{DateTime, NaiveDateTime, Utc};
use jobqueue::admin::{
    CancelOutcome, InvalidCursor, JobCursor, JobFilter, QueueOverview, ThroughputMinute,
    OVERVIEW_COUNT_CAP,
};
use jobqueue::JobStatus;
use serde::Deserialize;

use crate::html::{action, age, badge, esc, page, time, url};
use crate::Shared;

type St = State<Arc<Shared>>;

/// Jobs per page of the job list.
const PAGE_SIZE: u32 = 50;

/// A failure shown as a page: what went wrong, in words.
pub(crate) struct Failure(StatusCode, String);

impl IntoResponse for Failure {
    fn into_response(self) -> Response {
        (
            self.0,
            Html(format!(
                "<!doctype html><html lang=\"en\"><head><meta charset=\"utf-8\"><title>Error · jobqueue</title></head>\
                 <body><h1>{}</h1><p>{}</p></body></html>",
                self.0,
                esc(&self.1)
            )),
        )
            .into_response()
    }
}

impl From<jobqueue::Error> for Failure {
    /// Input the operator can fix is a 400 that says what is wrong. Anything else (the
    /// database, a row it cannot decode) is a 500 that names no internals, only a request id
    /// to find the full error in the log.
    fn from(e: jobqueue::Error) -> Self {
        use jobqueue::Error as E;
        match e {
            E::InvalidSetting { .. }
            | E::InvalidQueue { .. }
            | E::InvalidKey { .. }
            | E::UnknownStatus(_) => Failure(StatusCode::BAD_REQUEST, e.to_string()),
            E::JobNotFound(_) => Failure(StatusCode::NOT_FOUND, e.to_string()),
            // The filter's fault, and the message says how to narrow it.
            E::FilterTooSlow { .. } => Failure(StatusCode::BAD_REQUEST, e.to_string()),
            e => {
                let mut id = [0u8; 6];
                rand::Rng::fill(&mut rand::thread_rng(), &mut id);
                let id: String = id.iter().map(|b| format!("{b:02x}")).collect();
                tracing::warn!(request_id = %id, error = %e, "dashboard request failed");
                Failure(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    format!(
                        "the database could not answer; see the dashboard's log (request id {id})"
                    ),
                )
            }
        }
    }
}

/// `text`, or "(redacted)" when the dashboard redacts job data
/// ([`Dashboard::redact_job_data`](crate::Dashboard::redact_job_data)): for every field a
/// job's producer controls (payload, output, errors, metadata, progress, limit keys).
/// An empty value stays empty, so that "no error" is not shown as a hidden one.
pub(crate) fn shown<'a>(s: &Shared, text: &'a str) -> Cow<'a, str> {
    if s.redact && !text.is_empty() {
        Cow::Borrowed("(redacted)")
    } else {
        Cow::Borrowed(text)
    }
}

/// A task key, or when redacting a short keyed digest of it (`#3fA9x_k2Qm`): equal keys show
/// equal digests, so rows can be told apart, and nobody can test a guess against them.
pub(crate) fn shown_key<'a>(s: &Shared, key: &'a str) -> Cow<'a, str> {
    if s.redact {
        Cow::Owned(format!("(redacted #{})", crate::security::digest(key)))
    } else {
        Cow::Borrowed(key)
    }
}

type Page = Result<Response, Failure>;

/// Where the dashboard is mounted: the original path minus the part the router matched.
pub(crate) fn base(orig: &OriginalUri, uri: &Uri) -> String {
    let full = orig.0.path();
    let inner = uri.path();
    let b = if inner == "/" {
        full.trim_end_matches('/')
    } else {
        full.strip_suffix(inner).unwrap_or("")
    };
    b.to_owned()
}

#[derive(Debug, Deserialize, Default)]
pub(crate) struct Notice {
    notice: Option<String>,
}

/// The first line of `s`, cut to 120 characters: an error in a table cell.
pub(crate) fn first_line(s: &str) -> String {
    let line = s.lines().next().unwrap_or("");
    if line.chars().count() > 120 {
        format!("{}…", line.chars().take(120).collect::<String>())
    } else {
        line.to_owned()
    }
}

mod actions;
mod jobs;
mod kinds;
mod overview;
mod periodic;
mod queues;
mod selection;
mod workers;

pub(crate) use actions::*;
pub(crate) use jobs::*;
pub(crate) use kinds::*;
pub(crate) use overview::*;
pub(crate) use periodic::*;
pub(crate) use queues::*;
pub(crate) use selection::*;
pub(crate) use workers::*;
