//! The operator dashboard of jobqueue: queues, jobs, workers and periodic schedules in a web
//! page, with retry, cancel, pause, resume, bulk actions and purge.
//!
//! [`Dashboard::router`] is an axum [`Router`] to mount in your application under a path of
//! your choice, behind your own authentication layer:
//!
//! ```no_run
//! # async fn demo(queue: jobqueue::Queue) {
//! use jobqueue_web::Dashboard;
//! let app = axum::Router::new().nest("/jobs", Dashboard::new(queue).read_only(false).router());
//! // .layer(your_auth_layer)
//! # let _: axum::Router = app;
//! # }
//! ```
//!
//! `jobqueue web --listen 127.0.0.1:8080` serves it stand-alone. Everything it shows and
//! does goes through the operator API of [`jobqueue::Queue`]. Pages are rendered on the
//! server (every value from the database is HTML-escaped); the stylesheet and a small
//! script that refreshes the overview every 2 seconds are served from the binary.
//!
//! Security: actions are POSTs that carry an anti-forgery token (double-submitted in a cookie) and are refused
//! when the browser says they come from another site; [`Dashboard::read_only`] hides and
//! refuses them; [`Dashboard::hide_payloads`] keeps job arguments (which may hold personal
//! data) off the pages; [`Dashboard::auth`] requires a token or a user and password.

use std::net::SocketAddr;
use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::Router;
use base64::Engine;
use jobqueue::Queue;

mod html;
mod pages;

/// Who may see the dashboard, when it is not left to the application's own layer.
#[derive(Clone)]
#[non_exhaustive]
pub enum Auth {
    /// A secret token: sent as `Authorization: Bearer <token>`, or typed by a browser as
    /// the password of the login prompt (with any user name).
    Token(String),
    /// A user name and password (HTTP basic authentication).
    Basic {
        /// The user name.
        user: String,
        /// The password.
        password: String,
    },
}

impl std::fmt::Debug for Auth {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Auth::Token(_) => f.write_str("Auth::Token(..)"),
            Auth::Basic { user, .. } => write!(f, "Auth::Basic {{ user: {user:?}, .. }}"),
        }
    }
}

/// The dashboard's settings; [`Dashboard::router`] turns them into an axum [`Router`].
#[derive(Debug, Clone)]
pub struct Dashboard {
    queue: Queue,
    read_only: bool,
    hide_payloads: bool,
    auth: Option<Auth>,
}

/// What every handler reads.
#[derive(Debug)]
pub(crate) struct Shared {
    pub(crate) queue: Queue,
    pub(crate) read_only: bool,
    pub(crate) hide_payloads: bool,
    /// The overview's figures and when they were read: every viewer's refresh within
    /// [`pages::OVERVIEW_MAX_AGE`] shares one read (the counts read a whole index).
    pub(crate) overview: tokio::sync::Mutex<Option<pages::OverviewFigures>>,
}

/// The name of the cookie that holds the browser's anti-forgery token.
const CSRF_COOKIE: &str = "jobqueue_csrf";

tokio::task_local! {
    /// The anti-forgery token of the request being handled (see [`csrf_cookie`]).
    static CSRF: String;
}

/// The anti-forgery token forms carry and actions must send back.
pub(crate) fn csrf() -> String {
    CSRF.try_with(Clone::clone).unwrap_or_default()
}

impl Dashboard {
    /// A dashboard of `queue`'s database, with every action enabled, payloads shown and no
    /// authentication of its own (mount it behind your application's).
    pub fn new(queue: Queue) -> Self {
        Dashboard {
            queue,
            read_only: false,
            hide_payloads: false,
            auth: None,
        }
    }

    /// With `true`, the pages show no action and every action is refused with 403.
    /// Default false.
    pub fn read_only(mut self, on: bool) -> Self {
        self.read_only = on;
        self
    }

    /// With `true`, job payloads are never shown (only their size); everything else is.
    /// Default false.
    pub fn hide_payloads(mut self, on: bool) -> Self {
        self.hide_payloads = on;
        self
    }

    /// Requires this authentication for every request. Default none: leave it to the layer
    /// of the application that mounts the router.
    pub fn auth(mut self, auth: Auth) -> Self {
        self.auth = Some(auth);
        self
    }

    /// The router: mount it with `Router::nest("/jobs", ...)`, or serve it as it is.
    pub fn router(self) -> Router {
        let shared = Arc::new(Shared {
            queue: self.queue,
            read_only: self.read_only,
            hide_payloads: self.hide_payloads,
            overview: tokio::sync::Mutex::new(None),
        });
        let router = Router::new()
            .route("/", get(pages::overview))
            .route("/live", get(pages::overview_live))
            .route("/jobs", get(pages::jobs))
            .route("/jobs/{id}", get(pages::job))
            .route("/workers", get(pages::workers))
            .route("/periodic", get(pages::periodic))
            .route("/periodic/{kind}/run", post(pages::periodic_run))
            .route("/periodic/{kind}/pause", post(pages::periodic_pause))
            .route("/periodic/{kind}/resume", post(pages::periodic_resume))
            .route("/kinds", get(pages::kinds))
            .route("/queues/{queue}", get(pages::queue_page))
            .route("/bulk", get(pages::bulk_confirm).post(pages::bulk))
            .route("/jobs/{id}/retry", post(pages::retry))
            .route("/jobs/{id}/cancel", post(pages::cancel))
            .route("/queues/{queue}/pause", post(pages::pause))
            .route("/queues/{queue}/resume", post(pages::resume))
            .route("/purge", post(pages::purge))
            .route("/assets/style.css", get(style))
            .route("/assets/dashboard.js", get(script))
            .layer(middleware::from_fn(csrf_cookie))
            .layer(middleware::from_fn(security_headers))
            .with_state(shared);
        match self.auth {
            Some(auth) => {
                router.layer(middleware::from_fn_with_state(Arc::new(auth), authenticate))
            }
            None => router,
        }
    }
}

