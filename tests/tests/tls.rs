//! Servers that require TLS: a throwaway server with certificates made for the test and
//! `require_secure_transport=ON` runs a job for a queue that connects with
//! `ssl-mode=VERIFY_CA`, and a connection without TLS is refused with an error that names
//! the URL option to set; the same on a PostgreSQL server whose `pg_hba.conf` admits TLS
//! connections only (`sslmode=verify-full`).

use std::os::unix::fs::PermissionsExt as _;
use std::path::Path;
use std::time::Duration;

use jobqueue::testing::TestServer;
use jobqueue::{job, Error, JobStatus, Queue};
use rcgen::{BasicConstraints, CertificateParams, IsCa, KeyPair, SanType};
use tests::{quick_worker, start, stop, wait_status};

/// A certificate authority and a server certificate it signed, for `localhost` and
/// 127.0.0.1, as PEM files in `dir`: `ca.pem`, `server-cert.pem`, `server-key.pem`.
fn make_certificates(dir: &Path) {
    let ca_key = KeyPair::generate().unwrap();
    let mut ca_params = CertificateParams::new(Vec::<String>::new()).unwrap();
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca_params
        .distinguished_name
        .push(rcgen::DnType::CommonName, "jobqueue test CA");
    let ca_cert = ca_params.self_signed(&ca_key).unwrap();
    let issuer = rcgen::Issuer::new(ca_params, ca_key);

    let server_key = KeyPair::generate().unwrap();
    let mut server_params = CertificateParams::new(vec!["localhost".to_owned()]).unwrap();
    server_params
        .subject_alt_names
        .push(SanType::IpAddress([127, 0, 0, 1].into()));
    server_params
        .distinguished_name
        .push(rcgen::DnType::CommonName, "localhost");
    let server_cert = server_params.signed_by(&server_key, &issuer).unwrap();

    let files = [
        ("ca.pem", ca_cert.pem()),
        ("server-cert.pem", server_cert.pem()),
        ("server-key.pem", server_key.serialize_pem()),
    ];
    for (name, pem) in files {
        let path = dir.join(name);
        std::fs::write(&path, pem).unwrap();
        // The server may run as another user than the test (as root, it drops to `mysql`).
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
    }
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o755)).unwrap();
}

/// Held while a test sets a server's options in the environment and starts it.
static ENVIRONMENT: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

#[job(queue = "tls")]
async fn over_tls() {}

