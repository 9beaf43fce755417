//! The operator dashboard of jobqueue: queues, jobs, workers and periodic schedules in a web
//! page, with retry, cancel, pause, resume, bulk actions and purge.
//!
//! [`Dashboard::router`] is an axum [`Router`] to mount in your application under a path of
//! your choice:
//!
//! ```no_run
//! # async fn demo(queue: jobqueue::Queue) {
//! use jobqueue_web::{Auth, Dashboard};
//! let dashboard = Dashboard::new(queue)
//!     .auth(Auth::Token(std::env::var("DASHBOARD_TOKEN").unwrap()))
//!     .allowed_hosts(["ops.example.com"]);
//! let app = axum::Router::new().nest("/jobs", dashboard.router());
//! # let _: axum::Router = app;
//! # }
//! ```
//!
//! `jobqueue web --listen 127.0.0.1:8080` serves it stand-alone. Everything it shows and
//! does goes through the operator API of [`jobqueue::Queue`]. Pages are rendered on the
//! server (every value from the database is HTML-escaped); the stylesheet and a small
//! script that refreshes the live pages (every 5 seconds, with a pause control) are served
//! from the binary.
//!
//! # Security
//!
//! Safe by default, on any network:
//! - **Host allow-list.** It answers only requests whose `Host` is `localhost`, `127.0.0.1`
//!   or `[::1]` (any port), plus the names given to [`Dashboard::allowed_hosts`]; others get a
//!   403 that names the host and how to allow it. A web page that rebinds its own name to
//!   this address (DNS rebinding) is refused.
//! - **Fails closed.** Other names need authentication: [`Dashboard::auth`], or the
//!   application's own in front of the router, declared with
//!   [`Dashboard::authenticated_upstream`]. Without either, [`Dashboard::try_router`] is an
//!   error (and [`Dashboard::router`] panics).
//! - **Logins.** Tokens under [`MIN_TOKEN_CHARS`] characters and passwords under
//!   [`MIN_PASSWORD_CHARS`] are refused. Failed logins are logged at WARN (peer address, host;
//!   never the secret) and, past [`MAX_LOGIN_FAILURES`] in [`FAILURE_WINDOW`] from one address,
//!   answered 429 with `Retry-After`. Serve with
//!   `into_make_service_with_connect_info::<SocketAddr>()` so that failures are counted per
//!   address; without it they are counted for everyone together.
//! - **Actions** are POSTs. Each carries a token bound to the browser's session cookie
//!   (HMAC-SHA256 of the session id, under [`Dashboard::secret`]), is refused when `Origin`
//!   names another site or `Sec-Fetch-Site` says cross-site, and is recorded: one audit row
//!   per action in `job_queue_audit` (who, what, which jobs), shown on the job's page and on
//!   `/audit`, and an INFO log line `dashboard action`.
//! - [`Dashboard::read_only`] hides and refuses actions; [`Dashboard::redact_job_data`] keeps
//!   every field a job's producer controls off the pages.
//! - Error pages name no internals: a database error shows a request id, logged at WARN
//!   with the full error.

use std::net::SocketAddr;
use std::sync::Arc;

use axum::extract::Request;
use axum::http::header;
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::Router;
use jobqueue::Queue;
use sha2::{Digest, Sha256};

mod audit;
mod html;
mod pages;
mod security;

pub use security::{
    check_hosts, ConfigError, FAILURE_WINDOW, MAX_LOGIN_FAILURES, MIN_PASSWORD_CHARS,
    MIN_TOKEN_CHARS,
};

