//! `jobqueue web`: the dashboard, served stand-alone.

use std::net::SocketAddr;

use jobqueue::Queue;
use jobqueue_web::{Auth, Dashboard};

use crate::failure::Failure;

/// The authentication the flags ask for, refused when the address is reachable from other
/// machines and none is given.
pub(crate) fn auth(
    listen: SocketAddr,
    token: Option<&str>,
    basic: Option<&str>,
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
    Ok(auth)
}

/// Serves the dashboard until Ctrl-C.
pub(crate) async fn serve(
    queue: Queue,
    listen: SocketAddr,
    auth: Option<Auth>,
    read_only: bool,
    hide_payloads: bool,
) -> Result<(), Failure> {
    let mut dashboard = Dashboard::new(queue)
        .read_only(read_only)
        .hide_payloads(hide_payloads);
    if let Some(auth) = auth {
        dashboard = dashboard.auth(auth);
    }
    let listener = tokio::net::TcpListener::bind(listen).await?;
    let local = listener.local_addr()?;
    eprintln!("jobqueue dashboard on http://{local}/ (Ctrl-C stops it)");
    axum::serve(listener, dashboard.router())
        .with_graceful_shutdown(jobqueue::shutdown_signal())
        .await?;
    Ok(())
}
