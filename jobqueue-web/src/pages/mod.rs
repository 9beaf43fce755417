//! The pages and actions: one module per page family, and what they share here.

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
    fn from(e: jobqueue::Error) -> Self {
        tracing::warn!(error = %e, "dashboard request failed");
        Failure(StatusCode::INTERNAL_SERVER_ERROR, e.to_string())
    }
}

type Page = Result<Response, Failure>;

/// Where the dashboard is mounted: the original path minus the part the router matched.
fn base(orig: &OriginalUri, uri: &Uri) -> String {
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
mod workers;

pub(crate) use actions::*;
pub(crate) use jobs::*;
pub(crate) use kinds::*;
pub(crate) use overview::*;
pub(crate) use periodic::*;
pub(crate) use queues::*;
pub(crate) use workers::*;
