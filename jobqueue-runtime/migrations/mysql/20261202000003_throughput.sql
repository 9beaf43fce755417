-- Finished jobs per minute and queue, kept as they finish instead of counted at every look.
--
-- The dashboard's throughput chart (`Queue::throughput`) counted every job finished in the
-- last hour at each refresh: on a busy table (500,000 jobs finished in the hour) that read
-- took over a second per viewer. Now the worker that counts the queue gauges (one of the
-- fleet per interval) also adds the jobs finished since its last count to these per-minute
-- rows, reading only those jobs (the `(status, status_at, id)` index from where the last
-- count stopped), and the chart reads at most 60 rows per queue plus the few jobs finished
-- since the last count.
--
-- job_queue_throughput_mark holds where the counts stop (`counted_to`): jobs that finished
-- before it are in job_queue_throughput. A count stops 15 s before the server's now, so that
-- an outcome whose transaction commits after its `finished_at` (a job's own transaction,
-- `complete_in`, may stay open for seconds) is still counted;
-- one that commits later than that is missed (the chart is approximate by that much).
-- Rows older than two hours are deleted by the same count.
--
-- Two new tables: no lock on `job_queue` or any other existing table, so the migration's
-- time does not depend on the size of the job table or on the writes going on (both
-- statements take milliseconds). The same on MySQL 8.0 and MariaDB 10.6+.
--
-- Rolling upgrade: workers of the previous release do not count; while only they hold the
-- gauge turn, the chart counts what they left uncounted itself at its next look (the jobs
-- finished since `counted_to`, at most an hour of them), as the chart of that release did.
CREATE TABLE job_queue_throughput (
    -- The minute the jobs finished in (seconds zero), by the server's clock.
    minute  DATETIME NOT NULL,
    queue   VARCHAR(64) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    done    BIGINT UNSIGNED NOT NULL,
    failed  BIGINT UNSIGNED NOT NULL,
    PRIMARY KEY (minute, queue)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;

CREATE TABLE job_queue_throughput_mark (
    id          TINYINT UNSIGNED NOT NULL,
    counted_to  DATETIME(6) NOT NULL,
    PRIMARY KEY (id)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;
INSERT INTO job_queue_throughput_mark (id, counted_to) VALUES (1, '2000-01-01 00:00:00');
