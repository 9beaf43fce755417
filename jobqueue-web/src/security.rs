//! What every request passes before a page sees it: the `Host` allow-list (against DNS
//! rebinding), authentication with throttled and logged failures, the browser's session and
//! its anti-forgery token, and notices only the dashboard itself can set.

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::extract::{ConnectInfo, Request, State};
use axum::http::{header, HeaderMap, HeaderValue, Method, StatusCode, Uri};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use base64::Engine;
use hmac::{Hmac, Mac};
use sha2::{Digest, Sha256};

use crate::Auth;

/// Host names every dashboard answers to: the loopback ones. A page of another site cannot
/// make a browser send them, whatever its DNS says.
pub(crate) const LOOPBACK_HOSTS: [&str; 3] = ["localhost", "127.0.0.1", "[::1]"];

/// The shortest token [`Auth::Token`] accepts (characters).
pub const MIN_TOKEN_CHARS: usize = 16;

/// The shortest password [`Auth::Basic`] accepts (characters).
pub const MIN_PASSWORD_CHARS: usize = 12;

/// Failed logins from one address (or from all, when the server does not know addresses)
/// within [`FAILURE_WINDOW`] after which that address is answered 429 until the window ends.
pub const MAX_LOGIN_FAILURES: u32 = 10;

/// The window [`MAX_LOGIN_FAILURES`] counts in.
pub const FAILURE_WINDOW: Duration = Duration::from_secs(60);

/// Addresses remembered at most; past it, failures count for everyone together, so that a
/// flood of addresses cannot grow the table without bound.
const MAX_TRACKED_ADDRESSES: usize = 10_000;

/// The cookie of the browser's session over plain HTTP.
const SESSION_COOKIE: &str = "jobqueue_session";

/// The cookie over HTTPS: the `__Host-` prefix makes browsers refuse it from a sibling
/// domain or without `Secure`, so no other site can plant one.
const SECURE_SESSION_COOKIE: &str = "__Host-jobqueue_session";

/// A setting the dashboard refuses to start with; the message says how to fix it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigError(pub(crate) String);

impl std::fmt::Display for ConfigError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for ConfigError {}

impl Auth {
    /// Refuses secrets too short to resist guessing: tokens under [`MIN_TOKEN_CHARS`]
    /// characters, passwords under [`MIN_PASSWORD_CHARS`], an empty user.
    pub fn check(&self) -> Result<(), ConfigError> {
        const MAKE_ONE: &str = "make one with `openssl rand -base64 24`";
        match self {
            Auth::Token(t) if t.chars().count() < MIN_TOKEN_CHARS => Err(ConfigError(format!(
                "the dashboard's token has {} characters, fewer than {MIN_TOKEN_CHARS}: it could be guessed; {MAKE_ONE}",
                t.chars().count()
            ))),
            Auth::Basic { user, .. } if user.is_empty() || user.contains(':') => Err(ConfigError(
                "the dashboard's user name is empty or holds a colon; give a name without one".into(),
            )),
            Auth::Basic { password, .. } if password.chars().count() < MIN_PASSWORD_CHARS => {
                Err(ConfigError(format!(
                    "the dashboard's password has {} characters, fewer than {MIN_PASSWORD_CHARS}: it could be guessed; {MAKE_ONE}",
                    password.chars().count()
                )))
            }
            _ => Ok(()),
        }
    }
}

/// Refuses host names other than the loopback ones without authentication: a dashboard that
/// answers another name is reachable from elsewhere (or through DNS rebinding), so someone
/// must check who comes: [`Dashboard::auth`](crate::Dashboard::auth), or the application in
/// front of it, which says so with
/// [`Dashboard::authenticated_upstream`](crate::Dashboard::authenticated_upstream).
pub fn check_hosts<S: AsRef<str>>(
    hosts: &[S],
    auth: Option<&Auth>,
    authenticated_upstream: bool,
) -> Result<(), ConfigError> {
    if auth.is_some() || authenticated_upstream {
        return Ok(());
    }
    let open: Vec<&str> = hosts
        .iter()
        .map(AsRef::as_ref)
        .filter(|h| !LOOPBACK_HOSTS.contains(&normalize_host(h).as_str()))
        .collect();
    if open.is_empty() {
        return Ok(());
    }
    Err(ConfigError(format!(
        "refusing to answer the host name(s) {open:?} without authentication: anyone who reaches the dashboard by \
         that name could read every job and act on it. Set a token or a user and password (Dashboard::auth; \
         --token or --basic-auth for `jobqueue web`), or, when the application authenticates every request before \
         it reaches the dashboard, say so with Dashboard::authenticated_upstream(true)"
    )))
}

