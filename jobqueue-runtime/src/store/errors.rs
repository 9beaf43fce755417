//! What the server's errors mean. The one place that reads MySQL/MariaDB error numbers: the
//! rest of the library, and its users, act on a [`DbErrorKind`], so that another database
//! is another table here, not a search through every caller.

use crate::error::Error;

// The server's error numbers, by their names in the MySQL and MariaDB manuals.

/// 1020 `ER_CHECKREAD`: MariaDB's "record has changed since last read", a snapshot conflict
/// under `innodb_snapshot_isolation`.
const ER_CHECKREAD: u16 = 1020;
/// 1044 `ER_DBACCESS_DENIED_ERROR`: the user may not use the database.
const ER_DBACCESS_DENIED_ERROR: u16 = 1044;
/// 1045 `ER_ACCESS_DENIED_ERROR`: the login was refused.
const ER_ACCESS_DENIED_ERROR: u16 = 1045;
/// 1046 `ER_NO_DB_ERROR`: no database selected.
const ER_NO_DB_ERROR: u16 = 1046;
/// 1048 `ER_BAD_NULL_ERROR`: NULL into a NOT NULL column.
const ER_BAD_NULL_ERROR: u16 = 1048;
/// 1049 `ER_BAD_DB_ERROR`: unknown database.
const ER_BAD_DB_ERROR: u16 = 1049;
/// 1054 `ER_BAD_FIELD_ERROR`: unknown column.
const ER_BAD_FIELD_ERROR: u16 = 1054;
/// 1062 `ER_DUP_ENTRY`: duplicate entry for a unique key.
const ER_DUP_ENTRY: u16 = 1062;
/// 1142 `ER_TABLEACCESS_DENIED_ERROR`: a command denied on a table.
const ER_TABLEACCESS_DENIED_ERROR: u16 = 1142;
/// 1143 `ER_COLUMNACCESS_DENIED_ERROR`: a command denied on a column.
const ER_COLUMNACCESS_DENIED_ERROR: u16 = 1143;
/// 1146 `ER_NO_SUCH_TABLE`: the table does not exist.
const ER_NO_SUCH_TABLE: u16 = 1146;
/// 1193 `ER_UNKNOWN_SYSTEM_VARIABLE`: unknown system variable.
const ER_UNKNOWN_SYSTEM_VARIABLE: u16 = 1193;
/// 1969 `ER_STATEMENT_TIMEOUT`: MariaDB's `max_statement_time` ran out.
const ER_STATEMENT_TIMEOUT: u16 = 1969;
/// 3024 `ER_QUERY_TIMEOUT`: MySQL's `MAX_EXECUTION_TIME` ran out.
const ER_QUERY_TIMEOUT: u16 = 3024;
/// 1205 `ER_LOCK_WAIT_TIMEOUT`: lock wait timeout exceeded.
const ER_LOCK_WAIT_TIMEOUT: u16 = 1205;
/// 1213 `ER_LOCK_DEADLOCK`: deadlock found when trying to get a lock.
const ER_LOCK_DEADLOCK: u16 = 1213;
/// 1227 `ER_SPECIFIC_ACCESS_DENIED_ERROR`: the statement needs a privilege such as SUPER.
const ER_SPECIFIC_ACCESS_DENIED_ERROR: u16 = 1227;
/// 1264 `ER_WARN_DATA_OUT_OF_RANGE`: a value out of its column's range.
const ER_WARN_DATA_OUT_OF_RANGE: u16 = 1264;
/// 1292 `ER_TRUNCATED_WRONG_VALUE`: a value of the wrong form (a date, a number).
const ER_TRUNCATED_WRONG_VALUE: u16 = 1292;
/// 1366 `ER_TRUNCATED_WRONG_VALUE_FOR_FIELD`: a value the column cannot hold.
const ER_TRUNCATED_WRONG_VALUE_FOR_FIELD: u16 = 1366;
/// 1406 `ER_DATA_TOO_LONG`: data too long for its column.
const ER_DATA_TOO_LONG: u16 = 1406;
/// 3140 `ER_INVALID_JSON_TEXT` (MySQL): invalid JSON text.
const ER_INVALID_JSON_TEXT: u16 = 3140;
/// 3141 `ER_INVALID_JSON_TEXT_IN_PARAM` (MySQL): invalid JSON text in an argument.
const ER_INVALID_JSON_TEXT_IN_PARAM: u16 = 3141;
/// 3159 `ER_SECURE_TRANSPORT_REQUIRED` (MySQL): the server requires TLS.
const ER_SECURE_TRANSPORT_REQUIRED: u16 = 3159;
/// 4025 `ER_CONSTRAINT_FAILED` (MariaDB): a CHECK constraint failed (the JSON columns'
/// `JSON_VALID` check among them).
const ER_CONSTRAINT_FAILED: u16 = 4025;

