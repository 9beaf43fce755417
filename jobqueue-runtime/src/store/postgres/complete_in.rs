//! A job completed inside a transaction of its own, on PostgreSQL.

use sqlx::postgres::PgConnection;

use crate::error::{Error, Result};

/// See the MySQL `complete_in`: `None` when the row was completed, else why not.
pub(crate) async fn complete_in(
    _conn: &mut PgConnection,
    _id: u64,
    _owner: &str,
    _attempt: u32,
    _holds_slot: bool,
) -> Result<Option<String>> {
    Err(Error::Unsupported {
        backend: crate::Backend::Postgres,
    })
}