/// A host name as compared: lowercase, without port or trailing dot; IPv6 in brackets.
pub(crate) fn normalize_host(authority: &str) -> String {
    let a = authority.trim();
    let name = if a.starts_with('[') {
        a.find(']').map_or(a, |end| &a[..=end])
    } else {
        match a.rsplit_once(':') {
            Some((name, port)) if port.bytes().all(|b| b.is_ascii_digit()) => name,
            _ => a,
        }
    };
    name.trim_end_matches('.').to_ascii_lowercase()
}

/// The security settings and state of one router.
pub(crate) struct Security {
    /// Names answered beside the loopback ones, normalized; `*` answers any.
    pub(crate) hosts: Vec<String>,
    pub(crate) auth: Option<Auth>,
    pub(crate) upstream: bool,
    /// The header the authenticating application or proxy names the user in.
    pub(crate) actor_header: Option<header::HeaderName>,
    /// Whether `X-Forwarded-Proto: https` from the proxy in front means HTTPS.
    pub(crate) trust_forwarded_proto: bool,
    /// Whether the last address of `X-Forwarded-For` is the client's.
    pub(crate) trust_forwarded_for: bool,
    /// Whether job data is redacted: the filters over redacted fields are refused too.
    pub(crate) redact: bool,
    /// The key of the anti-forgery tokens, notices and key digests.
    key: [u8; 32],
    throttle: Mutex<Throttle>,
}

impl std::fmt::Debug for Security {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Security")
            .field("hosts", &self.hosts)
            .field("auth", &self.auth)
            .field("upstream", &self.upstream)
            .finish_non_exhaustive()
    }
}

impl Security {
    pub(crate) fn new(
        hosts: &[String],
        auth: Option<Auth>,
        upstream: bool,
        actor_header: Option<header::HeaderName>,
        (trust_forwarded_proto, trust_forwarded_for): (bool, bool),
        redact: bool,
        secret: Option<&[u8]>,
    ) -> Self {
        // The key: the configured secret, else one derived from the login secret (replicas
        // that share the token share it, and it survives restarts), else random: forms of
        // an earlier process are then refused as expired.
        let key: [u8; 32] = match (secret, &auth) {
            (Some(s), _) => Sha256::new()
                .chain_update(b"jobqueue-web key\0")
                .chain_update(s)
                .finalize()
                .into(),
            (None, Some(Auth::Token(t))) => Sha256::new()
                .chain_update(b"jobqueue-web key from token\0")
                .chain_update(t.as_bytes())
                .finalize()
                .into(),
            (None, Some(Auth::Basic { user, password })) => Sha256::new()
                .chain_update(b"jobqueue-web key from basic\0")
                .chain_update(user.as_bytes())
                .chain_update(b"\0")
                .chain_update(password.as_bytes())
                .finalize()
                .into(),
            (None, None) => {
                let mut k = [0u8; 32];
                rand::Rng::fill(&mut rand::thread_rng(), &mut k);
                k
            }
        };
        Security {
            hosts: hosts.iter().map(|h| normalize_host(h)).collect(),
            auth,
            upstream,
            actor_header,
            trust_forwarded_proto,
            trust_forwarded_for,
            redact,
            key,
            throttle: Mutex::new(Throttle::default()),
        }
    }

    fn mac(&self, purpose: &str, data: &[u8]) -> String {
        let mut m = <Hmac<Sha256> as Mac>::new_from_slice(&self.key).expect("any key length");
        m.update(purpose.as_bytes());
        m.update(b"\0");
        m.update(data);
        base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(m.finalize().into_bytes())
    }

    /// The anti-forgery token of a session: only this dashboard (or one with its key) can
    /// compute it, so a planted session cookie is of no use without its token.
    pub(crate) fn csrf_token(&self, session: &str) -> String {
        self.mac("csrf", session.as_bytes())
    }