/// What a database server's error means to the queue: the classes of error the library (and
/// the `jobqueue` command) act on. [`Error::database_class`] tells which an error is.
///
/// Each class names the MySQL/MariaDB error numbers it stands for; on PostgreSQL the
/// SQLSTATEs are: `40P01` deadlock, `55P03` lock wait (`lock_timeout`), `40001` snapshot
/// (serialization) conflict, `23505` duplicate, `28P01`/`28000` login, `3D000` unknown
/// database, `42501` denied, `42P01` missing table, `42703` unknown column, `42704` unknown
/// setting, `23502`/`23514`/`22xxx` value refused, `57014` statement timeout. A server error of
/// no class here has none ([`Error::database_class`] returns `None`); its number is still
/// available from [`Error::server_code`] (MySQL) or [`Error::sqlstate`] (PostgreSQL). More
/// classes may be added.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum DbErrorKind {
    /// The transaction lost a deadlock and was rolled back (1213 `ER_LOCK_DEADLOCK`). Run it
    /// again; the queue's own transactions are retried.
    Deadlock,
    /// A lock wait ran past `innodb_lock_wait_timeout` (1205 `ER_LOCK_WAIT_TIMEOUT`). The
    /// server undid the statement only, unless `innodb_rollback_on_timeout` is on.
    LockWaitTimeout,
    /// MariaDB's `innodb_snapshot_isolation` refused to lock a row changed since the
    /// transaction's snapshot, and rolled the transaction back (1020 `ER_CHECKREAD`).
    SnapshotConflict,
    /// A unique key already holds the value (1062 `ER_DUP_ENTRY`).
    Duplicate,
    /// The server refused the login: a wrong user or password, a host the user may not
    /// connect from, or (MariaDB) a connection without TLS to a server that requires it
    /// (1045 `ER_ACCESS_DENIED_ERROR`).
    LoginDenied,
    /// The user may not use the database (1044 `ER_DBACCESS_DENIED_ERROR`).
    DatabaseDenied,
    /// The user lacks a right on a table (1142 `ER_TABLEACCESS_DENIED_ERROR`).
    TableDenied,
    /// The user lacks a right on a column (1143 `ER_COLUMNACCESS_DENIED_ERROR`).
    ColumnDenied,
    /// The statement needs a privilege the user lacks, such as SUPER
    /// (1227 `ER_SPECIFIC_ACCESS_DENIED_ERROR`).
    PrivilegeDenied,
    /// The database named in the URL does not exist (1049 `ER_BAD_DB_ERROR`).
    UnknownDatabase,
    /// The URL names no database (1046 `ER_NO_DB_ERROR`).
    NoDatabaseSelected,
    /// A table does not exist (1146 `ER_NO_SUCH_TABLE`): `migrate` was not run, or is older.
    MissingTable,
    /// A column does not exist (1054 `ER_BAD_FIELD_ERROR`): the tables are older than the
    /// library.
    UnknownColumn,
    /// A system variable the server does not have (1193 `ER_UNKNOWN_SYSTEM_VARIABLE`).
    UnknownVariable,
    /// The server requires TLS and the connection did not use it (MySQL's 3159
    /// `ER_SECURE_TRANSPORT_REQUIRED`; MariaDB answers [`DbErrorKind::LoginDenied`]).
    TlsRequired,
    /// The server refused a value: NULL into NOT NULL, a value out of range, of the wrong
    /// form or too long, invalid JSON (1048, 1264, 1292, 1366, 1406, MySQL's 3140 and 3141,
    /// MariaDB's 4025 for a failed CHECK).
    ValueRefused,
    /// A statement ran past its time limit and the server stopped it (MariaDB's 1969
    /// `ER_STATEMENT_TIMEOUT`, `max_statement_time`; MySQL's 3024 `ER_QUERY_TIMEOUT`,
    /// `MAX_EXECUTION_TIME`).
    StatementTimeout,
}