/// `url` (a database URL without options) with `options` appended.
fn with_options(url: &str, options: &str) -> String {
    format!("{url}?{options}")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_that_requires_tls_runs_jobs_over_verified_tls() {
    tests::init_tracing();
    let certs = tempfile::tempdir().unwrap();
    make_certificates(certs.path());
    let ca = certs.path().join("ca.pem");
    // The server reads its options from the environment: one test at a time sets them.
    let env = ENVIRONMENT.lock().await;
    std::env::set_var(
        "JOBQUEUE_TEST_SERVER_ARGS",
        format!(
            "--ssl-ca={} --ssl-cert={} --ssl-key={} --require-secure-transport=ON",
            ca.display(),
            certs.path().join("server-cert.pem").display(),
            certs.path().join("server-key.pem").display(),
        ),
    );
    let server = tokio::task::spawn_blocking(TestServer::start)
        .await
        .unwrap()
        .unwrap_or_else(|e| panic!("{e}"));
    std::env::remove_var("JOBQUEUE_TEST_SERVER_ARGS");
    drop(env);
    let database = server.create_database("tls").await.unwrap();

    let verified = with_options(
        &database,
        &format!("ssl-mode=VERIFY_CA&ssl-ca={}", ca.display()),
    );
    let queue = Queue::connect(&verified)
        .await
        .expect("connects with ssl-mode=VERIFY_CA");
    let cipher: (String, String) = sqlx::query_as("SHOW SESSION STATUS LIKE 'Ssl_cipher'")
        .fetch_one(queue.mysql_pool().unwrap())
        .await
        .unwrap();
    assert!(!cipher.1.is_empty(), "the session is encrypted: {cipher:?}");
    queue.migrate().await.unwrap();
    let id = queue.enqueue(OverTls {}).await.unwrap().id();
    let (handle, task) = start(quick_worker(&queue).queues(["tls"]).build().unwrap());
    wait_status(&queue, id, JobStatus::Done, Duration::from_secs(30)).await;
    stop(&handle, task).await;

    // The host is checked against the certificate too where asked for (127.0.0.1 is in it).
    let identity = with_options(
        &database,
        &format!("ssl-mode=VERIFY_IDENTITY&ssl-ca={}", ca.display()),
    );
    Queue::connect(&identity)
        .await
        .expect("connects with ssl-mode=VERIFY_IDENTITY");

    // Without TLS the server refuses, and the error says which URL option fixes it.
    let plain = with_options(&database, "ssl-mode=DISABLED");
    let e = Queue::connect(&plain).await.unwrap_err();
    assert!(matches!(e, Error::TlsRequired { .. }), "{e:?}");
    let message = e.to_string();
    assert!(message.contains("requires TLS"), "{message}");
    assert!(message.contains("ssl-mode=VERIFY_CA"), "{message}");
    assert!(message.contains("ssl-ca="), "{message}");

    // A CA that did not sign the server's certificate is refused.
    let other = tempfile::tempdir().unwrap();
    make_certificates(other.path());
    let wrong_ca = with_options(
        &database,
        &format!(
            "ssl-mode=VERIFY_CA&ssl-ca={}",
            other.path().join("ca.pem").display()
        ),
    );
    let message = Queue::connect(&wrong_ca).await.unwrap_err().to_string();
    assert!(message.contains("TLS connection"), "{message}");
    assert!(message.contains("`ssl-ca` must name the CA"), "{message}");
}

/// The uid and gid of `account`, from `id` (for files a server that drops to it must own).
fn ids_of(account: &str) -> Option<(u32, u32)> {
    let id = |flag: &str| -> Option<u32> {
        let out = std::process::Command::new("id")
            .args([flag, account])
            .output()
            .ok()?;
        String::from_utf8(out.stdout).ok()?.trim().parse().ok()
    };
    Some((id("-u")?, id("-g")?))
}

/// PostgreSQL with TLS only (`pg_hba.conf` with `hostssl` lines): a queue that connects with
/// `sslmode=verify-full` runs a job over TLS, one without TLS is refused with an error that
/// names the URL options to set, and a CA that did not sign the certificate is refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_postgres_server_that_requires_tls_runs_jobs_over_verified_tls() {
    tests::init_tracing();
    let certs = tempfile::tempdir().unwrap();
    make_certificates(certs.path());
    let ca = certs.path().join("ca.pem");
    let key = certs.path().join("server-key.pem");
    // PostgreSQL reads its key only if no one else may: 0600, owned by the account it runs
    // as (as root, it drops to `postgres`).
    std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o600)).unwrap();
    if std::process::Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|o| o.stdout.starts_with(b"0\n"))
    {
        let (uid, gid) = ids_of("postgres").or_else(|| ids_of("nobody")).unwrap();
        std::os::unix::fs::chown(&key, Some(uid), Some(gid)).unwrap();
    }
    let hba = certs.path().join("pg_hba.conf");
    std::fs::write(
        &hba,
        "local all all trust\nhostssl all all 127.0.0.1/32 trust\n",
    )
    .unwrap();
    std::fs::set_permissions(&hba, std::fs::Permissions::from_mode(0o644)).unwrap();
    // The server reads its options from the environment: one test at a time sets them.
    let env = ENVIRONMENT.lock().await;
    std::env::set_var(
        "JOBQUEUE_TEST_POSTGRES_ARGS",
        format!(
            "-c ssl=on -c ssl_cert_file={} -c ssl_key_file={} -c hba_file={}",
            certs.path().join("server-cert.pem").display(),
            key.display(),
            hba.display(),
        ),
    );
    let server = tokio::task::spawn_blocking(TestServer::start_postgres)
        .await
        .unwrap()
        .unwrap_or_else(|e| panic!("{e}"));
    std::env::remove_var("JOBQUEUE_TEST_POSTGRES_ARGS");
    drop(env);
    let database = server.create_database("pg_tls").await.unwrap();

    let verified = with_options(
        &database,
        &format!("sslmode=verify-full&sslrootcert={}", ca.display()),
    );
    let queue = Queue::connect(&verified)
        .await
        .expect("connects with sslmode=verify-full");
    let encrypted: bool =
        sqlx::query_scalar("SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()")
            .fetch_one(queue.postgres_pool().unwrap())
            .await
            .unwrap();
    assert!(encrypted, "the session is encrypted");
    queue.migrate().await.unwrap();
    let id = queue.enqueue(OverTls {}).await.unwrap().id();
    let (handle, task) = start(quick_worker(&queue).queues(["tls"]).build().unwrap());
    wait_status(&queue, id, JobStatus::Done, Duration::from_secs(30)).await;
    stop(&handle, task).await;

    // Without TLS the server refuses, and the error says which URL options fix it.
    let plain = with_options(&database, "sslmode=disable");
    let e = Queue::connect(&plain).await.unwrap_err();
    assert!(matches!(e, Error::TlsRequired { .. }), "{e:?}");
    let message = e.to_string();
    assert!(message.contains("requires TLS"), "{message}");
    assert!(
        message.contains("sslmode=verify-full&sslrootcert="),
        "{message}"
    );
    // The same refusal of a connection no TLS would help (no such database) is not put
    // down to TLS.
    let (server_part, _) = database.rsplit_once('/').unwrap();
    let missing = format!("{server_part}/no_such_database?sslmode=disable");
    let e = Queue::connect(&missing).await.unwrap_err();
    assert!(!matches!(e, Error::TlsRequired { .. }), "{e:?}");

    // A CA that did not sign the server's certificate is refused.
    let other = tempfile::tempdir().unwrap();
    make_certificates(other.path());
    let wrong_ca = with_options(
        &database,
        &format!(
            "sslmode=verify-full&sslrootcert={}",
            other.path().join("ca.pem").display()
        ),
    );
    let e = Queue::connect(&wrong_ca).await.unwrap_err();
    let message = e.to_string();
    assert!(matches!(e, Error::TlsFailed { .. }), "{e:?}");
    assert!(
        message.contains("`sslrootcert` must name the CA"),
        "{message}"
    );
    tokio::task::block_in_place(move || drop(server));
}
