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