/// Who may see the dashboard, when it is not left to the application's own layer.
#[derive(Clone)]
#[non_exhaustive]
pub enum Auth {
    /// A secret token: sent as `Authorization: Bearer <token>`, or typed by a browser as
    /// the password of the login prompt (with any user name). At least
    /// [`MIN_TOKEN_CHARS`] characters: `openssl rand -base64 24` makes one.
    Token(String),
    /// A user name and password (HTTP basic authentication).
    Basic {
        /// The user name.
        user: String,
        /// The password: at least [`MIN_PASSWORD_CHARS`] characters.
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
    redact: bool,
    auth: Option<Auth>,
    hosts: Vec<String>,
    upstream: bool,
    actor_header: Option<header::HeaderName>,
    trust_forwarded_proto: bool,
    trust_forwarded_for: bool,
    secret: Option<Vec<u8>>,
}

/// What every handler reads.
#[derive(Debug)]
pub(crate) struct Shared {
    pub(crate) queue: Queue,
    pub(crate) read_only: bool,
    /// Whether every field a job's producer controls is kept off the pages
    /// ([`Dashboard::redact_job_data`]).
    pub(crate) redact: bool,
    /// The same as `redact`, under the name of earlier releases.
    pub(crate) hide_payloads: bool,
    /// The host allow-list and the key of tokens and notices.
    pub(crate) security: Arc<security::Security>,
    /// The overview's figures and when they were read: every viewer's refresh within
    /// [`pages::OVERVIEW_MAX_AGE`] shares one read (the counts read a whole index).
    pub(crate) overview: tokio::sync::Mutex<Option<pages::OverviewFigures>>,
    /// The job list's figures that do not depend on its page, shared by every viewer for a
    /// moment (see [`pages::ListFigures`]).
    pub(crate) list: pages::ListFigures,
}

impl Shared {
    /// Forgets the figures read for every viewer, after an action that changed them: the
    /// next page reads them again.
    pub(crate) async fn forget_figures(&self) {
        self.overview.lock().await.take();
        self.list.forget().await;
    }
}

/// The anti-forgery token forms carry and actions must send back: bound to the browser's
/// session cookie.
pub(crate) fn csrf() -> String {
    security::csrf()
}

impl Dashboard {
    /// A dashboard of `queue`'s database, with every action enabled, job data shown, no
    /// authentication of its own, answering the loopback host names only.
    pub fn new(queue: Queue) -> Self {
        Dashboard {
            queue,
            read_only: false,
            redact: false,
            auth: None,
            hosts: Vec::new(),
            upstream: false,
            actor_header: None,
            trust_forwarded_proto: false,
            trust_forwarded_for: false,
            secret: None,
        }
    }

    /// With `true`, the pages show no action and every action is refused with 403.
    /// Default false.
    pub fn read_only(mut self, on: bool) -> Self {
        self.read_only = on;
        self
    }

    /// With `true`, no field a job's producer controls is shown: payload, output, task key
    /// (a short keyed digest stands for it, so rows can still be told apart), last error and
    /// attempt errors, metadata, progress, and concurrency and rate keys; the filters over
    /// them (key prefix, metadata) are refused. Queue, kind, status, times and counts stay.
    /// Default false.
    pub fn redact_job_data(mut self, on: bool) -> Self {
        self.redact = on;
        self
    }

    /// The former name of [`Dashboard::redact_job_data`], which hides more than payloads.
    #[deprecated(note = "use `redact_job_data`: it hides every field a job's producer controls")]
    pub fn hide_payloads(self, on: bool) -> Self {
        self.redact_job_data(on)
    }

    /// Requires this authentication for every request (see [`Auth::check`] for the
    /// strength it needs). Default none: only loopback host names are answered, unless
    /// [`Dashboard::authenticated_upstream`] says the application authenticates.
    pub fn auth(mut self, auth: Auth) -> Self {
        self.auth = Some(auth);
        self
    }

    /// Host names to answer beside `localhost`, `127.0.0.1` and `[::1]`: the names the
    /// dashboard is reached by (any port; `*` for any name, for a dashboard behind a proxy
    /// that checks the name itself). Requests naming another host are refused with 403.
    /// Names other than loopback need [`Dashboard::auth`] or
    /// [`Dashboard::authenticated_upstream`].
    pub fn allowed_hosts<I, S>(mut self, hosts: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.hosts.extend(hosts.into_iter().map(Into::into));
        self
    }

    /// Declares that every request reaches the router only after the application has
    /// authenticated it (its own layer, a proxy with single sign-on): the dashboard then
    /// answers the names of [`Dashboard::allowed_hosts`] without authentication of its own,
    /// and records actions as done by `upstream`. Default false.
    pub fn authenticated_upstream(mut self, on: bool) -> Self {
        self.upstream = on;
        self
    }

    /// With [`Dashboard::authenticated_upstream`]: the request header in which the
    /// application or its proxy names the user it authenticated (`X-Forwarded-User`, say).
    /// Actions are then recorded as done by `upstream:<user>`. Only for a header the
    /// application sets itself and never passes on from a client: anyone can send it.
    ///
    /// # Panics
    ///
    /// When `name` is not a valid header name.
    pub fn actor_header(mut self, name: &str) -> Self {
        self.actor_header = Some(
            header::HeaderName::from_bytes(name.as_bytes())
                .unwrap_or_else(|_| panic!("{name:?} is not a valid header name")),
        );
        self
    }