    /// The signature a notice carries in its link (`nsig`).
    pub(crate) fn notice_sig(&self, notice: &str) -> String {
        self.mac("notice", notice.as_bytes())[..22].to_owned()
    }

    /// A short digest standing for a redacted value: equal values give equal digests within
    /// one key, and no one without the key can test a guess against it.
    pub(crate) fn digest(&self, value: &str) -> String {
        self.mac("digest", value.as_bytes())[..10].to_owned()
    }

    fn host_allowed(&self, name: &str) -> bool {
        LOOPBACK_HOSTS.contains(&name) || self.hosts.iter().any(|h| h == "*" || h == name)
    }

    /// Whether an `Origin` names this dashboard: the request's own host and port, or one of
    /// the configured names (a proxy in front may rewrite `Host`).
    pub(crate) fn origin_allowed(&self, origin: &str, host: Option<&str>) -> bool {
        let Some(authority) = origin
            .strip_prefix("https://")
            .or_else(|| origin.strip_prefix("http://"))
        else {
            return false;
        };
        if host.is_some_and(|h| h.eq_ignore_ascii_case(authority)) {
            return true;
        }
        let name = normalize_host(authority);
        self.hosts.iter().any(|h| h == "*" || *h == name)
    }
}

/// What the handlers of one request read: who is acting, and the session's token.
#[derive(Debug, Clone)]
pub(crate) struct RequestInfo {
    pub(crate) actor: String,
    pub(crate) csrf: String,
    pub(crate) security: Arc<Security>,
}

tokio::task_local! {
    static REQUEST: RequestInfo;
}

/// Who is acting in the request being handled: the basic user name, `token`, `upstream` or
/// `loopback`.
pub(crate) fn actor() -> String {
    REQUEST
        .try_with(|r| r.actor.clone())
        .unwrap_or_else(|_| "unknown".into())
}

/// The anti-forgery token forms carry in the request being handled.
pub(crate) fn csrf() -> String {
    REQUEST.try_with(|r| r.csrf.clone()).unwrap_or_default()
}

/// The signature for `notice`, for a link to a page that shows it.
pub(crate) fn notice_sig(notice: &str) -> String {
    REQUEST
        .try_with(|r| r.security.notice_sig(notice))
        .unwrap_or_default()
}

/// A short keyed digest of `value`, shown in place of a redacted value.
pub(crate) fn digest(value: &str) -> String {
    REQUEST
        .try_with(|r| r.security.digest(value))
        .unwrap_or_default()
}

fn plain(status: StatusCode, text: String) -> Response {
    (
        status,
        [(header::CONTENT_TYPE, "text/plain; charset=utf-8")],
        text,
    )
        .into_response()
}

/// The host the request names: its `Host` header, or the authority of its URI (HTTP/2).
fn request_host(req: &Request) -> Option<String> {
    req.headers()
        .get(header::HOST)
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned)
        .or_else(|| req.uri().authority().map(|a| a.as_str().to_owned()))
}

