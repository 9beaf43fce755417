//! Leases: renewal of every lease a worker holds, and the check of which it still holds.

use sqlx::Row;

use super::*;
use crate::model::LeaseState;

impl Store {
    /// Extends the leases of `ids` held by `owner`: one short transaction of a locking read
    /// and an update for all of them (per 128).
    /// Jobs with a pending cancel request are left out unless `with_cancel_requested`, so that
    /// a short count tells the caller to look. Rows that another session has locked are
    /// skipped, not waited for: they are not renewed this time. Returns the rows renewed.
    pub async fn renew(
        &self,
        owner: &str,
        ids: &[u64],
        with_cancel_requested: bool,
    ) -> Result<u64> {
        Ok(self
            .renew_ids(owner, ids, with_cancel_requested)
            .await?
            .len() as u64)
    }

    /// [`Store::renew`], returning which of `ids` were renewed, each with how much of its
    /// lease the server saw left just before (microseconds, by the server's clock).
    pub(crate) async fn renew_ids(
        &self,
        owner: &str,
        ids: &[u64],
        with_cancel_requested: bool,
    ) -> Result<Vec<(u64, i64)>> {
        on_postgres!(self, lease::renew_ids(owner, ids, with_cancel_requested));
        let cancel = if with_cancel_requested {
            ""
        } else {
            " AND cancel_requested = 0"
        };
        let mut renewed = Vec::with_capacity(ids.len());
        for chunk in ids.chunks(128) {
            // A locking read that skips rows other sessions hold, so that one locked job
            // cannot make the renewal of every other wait for it, then the update of exactly
            // the rows it locked, in one transaction: a row the read returned cannot change
            // before the update (the worker's own completions wait for it), so every row
            // counted is a row extended, and a row finished meanwhile is simply not returned.
            // (Two autocommit statements let a completion land between them, and the chunk's
            // short count then hid which rows were renewed.) Both statements go by primary
            // key: a scan of a secondary index would lock (or wait for) other running jobs'
            // rows too. A try cut off by the call timeout closes its connection, which ends
            // the transaction and its locks.
            let select = format!(
                "SELECT id, COALESCE(TIMESTAMPDIFF(MICROSECOND, UTC_TIMESTAMP(6), lease_until), 0) \
                 FROM job_queue FORCE INDEX (PRIMARY) WHERE id IN ({}) \
                 AND status = 'running' AND lease_owner = ?{cancel} FOR UPDATE SKIP LOCKED",
                placeholders(padded_len(chunk.len()))
            );
            let free: Vec<(u64, i64)> = transaction!(self, |conn| {
                let mut q = sqlx::query_as(&select);
                for id in padded(chunk) {
                    q = q.bind(id);
                }
                let free: Vec<(u64, i64)> = q.bind(owner).fetch_all(&mut *conn).await?;
                if free.is_empty() {
                    return Ok((free, false));
                }
                let update = format!(
                    "UPDATE job_queue FORCE INDEX (PRIMARY) \
                     SET lease_until = UTC_TIMESTAMP(6) + INTERVAL lease_ms * 1000 MICROSECOND \
                     WHERE id IN ({})",
                    placeholders(padded_len(free.len()))
                );
                let mut q = sqlx::query(&update);
                for (id, _) in padded(&free) {
                    q = q.bind(id);
                }
                let matched = q.execute(&mut *conn).await?.rows_affected();
                // The rows are locked by this transaction since the read: nothing else can
                // have changed them.
                debug_assert_eq!(matched, free.len() as u64);
                Ok((free, true))
            })?;
            renewed.extend(free);
        }
        Ok(renewed)
    }

    /// Whether `owner` still holds each claim in `claims` (id, attempt), and whether its
    /// cancel was requested.
    pub async fn lease_states(
        &self,
        owner: &str,
        claims: &[(u64, u32)],
    ) -> Result<Vec<LeaseState>> {
        on_postgres!(self, lease::lease_states(owner, claims));
        let mut out = Vec::with_capacity(claims.len());
        for chunk in claims.chunks(128) {
            let sql = format!(
                "SELECT id, attempts, status = 'running' AND lease_owner <=> ?, cancel_requested \
                 FROM job_queue WHERE id IN ({})",
                placeholders(chunk.len())
            );
            let mut q = sqlx::query(&sql).persistent(false).bind(owner);
            for (id, _) in chunk {
                q = q.bind(*id);
            }
            let rows = on_connection!(self, |conn| q.fetch_all(&mut *conn)).await?;
            for &(id, attempt) in chunk {
                let row = rows.iter().find(|r| r.get::<u64, _>(0) == id);
                out.push(match row {
                    Some(r) => LeaseState {
                        id,
                        held: r.get::<u32, _>(1) == attempt && r.get::<bool, _>(2),
                        cancel_requested: r.get::<bool, _>(3),
                    },
                    None => LeaseState {
                        id,
                        held: false,
                        cancel_requested: false,
                    },
                });
            }
        }
        Ok(out)
    }
}
