-- The queue gauges count `blocked` jobs (waiting for a slot of their concurrency or rate
-- limit) too. `job_queue_gauges` holds one row per queue and status, rewritten by one worker
-- every few seconds: a small table, so changing its ENUM is cheap on any server. 'blocked'
-- goes at the end of the ENUM, so the existing values keep their numbers. The same on MySQL
-- 8.0 and MariaDB 10.6+.
ALTER TABLE job_queue_gauges
    MODIFY status ENUM('scheduled', 'ready', 'running', 'failed', 'blocked') NOT NULL;