/// Every request: the host, the login, the session and the notice, in this order.
pub(crate) async fn guard(State(sec): State<Arc<Security>>, req: Request, next: Next) -> Response {
    // 1. The host, before anything else: a browser sends the name it resolved, so a page
    //    that rebinds its own name to this address is answered nothing but this refusal.
    let Some(host) = request_host(&req) else {
        return plain(
            StatusCode::BAD_REQUEST,
            "the request names no host (no Host header): the dashboard answers only requests that name an allowed host\n".into(),
        );
    };
    let name = normalize_host(&host);
    if !sec.host_allowed(&name) {
        tracing::warn!(host = %host, "dashboard request refused: host not allowed");
        return plain(
            StatusCode::FORBIDDEN,
            format!(
                "this dashboard does not answer to the host name {name:?}.\n\n\
                 It answers to localhost, 127.0.0.1 and [::1], and to the names it is given, so that a web page \
                 whose name was made to point here (DNS rebinding) cannot read or change jobs.\n\
                 If you reach the dashboard by this name, allow it: `jobqueue web --allow-host {name}`, or \
                 Dashboard::allowed_hosts([\"{name}\"]) in the application.\n"
            ),
        );
    }

    // 2. The login.
    let forwarded = sec
        .trust_forwarded_for
        .then(|| {
            req.headers()
                .get_all("x-forwarded-for")
                .iter()
                .filter_map(|v| v.to_str().ok())
                .flat_map(|v| v.split(','))
                .last()
                .and_then(|a| a.trim().parse::<IpAddr>().ok())
        })
        .flatten();
    let peer = forwarded.or_else(|| {
        req.extensions()
            .get::<ConnectInfo<SocketAddr>>()
            .map(|c| c.0.ip())
    });
    let actor = match &sec.auth {
        None if sec.upstream => {
            // The user the application authenticated, when it names one.
            let named = sec
                .actor_header
                .as_ref()
                .and_then(|h| req.headers().get(h))
                .and_then(|v| v.to_str().ok())
                .map(|v| {
                    v.chars()
                        .filter(|c| !c.is_control())
                        .take(100)
                        .collect::<String>()
                })
                .filter(|v| !v.trim().is_empty());
            match named {
                Some(user) => format!("upstream:{}", user.trim()),
                None => "upstream".to_owned(),
            }
        }
        None => "loopback".to_owned(),
        Some(auth) => {
            let now = Instant::now();
            if let Some(wait) = sec.throttle.lock().expect("throttle").blocked(peer, now) {
                let secs = wait.as_secs().max(1);
                return (
                    StatusCode::TOO_MANY_REQUESTS,
                    [
                        (header::RETRY_AFTER, HeaderValue::from(secs)),
                        (
                            header::CONTENT_TYPE,
                            HeaderValue::from_static("text/plain; charset=utf-8"),
                        ),
                    ],
                    format!("too many failed logins: try again in {secs} seconds\n"),
                )
                    .into_response();
            }
            match authorized(auth, req.headers()) {
                Some(who) => who,
                None => {
                    // A browser's first request, or a health probe, carries no credentials:
                    // only wrong ones count and are logged (a guess always sends some).
                    if req.headers().contains_key(header::AUTHORIZATION) {
                        let failures = sec.throttle.lock().expect("throttle").failed(peer, now);
                        tracing::warn!(
                            peer = %peer.map_or_else(|| "unknown".to_owned(), |p| p.to_string()),
                            host = %host,
                            failures,
                            "dashboard login failed"
                        );
                    }
                    return (
                        StatusCode::UNAUTHORIZED,
                        [(header::WWW_AUTHENTICATE, "Basic realm=\"jobqueue\", charset=\"UTF-8\"")],
                        "authentication required: send the dashboard's token (Authorization: Bearer <token>, or as the password of the login prompt) or its user and password\n",
                    )
                        .into_response();
                }
            }
        }
    };

    // 3. The session: a random id in a cookie, and a token bound to it.
    let secure = req.uri().scheme_str() == Some("https")
        || (sec.trust_forwarded_proto
            && req
                .headers()
                .get("x-forwarded-proto")
                .and_then(|v| v.to_str().ok())
                .and_then(|v| v.split(',').next())
                .is_some_and(|p| p.trim().eq_ignore_ascii_case("https")));
    let cookie_name = if secure {
        SECURE_SESSION_COOKIE
    } else {
        SESSION_COOKIE
    };
    let session = session_of(req.headers(), cookie_name);
    // A link followed from another site (chat, a pager) arrives without the `SameSite=Strict`
    // cookie even when the browser has one: a new session would replace it and expire the
    // forms of every open tab. The page reloads itself instead, a same-site navigation that
    // carries the cookie.
    if session.is_none() && req.method() == Method::GET && cross_site_navigation(req.headers()) {
        return (
            [(header::CONTENT_TYPE, "text/html; charset=utf-8")],
            "<!doctype html><html lang=\"en\"><head><meta charset=\"utf-8\">\
             <meta http-equiv=\"refresh\" content=\"0\"><title>jobqueue</title></head>\
             <body><p>Opening the dashboard…</p></body></html>",
        )
            .into_response();
    }
    let (session, fresh) = match session {
        Some(s) => (s, false),
        None => {
            let mut bytes = [0u8; 24];
            rand::Rng::fill(&mut rand::thread_rng(), &mut bytes);
            (
                base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes),
                true,
            )
        }
    };

    // A filter over a redacted field would tell, row by row, what the field holds.
    if sec.redact {
        if let Some(field) = redacted_filter(req.uri()) {
            return plain(
                StatusCode::BAD_REQUEST,
                format!("this dashboard redacts job data, so it does not filter on {field:?} either; filter by queue, kind, status or time\n"),
            );
        }
    }

    // 4. A notice is shown only when this dashboard wrote it (its link is signed).
    let mut req = req;
    if let Some(uri) = without_forged_notice(&sec, req.uri()) {
        *req.uri_mut() = uri;
    }

    let info = RequestInfo {
        actor,
        csrf: sec.csrf_token(&session),
        security: sec.clone(),
    };
    // A request from another site comes without the Strict cookie whatever the browser
    // holds: a new session set on it would replace the browser's and expire its open forms.
    let from_other_site = req
        .headers()
        .get("sec-fetch-site")
        .is_some_and(|v| v.as_bytes().eq_ignore_ascii_case(b"cross-site"));
    let mut res = REQUEST.scope(info, next.run(req)).await;
    if fresh && !from_other_site {
        let secure_attr = if secure { "; Secure" } else { "" };
        if let Ok(v) = HeaderValue::from_str(&format!(
            "{cookie_name}={session}; Path=/; HttpOnly; SameSite=Strict{secure_attr}"
        )) {
            res.headers_mut().append(header::SET_COOKIE, v);
        }
    }
    res
}

