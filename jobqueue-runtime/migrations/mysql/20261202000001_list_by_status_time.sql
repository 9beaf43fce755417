-- Listings of one status page through the status's time, not the id.
--
-- A status listing (the dashboard's jobs page, `jobqueue list --status`) now reads
-- job_queue_status_at (status, status_at, id) with a (status_at, id) cursor: finished jobs
-- newest first, waiting ones next to run first, running ones by lease expiry. Its own
-- index, job_queue_list_status (status, id), is dropped: it was rewritten at every status
-- change and served nothing else.
--
-- A status and a queue together go through job_queue_queue_status_at (queue, status,
-- status_at, id), in the same order: without it such a listing read every job of the
-- status, testing the queue row by row (a million done rows for a queue that has none).
-- It is rewritten at every status change too, as the dropped index was: a status change
-- writes as many secondary entries as before this file.
--
-- On a large table: both are online on MariaDB 10.6+ and MySQL 8.0 (reads and writes go
-- on; ALGORITHM and LOCK are named, so a server that could not do it online refuses
-- instead of locking the table). The drop is a metadata change; the build reads the table
-- once. Measured on MariaDB 10.11 with 1,000,000 rows while single-row inserts went on
-- (one client per insert, on a loaded 2-core machine): 2.4 s; the 510 inserts meanwhile
-- took 11 ms at the median and 59 ms at the slowest (the metadata lock that ends the
-- build).
--
-- Rolling upgrades: workers never name either index. A dashboard or `jobqueue list` of
-- the previous release forces job_queue_list_status on a listing with a status: once this
-- file has run, that listing fails (error 1176, key does not exist) until it is upgraded;
-- listings without a status, the overview and every action keep working. This release
-- forces job_queue_queue_status_at, so upgrade the dashboards and the command right after
-- migrating, not before.
ALTER TABLE job_queue
    ADD KEY job_queue_queue_status_at (queue, status, status_at, id),
    DROP KEY job_queue_list_status,
    ALGORITHM = INPLACE, LOCK = NONE;
