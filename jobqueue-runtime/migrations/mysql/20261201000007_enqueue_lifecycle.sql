-- What an enqueue may say about a job beyond its arguments, and what a running job reports.
--
-- unique_policy: how long the job's task key blocks another enqueue of that key.
--                'until_pruned' (the default, as before): while the row exists.
--                'while_active': while the job is scheduled, ready or running.
--                'for_period':   until unique_until.
--                The UNIQUE KEY on task_key is unchanged and still decides every enqueue:
--                a later enqueue that meets a holder whose policy no longer blocks moves
--                the holder's key to released_key, gives the holder a key that cannot
--                collide (its key's first 240 characters, a 0x00 byte and its id as 20
--                digits: byte order is id order, and a valid key has no control
--                characters), and inserts again. The holder's row stays, as history.
-- unique_until:  for 'for_period', when the key stops blocking (enqueue time plus the
--                period, server clock). NULL otherwise.
-- released_key:  the task key of a job that gave it up to a newer job; NULL while it holds
--                it. Old jobs of a key are found through the task_key index, by the range
--                of their prefix, and this column confirms the match.
-- metadata:      a small JSON object set at enqueue (tags, tenant...), at most 4 KiB.
-- progress:      the latest JSON value a running job reported with `set_progress`, at
--                most 4 KiB; progress_at: when it was written (server clock).
--
-- Every column is added at the end with a constant default: an instant change on MariaDB
-- 10.3+ and MySQL 8.0.12+, whatever the table holds; no row is rewritten and no index is
-- built. A worker of an older release ignores these columns: its enqueues take the
-- defaults (unique until pruned, no metadata), and when it finishes a job enqueued with
-- 'while_active' the key is still released, since the release is decided at the next
-- enqueue of the key from the holder's status, not when the job finishes.
ALTER TABLE job_queue
    ADD COLUMN unique_policy ENUM('until_pruned', 'while_active', 'for_period') NOT NULL DEFAULT 'until_pruned',
    ADD COLUMN unique_until DATETIME(6) NULL DEFAULT NULL,
    ADD COLUMN released_key VARBINARY(1020) NULL DEFAULT NULL,
    ADD COLUMN metadata JSON NULL DEFAULT NULL,
    ADD COLUMN progress JSON NULL DEFAULT NULL,
    ADD COLUMN progress_at DATETIME(6) NULL DEFAULT NULL;