/// Whether the request is a top-level navigation from another site.
fn cross_site_navigation(headers: &HeaderMap) -> bool {
    let is = |name: &str, value: &str| {
        headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.eq_ignore_ascii_case(value))
    };
    is("sec-fetch-site", "cross-site") && is("sec-fetch-mode", "navigate")
}

/// The session id of the request's cookie `name`, if well formed.
fn session_of(headers: &HeaderMap, name: &str) -> Option<String> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|c| c.trim().split_once('='))
        .find(|(n, value)| {
            *n == name
                && value.len() == 32
                && value
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
        })
        .map(|(_, value)| value.to_owned())
}

/// The URI without its `notice` when the notice's signature is missing or wrong (`None`:
/// keep the URI as it is).
fn without_forged_notice(sec: &Security, uri: &Uri) -> Option<Uri> {
    let query = uri.query()?;
    let pairs: Vec<(String, String)> = serde_urlencoded::from_str(query).ok()?;
    let notice = pairs.iter().find(|(k, _)| k == "notice")?;
    let sig = pairs.iter().find(|(k, _)| k == "nsig").map(|(_, v)| v);
    if sig.is_some_and(|s| crate::same(s, &sec.notice_sig(&notice.1))) {
        return None;
    }
    let kept: Vec<&(String, String)> = pairs
        .iter()
        .filter(|(k, _)| k != "notice" && k != "nsig")
        .collect();
    let q = serde_urlencoded::to_string(&kept).ok()?;
    let pq = if q.is_empty() {
        uri.path().to_owned()
    } else {
        format!("{}?{q}", uri.path())
    };
    let mut parts = uri.clone().into_parts();
    parts.path_and_query = Some(pq.parse().ok()?);
    Uri::from_parts(parts).ok()
}

/// The first filter of the query over a field redaction hides (task key, metadata, error
/// text), if any is given.
fn redacted_filter(uri: &Uri) -> Option<String> {
    let pairs: Vec<(String, String)> = serde_urlencoded::from_str(uri.query()?).ok()?;
    pairs
        .into_iter()
        .find(|(k, v)| !v.is_empty() && matches!(k.as_str(), "key" | "meta" | "error"))
        .map(|(k, _)| k)
}

/// Who the credentials name, if they are right: the basic user, or `token`.
fn authorized(auth: &Auth, headers: &HeaderMap) -> Option<String> {
    let value = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())?
        .trim();
    // The scheme is case-insensitive (RFC 9110).
    let (scheme, rest) = value.split_once(' ')?;
    let rest = rest.trim();
    let basic = scheme.eq_ignore_ascii_case("basic").then(|| {
        let bytes = base64::engine::general_purpose::STANDARD
            .decode(rest)
            .ok()?;
        let text = String::from_utf8(bytes).ok()?;
        let (u, p) = text.split_once(':')?;
        Some((u.to_owned(), p.to_owned()))
    });
    match auth {
        Auth::Token(token) => {
            let ok = if scheme.eq_ignore_ascii_case("bearer") {
                crate::same(rest, token)
            } else {
                basic.flatten().is_some_and(|(_, p)| crate::same(&p, token))
            };
            ok.then(|| "token".to_owned())
        }
        Auth::Basic { user, password } => {
            let (u, p) = basic.flatten()?;
            (crate::same(&u, user) & crate::same(&p, password)).then_some(u)
        }
    }
}

