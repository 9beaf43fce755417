-- Per-kind figures over the last day, and a pause for periodic schedules.
--
-- job_queue_kind_stats: the jobs that finished `done` or `failed` per 5-minute bucket, queue
-- and kind, with their runtimes and waits, for the dashboard's kinds page
-- (`Queue::kind_stats`). It is filled by the same count that keeps the throughput
-- (`job_queue_throughput`, migration 20261202000003): the worker holding the gauge turn reads
-- the jobs finished since `job_queue_throughput_mark.counted_to` once, over the
-- `(status, status_at, id)` index, and adds them to both tables in one transaction, so a
-- job is counted once in each. The same count deletes buckets older than 48 hours.
--
--   done, failed:    jobs that ended so.
--   retries:         their attempts beyond the first (retries after an error, lost leases,
--                    an operator's retry).
--   timed:           those of them with a claim time (`claimed_at`; jobs finished by
--                    workers older than the attempt history have none), over which the
--                    sums and the histogram are taken.
--   run_us, wait_us: the sums of their runtimes (`finished_at - claimed_at`, the last
--                    attempt) and waits (`claimed_at - run_at`: from due to claimed), in
--                    microseconds; negative differences (clocks) count as zero.
--   h00..h11:        runtimes per bucket: under 10 ms, 30 ms, 100 ms, 300 ms, 1 s, 3 s,
--                    10 s, 30 s, 100 s, 300 s, 1000 s, and 1000 s or more. The dashboard
--                    estimates the median and the 95th percentile from them.
--
-- job_queue_cron.paused_at: when an operator paused the kind's schedule (NULL: it runs).
-- A paused schedule enqueues no ticks: each pass sees `paused_at` with the row locked and
-- leaves the row as it is, and a resume moves `last_tick` to the time of the resume, so the
-- ticks missed while paused are never enqueued, not even the latest.
--
-- A new table and a nullable column at the end of a small table: neither locks
-- `job_queue`. The ADD COLUMN is instant on MariaDB 10.3+ and on MySQL 8.0.12+ (both pick
-- INSTANT for a nullable column added last without a default; `ALGORITHM` is left out so
-- that an older MySQL 8.0 falls back to INPLACE rather than refuse). `INTERVAL()`,
-- `DELETE ... LIMIT` and `ON DUPLICATE KEY UPDATE ... VALUES(col)`, which the count uses,
-- behave the same on both; MySQL 8.0.20+ only warns that `VALUES(col)` is deprecated
-- there (MariaDB has no row alias to replace it with).
--
-- Rolling upgrade: workers of the previous release do not fill the new table (the kinds
-- page stays empty while only they hold the gauge turn) and do not read `paused_at` (their
-- passes enqueue a paused kind's ticks: pause schedules once every worker runs this
-- release).
CREATE TABLE job_queue_kind_stats (
    -- The start of the 5-minute bucket the jobs finished in (by the server's clock).
    bucket   DATETIME NOT NULL,
    queue    VARCHAR(64) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    kind     VARCHAR(128) NOT NULL,
    done     BIGINT UNSIGNED NOT NULL,
    failed   BIGINT UNSIGNED NOT NULL,
    retries  BIGINT UNSIGNED NOT NULL,
    timed    BIGINT UNSIGNED NOT NULL,
    run_us   BIGINT UNSIGNED NOT NULL,
    wait_us  BIGINT UNSIGNED NOT NULL,
    h00 BIGINT UNSIGNED NOT NULL, h01 BIGINT UNSIGNED NOT NULL, h02 BIGINT UNSIGNED NOT NULL,
    h03 BIGINT UNSIGNED NOT NULL, h04 BIGINT UNSIGNED NOT NULL, h05 BIGINT UNSIGNED NOT NULL,
    h06 BIGINT UNSIGNED NOT NULL, h07 BIGINT UNSIGNED NOT NULL, h08 BIGINT UNSIGNED NOT NULL,
    h09 BIGINT UNSIGNED NOT NULL, h10 BIGINT UNSIGNED NOT NULL, h11 BIGINT UNSIGNED NOT NULL,
    -- The page reads a range of buckets; the count deletes the oldest ones.
    PRIMARY KEY (bucket, queue, kind)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;

ALTER TABLE job_queue_cron
    ADD COLUMN paused_at DATETIME(6) NULL;
