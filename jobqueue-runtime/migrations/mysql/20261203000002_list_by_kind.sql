-- Listings of a kind with a status, and of a queue with a kind, through an index of their
-- own.
--
-- job_queue_kind_status_at (kind, status, status_at, id) serves the dashboard's jobs page
-- and `jobqueue list` filtered by a status and a kind ("the failed jobs of kind
-- send_email"), in the listing's order (by the time in the status, as
-- job_queue_queue_status_at does for a status and a queue). Without it such a listing read
-- every job of the status and tested the kind row by row: a million done jobs for a kind
-- that has none, stopped by the listing's one-second limit.
--
-- job_queue_list_queue_kind (queue, kind, id) serves a queue and a kind without a status,
-- newest first, as job_queue_list_queue (queue, id) serves a queue alone.
--
-- What they cost the writers: an insert writes two secondary entries more (eight instead
-- of six); a status change rewrites one more (job_queue_kind_status_at holds the status,
-- as the claim index, job_queue_status_at and job_queue_queue_status_at do: four entries
-- instead of three). job_queue_list_queue_kind holds no status and no time, so the claim,
-- the completion, promotion and reclaim never rewrite it; pruning deletes its entry with
-- the row.
--
-- On a large table: online on MariaDB 10.6+ and MySQL 8.0 (reads and writes go on;
-- ALGORITHM and LOCK are named, so a server that could not do it online refuses instead of
-- locking the table); the build reads the table once. Measured on MariaDB 10.11 with
-- 1,100,000 rows while single-row inserts went on (one client per insert, on a loaded 2-core
-- machine): 6.2 s; the 263 inserts meanwhile took 31 ms at the median (32 ms without the
-- build) and 208 ms at the slowest (the deployment guide's rolling-upgrade notes).
--
-- Rolling upgrades: no statement of an earlier release names either index, so workers,
-- dashboards and the command of the previous release keep working once this file has run;
-- this release's dashboard and `jobqueue list` force them, so migrate before upgrading
-- those.
ALTER TABLE job_queue
    ADD KEY job_queue_kind_status_at (kind, status, status_at, id),
    ADD KEY job_queue_list_queue_kind (queue, kind, id),
    ALGORITHM = INPLACE, LOCK = NONE;
