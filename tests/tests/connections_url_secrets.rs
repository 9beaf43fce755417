//! Passwords never leak from database URLs: `redact_url` hides a password whatever
//! characters it holds, typed unencoded into a URL with or without a scheme, port, path,
//! query or fragment, and the errors of a URL that cannot be parsed or a server that cannot
//! be reached never show it. Neither test needs a database server.

use std::time::Duration;

use jobqueue::{Queue, QueueConfig};

// ---------------------------------------------------------------------------------------
// Passwords never leak from URLs
// ---------------------------------------------------------------------------------------

/// Passwords as people type them into a URL, unencoded: each is `S3CR` + something + `ET9X`.
const NASTY_MIDDLES: &[&str] = &[
    "", "/", "?", "#", "@", ":", "//", "/?#@", "@@", "a/b@c", "%", "%2F", " ", "\\", "[", "]",
    "&x=1", "=", ";", "'", "\"", "\n", "é", "::@", "@:", "/@/", "?@?", "#@#",
];

fn assert_no_secret(text: &str, context: &str) {
    assert!(
        !text.contains("S3CR") && !text.contains("ET9X"),
        "{context} leaks the password: {text}"
    );
}

/// `redact_url` hides the password whatever characters it holds, in
/// URLs with or without a scheme, port, path, query or fragment.
#[test]
fn redact_url_never_shows_a_password() {
    for middle in NASTY_MIDDLES {
        let password = format!("S3CR{middle}ET9X");
        for shape in [
            "mysql://app:{}@db:3306/jobs",
            "mysql://app:{}@db/jobs",
            "mysql://app:{}@db",
            "mysql://app:{}@db:3306/jobs?ssl-mode=REQUIRED",
            "mysql://app:{}@10.0.0.1:3306/jobs#frag",
            "mysql://app:{}@[::1]:3306/jobs",
            "mysql://:{}@db/jobs",
            "app:{}@db/jobs",
            "mysql://app:{}@db/jobs?ssl-ca=/etc/a@b",
        ] {
            let url = shape.replace("{}", &password);
            let shown = jobqueue::admin::redact_url(&url);
            assert_no_secret(&shown, &format!("redact_url({url:?})"));
        }
    }
    // What is not a secret stays readable.
    assert_eq!(
        jobqueue::admin::redact_url("mysql://app:pa/ss@db:3306/jobs"),
        "mysql://app:***@db:3306/jobs"
    );
    assert_eq!(
        jobqueue::admin::redact_url("mysql://root@db/jobs"),
        "mysql://root@db/jobs"
    );
}

/// A database URL that cannot be parsed (the error names the URL) or whose server cannot
/// be reached gives an error that does not show the password.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connect_errors_never_show_a_password() {
    let config = QueueConfig::default().acquire_timeout(Duration::from_millis(200));
    for middle in NASTY_MIDDLES {
        let password = format!("S3CR{middle}ET9X");
        // Port 1 on the loopback refuses at once.
        let url = format!("mysql://app:{password}@127.0.0.1:1/jobs");
        match Queue::connect_with(&url, config.clone()).await {
            Ok(_) => panic!("connected to {url:?}"),
            Err(e) => {
                assert_no_secret(&e.to_string(), &format!("connecting to {url:?}"));
                assert_no_secret(&format!("{e:?}"), &format!("connecting to {url:?} (Debug)"));
            }
        }
    }
}
