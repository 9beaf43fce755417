-- One row per periodic (cron) kind: the latest tick the schedulers have dealt with, whether
-- they enqueued it or skipped it. A tick is enqueued only by the transaction that moves
-- `last_tick` past it, with this row locked, so each tick is enqueued at most once however
-- many nodes run the schedule, however often they restart, and whatever was pruned from
-- `job_queue` since. A kind without a row starts at the time its row is created: it gets
-- no tick from before that (deleting the row starts the kind afresh the same way).
--
-- last_job_id:  the job of the latest tick enqueued. A kind that does not allow overlap
--               enqueues no new tick while that job is still scheduled, ready or running.
CREATE TABLE job_queue_cron (
    kind        VARCHAR(128) NOT NULL,
    last_tick   DATETIME(6) NOT NULL,
    last_job_id BIGINT UNSIGNED NULL,
    updated_at  DATETIME(6) NOT NULL,
    PRIMARY KEY (kind)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;
