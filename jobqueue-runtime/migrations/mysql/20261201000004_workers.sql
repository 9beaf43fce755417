-- What the dashboard and `jobqueue workers` show, and the indexes its job list needs.
--
-- job_queue_worker: one row per running worker, written by the worker itself every few
-- seconds (its heartbeat) and deleted when it stops. A row whose last_seen is old belongs to
-- a worker that died without stopping (killed, host lost); any worker deletes such rows after
-- an hour.
--   owner:       the worker's `lease_owner`, so its running jobs can be found by it.
--   queues:      the queues it claims from, comma-separated.
--   running:     jobs it was running at its last heartbeat.
CREATE TABLE job_queue_worker (
    owner       VARCHAR(128) NOT NULL,
    host        VARCHAR(255) NOT NULL,
    pid         INT UNSIGNED NOT NULL,
    version     VARCHAR(64) NOT NULL,
    queues      TEXT NOT NULL,
    concurrency INT UNSIGNED NOT NULL,
    running     INT UNSIGNED NOT NULL,
    started_at  DATETIME(6) NOT NULL,
    last_seen   DATETIME(6) NOT NULL,
    PRIMARY KEY (owner),
    KEY job_queue_worker_seen (last_seen)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;

-- The cron expression of each periodic kind, written by the workers that register the kind
-- (a stand-alone dashboard does not know the application's kinds), so the next tick can be
-- shown. NULL until such a worker has run.
ALTER TABLE job_queue_cron
    ADD COLUMN schedule VARCHAR(255) NULL;

-- The job list: newest first (ORDER BY id DESC) with keyset pagination (id < ?), filtered
-- by status, queue or kind. InnoDB ends every secondary index with the primary key, so each
-- of these is ordered by id within one value: a page reads only the rows it shows, with no
-- sort, however many million finished jobs the table holds.
ALTER TABLE job_queue
    ADD KEY job_queue_list_status (status, id),
    ADD KEY job_queue_list_queue (queue, id),
    ADD KEY job_queue_list_kind (kind, id);
