-- The maintenance turn: a lease row that says which worker runs maintenance passes now
-- (promotion, reclaim, the limits sweep, pruning, the gauges). Before it every worker ran a
-- pass every interval, so a fleet of N idle workers sent N times the statements of one.
-- Now the holder renews the turn at each pass (`expires_at` = now + 5 maintenance
-- intervals) and passes; the other workers try to take it, at a pace that falls as the fleet
-- grows (together about one try per maintenance interval), and take it only when it has
-- expired or been released (`holder` NULL). There is no leader to lose: a holder that dies
-- or freezes simply stops renewing, and the turn passes on within the bound the operations
-- guide gives. `jobqueue workers` and `SELECT * FROM job_queue_turn` show the holder.
--
-- A new table with one row: nothing to rebuild, no lock on `job_queue` or any other
-- existing table, so its time does not depend on the size of the job table or on the
-- writes going on (measured: 19 ms for both statements, client included, on MariaDB 10.11;
-- not measured beside a table of 1,000,000 rows, which no statement here reads or locks).
-- The same on MySQL 8.0 and MariaDB 10.6+.
--
-- Rolling upgrade: a worker of the previous release ignores this table. It goes on
-- maintaining on its own clock, once per interval, beside the holder, as every worker did
-- before (safe: every pass locks its rows with SKIP LOCKED), and it keeps probing for
-- ready jobs on its own clock too. The fleet's savings come as the old workers are replaced.
CREATE TABLE job_queue_turn (
    name        VARCHAR(32) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    -- The owner name of the worker holding the turn (as in `job_queue_worker`); NULL when
    -- released.
    holder      VARCHAR(128) NULL,
    -- When it was taken by its holder, and until when it is theirs unless renewed.
    taken_at    DATETIME(6) NOT NULL,
    expires_at  DATETIME(6) NOT NULL,
    PRIMARY KEY (name)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;
INSERT INTO job_queue_turn (name, holder, taken_at, expires_at)
VALUES ('maintenance', NULL, '2000-01-01 00:00:00', '2000-01-01 00:00:00');
