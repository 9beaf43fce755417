//! `jobqueue migrate --print-sql`: the schema for teams that apply DDL with their own tool,
//! printed without a database.

use std::process::Command;

#[test]
fn print_sql_needs_no_database_and_prints_the_schema_with_its_history() {
    let output = Command::new(env!("CARGO_BIN_EXE_jobqueue"))
        .args(["migrate", "--print-sql"])
        .env_remove("DATABASE_URL")
        .output()
        .expect("run jobqueue");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{stderr}");
    let sql = String::from_utf8(output.stdout).unwrap();
    assert_eq!(sql, jobqueue::Queue::migration_sql());
    let history = sql
        .find("CREATE TABLE IF NOT EXISTS job_queue_migrations")
        .expect("the history table");
    let table = sql.find("CREATE TABLE job_queue (").expect("the job table");
    let recorded = sql
        .find("INSERT INTO job_queue_migrations (version, description, checksum) VALUES (20261130000001,")
        .expect("the first version's record");
    assert!(history < table && table < recorded, "{sql}");
}

fn print_sql(args: &[&str], database_url: Option<&str>) -> String {
    let mut command = Command::new(env!("CARGO_BIN_EXE_jobqueue"));
    command.args(args).env_remove("DATABASE_URL");
    if let Some(url) = database_url {
        command.env("DATABASE_URL", url);
    }
    let output = command.output().expect("run jobqueue");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{args:?}: {stderr}");
    String::from_utf8(output.stdout).unwrap()
}

/// `--backend postgres` prints PostgreSQL's schema, the ready-notification triggers
/// included; a postgres:// URL does the same without the flag (nothing connects to it), and
/// the flag wins over the URL.
#[test]
fn print_sql_prints_the_schema_of_the_backend_or_of_the_url() {
    let postgres = jobqueue::Queue::migration_sql_for(jobqueue::Backend::Postgres);
    assert_ne!(postgres, jobqueue::Queue::migration_sql());
    assert!(
        postgres.contains("CREATE TRIGGER job_queue_ready_insert"),
        "{postgres}"
    );
    assert!(postgres.contains("VALUES (20261203000002,"), "{postgres}");
    for backend in ["postgres", "postgresql"] {
        assert_eq!(
            print_sql(&["migrate", "--print-sql", "--backend", backend], None),
            postgres
        );
    }
    // Nothing listens there: the URL only names the database.
    let url = "postgres://app:pw@127.0.0.1:1/shop";
    assert_eq!(print_sql(&["migrate", "--print-sql"], Some(url)), postgres);
    assert_eq!(
        print_sql(&["migrate", "--print-sql", "--backend", "mysql"], Some(url)),
        jobqueue::Queue::migration_sql()
    );
    assert_eq!(
        print_sql(
            &["migrate", "--print-sql"],
            Some("mysql://app:pw@127.0.0.1:1/shop")
        ),
        jobqueue::Queue::migration_sql()
    );
    // The flag needs --print-sql.
    let output = Command::new(env!("CARGO_BIN_EXE_jobqueue"))
        .args(["migrate", "--backend", "postgres"])
        .env_remove("DATABASE_URL")
        .output()
        .expect("run jobqueue");
    assert_eq!(output.status.code(), Some(2));
}