/// Refuses to serve off the loopback interface without authentication: a dashboard that can
/// retry, cancel and purge jobs must not be open to a network. Returns the error to show.
pub fn check_listen(addr: SocketAddr, auth: Option<&Auth>) -> Result<(), String> {
    if addr.ip().is_loopback() || auth.is_some() {
        return Ok(());
    }
    Err(format!(
        "refusing to serve the dashboard on {addr} without authentication: it is reachable from other machines \
         there. Set a token (--token or JOBQUEUE_WEB_TOKEN) or a user and password (--basic-auth user:password, \
         or JOBQUEUE_WEB_BASIC_AUTH), or listen on 127.0.0.1"
    ))
}

async fn authenticate(State(auth): State<Arc<Auth>>, req: Request, next: Next) -> Response {
    if authorized(&auth, req.headers()) {
        return next.run(req).await;
    }
    (
        StatusCode::UNAUTHORIZED,
        [(header::WWW_AUTHENTICATE, "Basic realm=\"jobqueue\", charset=\"UTF-8\"")],
        "authentication required: send the dashboard's token (Authorization: Bearer <token>, or as the password of the login prompt) or its user and password\n",
    )
        .into_response()
}

fn authorized(auth: &Auth, headers: &HeaderMap) -> bool {
    let Some(value) = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
    else {
        return false;
    };
    let basic = value.strip_prefix("Basic ").and_then(|b| {
        let bytes = base64::engine::general_purpose::STANDARD
            .decode(b.trim())
            .ok()?;
        let text = String::from_utf8(bytes).ok()?;
        let (u, p) = text.split_once(':')?;
        Some((u.to_owned(), p.to_owned()))
    });
    match auth {
        Auth::Token(token) => {
            if let Some(t) = value.strip_prefix("Bearer ") {
                return same(t.trim(), token);
            }
            basic.is_some_and(|(_, p)| same(&p, token))
        }
        Auth::Basic { user, password } => {
            basic.is_some_and(|(u, p)| same(&u, user) & same(&p, password))
        }
    }
}

/// Compares secrets in time that does not depend on where they differ.
pub(crate) fn same(a: &str, b: &str) -> bool {
    let (a, b) = (a.as_bytes(), b.as_bytes());
    if a.len() != b.len() {
        return false;
    }
    a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// Double-submit anti-forgery token: each browser gets a random token in a `SameSite=Strict`,
/// `HttpOnly` cookie, every form carries it, and an action is taken only when the form's
/// token equals the cookie's. A page of another site can neither read the token nor set the
/// cookie. Unlike a per-process secret, it holds across restarts and across replicas of an
/// application behind a load balancer.
async fn csrf_cookie(req: Request, next: Next) -> Response {
    let existing = req
        .headers()
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|c| c.trim().split_once('='))
        .find(|(name, value)| {
            *name == CSRF_COOKIE
                && value.len() == 32
                && value
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
        })
        .map(|(_, value)| value.to_owned());
    let (token, fresh) = match existing {
        Some(t) => (t, false),
        None => {
            let mut bytes = [0u8; 24];
            rand::Rng::fill(&mut rand::thread_rng(), &mut bytes);
            (
                base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes),
                true,
            )
        }
    };
    let mut res = CSRF.scope(token.clone(), next.run(req)).await;
    if fresh {
        if let Ok(v) = header::HeaderValue::from_str(&format!(
            "{CSRF_COOKIE}={token}; Path=/; HttpOnly; SameSite=Strict"
        )) {
            res.headers_mut().append(header::SET_COOKIE, v);
        }
    }
    res
}

async fn security_headers(req: Request, next: Next) -> Response {
    let mut res = next.run(req).await;
    let h = res.headers_mut();
    // Only our own stylesheet and script: an injected tag could not run even if escaping
    // failed somewhere.
    h.insert(
        header::CONTENT_SECURITY_POLICY,
        header::HeaderValue::from_static(
            "default-src 'none'; style-src 'self'; script-src 'self'; img-src 'self' data:; connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'",
        ),
    );
    h.insert(
        header::X_FRAME_OPTIONS,
        header::HeaderValue::from_static("DENY"),
    );
    h.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        header::HeaderValue::from_static("nosniff"),
    );
    h.insert(
        header::REFERRER_POLICY,
        header::HeaderValue::from_static("same-origin"),
    );
    h.insert(
        header::CACHE_CONTROL,
        header::HeaderValue::from_static("no-store"),
    );
    res
}

async fn style() -> Response {
    (
        [(header::CONTENT_TYPE, "text/css; charset=utf-8")],
        include_str!("assets/style.css"),
    )
        .into_response()
}

async fn script() -> Response {
    (
        [(header::CONTENT_TYPE, "text/javascript; charset=utf-8")],
        include_str!("assets/dashboard.js"),
    )
        .into_response()
}

/// The README's Rust blocks, compiled as documentation tests so that they stay true.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
mod readme {}