    /// The key of the anti-forgery tokens (HMAC-SHA256 of the session cookie) and of the
    /// notices' signatures. Replicas behind one load balancer must share it, or a form
    /// loaded from one is refused by another. Default: derived from the [`Auth`] secret when
    /// there is one (replicas with the same token agree, restarts keep forms valid), else
    /// random per process (a restart expires open forms: "reload the page").
    pub fn secret(mut self, secret: impl AsRef<[u8]>) -> Self {
        self.secret = Some(secret.as_ref().to_vec());
        self
    }

    /// With `true`, `X-Forwarded-Proto: https` means the browser spoke HTTPS, so the session
    /// cookie gets `Secure` and the `__Host-` prefix. Only for a proxy in front that sets the
    /// header itself: anyone can send it. Default false.
    pub fn trust_forwarded_proto(mut self, on: bool) -> Self {
        self.trust_forwarded_proto = on;
        self
    }

    /// With `true`, the last address of `X-Forwarded-For` (the one your proxy appended) is
    /// the client's, for the login throttle and the log. Behind a proxy without it, every
    /// client has the proxy's address, and failed logins from anyone would throttle everyone.
    /// Only for a proxy in front that appends the header itself. Default false.
    pub fn trust_forwarded_for(mut self, on: bool) -> Self {
        self.trust_forwarded_for = on;
        self
    }

    /// The router: mount it with `Router::nest("/jobs", ...)`, or serve it as it is.
    ///
    /// # Panics
    ///
    /// When the settings are refused (a weak token, host names without authentication):
    /// see [`Dashboard::try_router`], which returns the error instead.
    pub fn router(self) -> Router {
        self.try_router().unwrap_or_else(|e| panic!("{e}"))
    }

    /// The router, or why the settings are refused: a token or password too short
    /// ([`Auth::check`]), or host names other than loopback without authentication
    /// ([`check_hosts`]).
    pub fn try_router(self) -> Result<Router, ConfigError> {
        if let Some(auth) = &self.auth {
            auth.check()?;
        }
        check_hosts(&self.hosts, self.auth.as_ref(), self.upstream)?;
        let security = Arc::new(security::Security::new(
            &self.hosts,
            self.auth,
            self.upstream,
            self.actor_header,
            (self.trust_forwarded_proto, self.trust_forwarded_for),
            self.redact,
            self.secret.as_deref(),
        ));
        let shared = Arc::new(Shared {
            queue: self.queue,
            read_only: self.read_only,
            redact: self.redact,
            hide_payloads: self.redact,
            security: security.clone(),
            overview: tokio::sync::Mutex::new(None),
            list: pages::ListFigures::default(),
        });
        let router = Router::new()
            .route("/", get(pages::overview))
            .route("/live", get(pages::overview_live))
            .route("/jobs", get(pages::jobs))
            .route("/jobs/names", get(pages::picker_names))
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
            .route("/jobs/selection", post(pages::selection))
            .route("/jobs/{id}/delete", post(pages::delete))
            .route("/jobs/{id}/run-now", post(pages::run_now))
            .route("/search", get(pages::search))
            .route("/queues/{queue}/pause", post(pages::pause))
            .route("/queues/{queue}/resume", post(pages::resume))
            .route("/purge", post(pages::purge))
            .route("/audit", get(audit::audit_page))
            .route("/assets/style.css", get(style))
            .route("/assets/dashboard.js", get(script))
            .with_state(shared);
        // The guard (host, login, session) runs first; the security headers wrap every
        // answer, its refusals included.
        Ok(router
            .layer(middleware::from_fn_with_state(security, security::guard))
            .layer(middleware::from_fn(security_headers)))
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

/// Compares secrets in time that depends neither on where they differ nor on their lengths:
/// their SHA-256 digests are compared byte by byte.
pub(crate) fn same(a: &str, b: &str) -> bool {
    let (a, b) = (Sha256::digest(a.as_bytes()), Sha256::digest(b.as_bytes()));
    a.iter()
        .zip(b.iter())
        .fold(0u8, |acc, (x, y)| acc | (x ^ y))
        == 0
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
