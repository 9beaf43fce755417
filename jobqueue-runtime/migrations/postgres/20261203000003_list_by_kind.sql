-- Listings of a kind with a status, and of a queue with a kind, through an index of their
-- own: the PostgreSQL twin of the MySQL migration of the same name (which says what each
-- serves and costs). On a large table, create them by hand first with
-- `CREATE INDEX CONCURRENTLY` (which cannot run inside the migration's transaction); the
-- `IF NOT EXISTS` here then finds them made.
CREATE INDEX IF NOT EXISTS job_queue_kind_status_at ON job_queue (kind, status, status_at, id);
CREATE INDEX IF NOT EXISTS job_queue_list_queue_kind ON job_queue (queue, kind, id);