impl DbErrorKind {
    /// The class's name in snake case (`"deadlock"`, `"lock_wait_timeout"`...), as the
    /// `code` label of `jobqueue_conflict_retries_total` spells it.
    pub fn as_str(self) -> &'static str {
        use DbErrorKind::*;
        match self {
            Deadlock => "deadlock",
            LockWaitTimeout => "lock_wait_timeout",
            SnapshotConflict => "snapshot_conflict",
            Duplicate => "duplicate",
            LoginDenied => "login_denied",
            DatabaseDenied => "database_denied",
            TableDenied => "table_denied",
            ColumnDenied => "column_denied",
            PrivilegeDenied => "privilege_denied",
            UnknownDatabase => "unknown_database",
            NoDatabaseSelected => "no_database_selected",
            MissingTable => "missing_table",
            UnknownColumn => "unknown_column",
            UnknownVariable => "unknown_variable",
            TlsRequired => "tls_required",
            ValueRefused => "value_refused",
            StatementTimeout => "statement_timeout",
        }
    }

    /// Whether the error ended a transaction that may succeed if run again from its start:
    /// a deadlock, a lock wait timeout or a snapshot conflict. The queue retries its own
    /// transactions after these.
    pub fn is_conflict(self) -> bool {
        matches!(
            self,
            DbErrorKind::Deadlock | DbErrorKind::LockWaitTimeout | DbErrorKind::SnapshotConflict
        )
    }

    /// Whether the server refused for a want of rights: on the login, the database, a
    /// table, a column or a privilege.
    pub fn is_denied(self) -> bool {
        matches!(
            self,
            DbErrorKind::LoginDenied
                | DbErrorKind::DatabaseDenied
                | DbErrorKind::TableDenied
                | DbErrorKind::ColumnDenied
                | DbErrorKind::PrivilegeDenied
        )
    }
}

impl std::fmt::Display for DbErrorKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The class of a sqlx error: `None` when it is not a server error, or one of no class.
pub(crate) fn classify(e: &sqlx::Error) -> Option<DbErrorKind> {
    if let Some(state) = postgres_state(e) {
        return class_of_state(state);
    }
    class_of(server_code(e)?)
}

/// The SQLSTATE of a PostgreSQL server error.
pub(crate) fn postgres_state(e: &sqlx::Error) -> Option<&str> {
    match e {
        sqlx::Error::Database(db) => db
            .try_downcast_ref::<sqlx::postgres::PgDatabaseError>()
            .map(|e| e.code()),
        _ => None,
    }
}

/// The class of a PostgreSQL SQLSTATE (the codes of the manual's appendix "PostgreSQL Error
/// Codes").
fn class_of_state(state: &str) -> Option<DbErrorKind> {
    use DbErrorKind::*;
    Some(match state {
        // deadlock_detected
        "40P01" => Deadlock,
        // lock_not_available: a `lock_timeout` ran out.
        "55P03" => LockWaitTimeout,
        // serialization_failure: a transaction at REPEATABLE READ or SERIALIZABLE (a pool of
        // the application's may set them) could not be serialized.
        "40001" => SnapshotConflict,
        // unique_violation
        "23505" => Duplicate,
        // invalid_password, invalid_authorization_specification
        "28P01" | "28000" => LoginDenied,
        // invalid_catalog_name: the database does not exist.
        "3D000" => UnknownDatabase,
        // insufficient_privilege
        "42501" => TableDenied,
        // undefined_table
        "42P01" => MissingTable,
        // undefined_column
        "42703" => UnknownColumn,
        // undefined_object: among others, an unknown configuration parameter.
        "42704" => UnknownVariable,
        // not_null_violation, check_violation, numeric_value_out_of_range,
        // string_data_right_truncation, invalid_text_representation,
        // invalid_datetime_format, datetime_field_overflow, invalid_json_text,
        // untranslatable_character, character_not_in_repertoire
        "23502" | "23514" | "22003" | "22001" | "22P02" | "22007" | "22008" | "22P05" | "22021"
        | "22032" => ValueRefused,
        // query_canceled: `statement_timeout` ran out (or the statement was cancelled).
        "57014" => StatementTimeout,
        _ => return None,
    })
}

