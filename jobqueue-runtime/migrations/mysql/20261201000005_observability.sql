-- The W3C trace context (`traceparent`) of the code that enqueued the job, so that the job's
-- span continues that trace (feature `opentelemetry`). NULL when the enqueue was not traced,
-- and for rows inserted by producers that do not trace. 55 characters in version 00; later
-- versions may append fields, hence the room.
ALTER TABLE job_queue ADD COLUMN traceparent VARCHAR(128) CHARACTER SET ascii NULL DEFAULT NULL;

-- The queue gauges: jobs per queue and status, and each queue's oldest ready job. Counting
-- them reads every active and failed row, so one worker of the fleet does it per interval
-- (the one whose UPDATE of `job_queue_gauge_refresh` moves `refreshed_at` forward) and
-- writes the result here; every worker publishes what this small table holds.
CREATE TABLE job_queue_gauges (
    queue          VARCHAR(64) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    status         ENUM('scheduled', 'ready', 'running', 'failed') NOT NULL,
    jobs           BIGINT UNSIGNED NOT NULL,
    -- For `ready`: the oldest ready job's `run_at`; its age is the queue's lag.
    oldest_run_at  DATETIME(6) NULL,
    PRIMARY KEY (queue, status)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;

-- One row: when the gauges were last counted.
CREATE TABLE job_queue_gauge_refresh (
    id            TINYINT UNSIGNED NOT NULL,
    refreshed_at  DATETIME(6) NOT NULL,
    PRIMARY KEY (id)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;
INSERT INTO job_queue_gauge_refresh (id, refreshed_at) VALUES (1, '2000-01-01 00:00:00');
