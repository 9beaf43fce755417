//! `jobqueue web`: the dashboard, served stand-alone.

use std::net::SocketAddr;

use jobqueue::Queue;
use jobqueue_web::{Auth, Dashboard};

use crate::failure::Failure;

/// The flags of `jobqueue web` beside the address and the authentication.
#[derive(Debug)]
pub(crate) struct Options {
    pub(crate) read_only: bool,
    pub(crate) redact: bool,
    pub(crate) allow_host: Vec<String>,
    pub(crate) trust_forwarded_proto: bool,
    pub(crate) trust_forwarded_for: bool,
}

/// The authentication the flags ask for, refused (before connecting) when the address is
/// reachable from other machines and none is given, when the secret is too weak to resist
/// guessing, or when host names other than loopback are allowed without it.
pub(crate) fn auth(
    listen: SocketAddr,
    token: Option<&str>,
    basic: Option<&str>,
    allow_host: &[String],
) -> Result<Option<Auth>, Failure> {
    let auth = match (
        token.filter(|t| !t.is_empty()),
        basic.filter(|b| !b.is_empty()),
    ) {
        (Some(t), _) => Some(Auth::Token(t.to_owned())),
        (None, Some(b)) => {
            let Some((user, password)) = b.split_once(':') else {
                return Err(Failure::Usage(
                    "--basic-auth takes user:password (with a colon)".into(),
                ));
            };
            if user.is_empty() || password.is_empty() {
                return Err(Failure::Usage(
                    "--basic-auth needs a user and a password, as user:password".into(),
                ));
            }
            Some(Auth::Basic {
                user: user.to_owned(),
                password: password.to_owned(),
            })
        }
        (None, None) => None,
    };
    jobqueue_web::check_listen(listen, auth.as_ref()).map_err(Failure::Usage)?;
    if let Some(a) = &auth {
        a.check()
            .map_err(|e| Failure::Usage(format!("{e} (--token, --basic-auth)")))?;
    }
    jobqueue_web::check_hosts(allow_host, auth.as_ref(), false).map_err(|e| {
        Failure::Usage(format!(
            "{e}. --allow-host names other than localhost need --token or --basic-auth"
        ))
    })?;
    Ok(auth)
}

/// The host names to answer: those of `--allow-host`, and the address listened on when it
/// is one address of this machine (a browser that types it sends it as the host).
fn hosts(listen: SocketAddr, allow_host: Vec<String>) -> Vec<String> {
    let mut hosts = allow_host;
    let ip = listen.ip();
    if !ip.is_unspecified() && !ip.is_loopback() {
        hosts.push(match ip {
            std::net::IpAddr::V6(v6) => format!("[{v6}]"),
            v4 => v4.to_string(),
        });
    }
    hosts
}

/// Serves the dashboard until Ctrl-C.
pub(crate) async fn serve(
    queue: Queue,
    listen: SocketAddr,
    auth: Option<Auth>,
    options: Options,
) -> Result<(), Failure> {
    let mut dashboard = Dashboard::new(queue)
        .read_only(options.read_only)
        .redact_job_data(options.redact)
        .trust_forwarded_proto(options.trust_forwarded_proto)
        .trust_forwarded_for(options.trust_forwarded_for)
        .allowed_hosts(hosts(listen, options.allow_host));
    if let Some(auth) = auth {
        dashboard = dashboard.auth(auth);
    }
    let router = dashboard
        .try_router()
        .map_err(|e| Failure::Usage(e.to_string()))?;
    let listener = tokio::net::TcpListener::bind(listen).await?;
    let local = listener.local_addr()?;
    eprintln!("jobqueue dashboard on http://{local}/ (Ctrl-C stops it)");
    if listen.ip().is_unspecified() {
        eprintln!(
            "it answers only the host names localhost, 127.0.0.1 and [::1], and those of --allow-host: \
             add the name this machine is reached by"
        );
    }
    // The peer's address counts failed logins per address.
    axum::serve(
        listener,
        router.into_make_service_with_connect_info::<SocketAddr>(),
    )
    .with_graceful_shutdown(jobqueue::shutdown_signal())
    .await?;
    Ok(())
}