/// Failed logins per address in fixed windows of [`FAILURE_WINDOW`]. Only known addresses
/// are throttled, each on its own: failures of an unknown address (no connection info), or
/// of addresses past [`MAX_TRACKED_ADDRESSES`], are logged but not counted, since a bucket
/// they shared would let anyone lock every operator out.
#[derive(Debug, Default)]
struct Throttle {
    /// Address → window start and failures in it.
    windows: HashMap<IpAddr, (Instant, u32)>,
}

impl Throttle {
    /// How long `peer` must wait, if it failed too often in the current window.
    fn blocked(&mut self, peer: Option<IpAddr>, now: Instant) -> Option<Duration> {
        let key = peer?;
        let (start, n) = *self.windows.get(&key)?;
        let end = start + FAILURE_WINDOW;
        if now >= end {
            self.windows.remove(&key);
            return None;
        }
        (n >= MAX_LOGIN_FAILURES).then(|| end - now)
    }

    /// Counts a failure of `peer`; returns its failures in the window (0: not counted).
    fn failed(&mut self, peer: Option<IpAddr>, now: Instant) -> u32 {
        let Some(key) = peer else { return 0 };
        if self.windows.len() >= MAX_TRACKED_ADDRESSES && !self.windows.contains_key(&key) {
            self.windows
                .retain(|_, (start, _)| now < *start + FAILURE_WINDOW);
            if self.windows.len() >= MAX_TRACKED_ADDRESSES {
                return 0;
            }
        }
        let e = self.windows.entry(key).or_insert((now, 0));
        if now >= e.0 + FAILURE_WINDOW {
            *e = (now, 0);
        }
        e.1 += 1;
        e.1
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hosts_are_compared_without_port_case_or_trailing_dot() {
        assert_eq!(normalize_host("LocalHost:8080"), "localhost");
        assert_eq!(normalize_host("[::1]:8080"), "[::1]");
        assert_eq!(normalize_host("ops.example."), "ops.example");
        assert_eq!(normalize_host("127.0.0.1"), "127.0.0.1");
    }

    #[test]
    fn the_throttle_blocks_after_the_failures_of_one_address_only() {
        let mut t = Throttle::default();
        let now = Instant::now();
        let a = Some(IpAddr::from([10, 0, 0, 1]));
        let b = Some(IpAddr::from([10, 0, 0, 2]));
        for _ in 0..MAX_LOGIN_FAILURES {
            assert!(t.blocked(a, now).is_none());
            t.failed(a, now);
        }
        assert!(t.blocked(a, now).is_some());
        assert!(t.blocked(b, now).is_none());
        assert!(
            t.blocked(a, now + FAILURE_WINDOW).is_none(),
            "the window ends"
        );
    }

    #[test]
    fn unknown_and_untracked_addresses_are_never_held_back_together() {
        let mut t = Throttle::default();
        let now = Instant::now();
        for _ in 0..2 * MAX_LOGIN_FAILURES {
            assert_eq!(t.failed(None, now), 0);
        }
        assert!(t.blocked(None, now).is_none());
        for i in 0..MAX_TRACKED_ADDRESSES as u32 {
            t.failed(Some(IpAddr::from((i + 1).to_be_bytes())), now);
        }
        let late = Some(IpAddr::from([192, 168, 0, 1]));
        for _ in 0..MAX_LOGIN_FAILURES {
            assert_eq!(
                t.failed(late, now),
                0,
                "past the tracked addresses: not counted"
            );
        }
        assert!(t.blocked(late, now).is_none());
        assert!(
            t.blocked(Some(IpAddr::from(1u32.to_be_bytes())), now)
                .is_none(),
            "one failure each"
        );
    }
}