/// The class of a server error number.
fn class_of(code: u16) -> Option<DbErrorKind> {
    use DbErrorKind::*;
    Some(match code {
        ER_LOCK_DEADLOCK => Deadlock,
        ER_LOCK_WAIT_TIMEOUT => LockWaitTimeout,
        ER_CHECKREAD => SnapshotConflict,
        ER_DUP_ENTRY => Duplicate,
        ER_ACCESS_DENIED_ERROR => LoginDenied,
        ER_DBACCESS_DENIED_ERROR => DatabaseDenied,
        ER_TABLEACCESS_DENIED_ERROR => TableDenied,
        ER_COLUMNACCESS_DENIED_ERROR => ColumnDenied,
        ER_SPECIFIC_ACCESS_DENIED_ERROR => PrivilegeDenied,
        ER_BAD_DB_ERROR => UnknownDatabase,
        ER_NO_DB_ERROR => NoDatabaseSelected,
        ER_NO_SUCH_TABLE => MissingTable,
        ER_BAD_FIELD_ERROR => UnknownColumn,
        ER_UNKNOWN_SYSTEM_VARIABLE => UnknownVariable,
        ER_SECURE_TRANSPORT_REQUIRED => TlsRequired,
        ER_BAD_NULL_ERROR
        | ER_WARN_DATA_OUT_OF_RANGE
        | ER_TRUNCATED_WRONG_VALUE
        | ER_TRUNCATED_WRONG_VALUE_FOR_FIELD
        | ER_DATA_TOO_LONG
        | ER_INVALID_JSON_TEXT
        | ER_INVALID_JSON_TEXT_IN_PARAM
        | ER_CONSTRAINT_FAILED => ValueRefused,
        ER_STATEMENT_TIMEOUT | ER_QUERY_TIMEOUT => StatementTimeout,
        _ => return None,
    })
}

/// The server's error number behind a sqlx error, if it is a MySQL/MariaDB server error.
pub(crate) fn server_code(e: &sqlx::Error) -> Option<u16> {
    match e {
        sqlx::Error::Database(db) => db
            .try_downcast_ref::<sqlx::mysql::MySqlDatabaseError>()
            .map(|e| e.number()),
        _ => None,
    }
}

/// The conflict `e` is, if it is one: a transaction that failed with it may succeed if run
/// again from its start (see [`DbErrorKind::is_conflict`]).
pub(crate) fn conflict_of(e: &sqlx::Error) -> Option<DbErrorKind> {
    classify(e).filter(|c| c.is_conflict())
}

/// Whether `e` says the statement itself cannot be written, so that sending it again gives
/// the same error: a missing right, table or column, a value the server refuses, or a row
/// or value this code cannot read. Anything else (no reply, a lost or refused connection, a
/// conflict, a failover, a full disk, a statement killed) may pass, and is retried.
pub(crate) fn is_deterministic(e: &Error) -> bool {
    use DbErrorKind::*;
    match e {
        Error::Database(e @ sqlx::Error::Database(_)) => matches!(
            classify(e),
            Some(
                DatabaseDenied
                    | TableDenied
                    | ColumnDenied
                    | PrivilegeDenied
                    | MissingTable
                    | UnknownColumn
                    | ValueRefused
            )
        ),
        Error::Database(
            sqlx::Error::ColumnDecode { .. }
            | sqlx::Error::Decode(_)
            | sqlx::Error::ColumnNotFound(_)
            | sqlx::Error::ColumnIndexOutOfBounds { .. }
            | sqlx::Error::TypeNotFound { .. },
        ) => true,
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_class_has_its_own_label() {
        let classes: Vec<DbErrorKind> = (0..=u16::MAX).filter_map(class_of).collect();
        let mut labels: Vec<&str> = classes.iter().map(|c| c.as_str()).collect();
        labels.sort_unstable();
        labels.dedup();
        // ValueRefused stands for eight numbers, StatementTimeout for two (MariaDB's and
        // MySQL's), every other class for one.
        assert_eq!(classes.len(), labels.len() + 7 + 1);
        assert_eq!(labels.len(), 17);
    }

    #[test]
    fn conflicts_are_the_three_retried_classes() {
        let conflicts: Vec<u16> = (0..=u16::MAX)
            .filter(|&n| class_of(n).is_some_and(DbErrorKind::is_conflict))
            .collect();
        assert_eq!(
            conflicts,
            [ER_CHECKREAD, ER_LOCK_WAIT_TIMEOUT, ER_LOCK_DEADLOCK]
        );
    }
}
