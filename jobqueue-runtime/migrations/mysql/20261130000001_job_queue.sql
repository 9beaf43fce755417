-- The job table. One row per job, from enqueue until it is pruned.
--
-- status:       scheduled (waits for run_at) | ready (claimable now) | running (leased)
--               | done | failed | cancelled
-- attempts:     claims so far. It only ever grows (an operator retry raises max_attempts
--               instead of resetting it), so (id, lease_owner, attempts) names one claim and
--               fences every write made after it.
-- lease_ms:     the kind's lease, stored per job so that claims, renewals and reclaims use it
--               without knowing the kind.
-- Times are UTC_TIMESTAMP(6) of the server, never an application clock.
CREATE TABLE job_queue (
    id               BIGINT UNSIGNED NOT NULL AUTO_INCREMENT,
    queue            VARCHAR(64) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    kind             VARCHAR(128) NOT NULL,
    -- Bytes, not text: keys compare byte for byte, trailing spaces and case included
    -- (a text collation would pad, and call "x " a duplicate of "x"). At most 255
    -- characters of UTF-8.
    task_key         VARBINARY(1020) NOT NULL,
    payload          JSON NOT NULL,
    status           ENUM('scheduled', 'ready', 'running', 'done', 'failed', 'cancelled') NOT NULL,
    priority         SMALLINT NOT NULL DEFAULT 0,
    run_at           DATETIME(6) NOT NULL,
    attempts         INT UNSIGNED NOT NULL DEFAULT 0,
    max_attempts     INT UNSIGNED NOT NULL,
    lease_ms         INT UNSIGNED NOT NULL,
    lease_owner      VARCHAR(128) NULL,
    lease_until      DATETIME(6) NULL,
    cancel_requested TINYINT(1) NOT NULL DEFAULT 0,
    last_error       TEXT NULL,
    created_at       DATETIME(6) NOT NULL,
    updated_at       DATETIME(6) NOT NULL,
    finished_at      DATETIME(6) NULL,
    PRIMARY KEY (id),
    -- The idempotency key: a second enqueue of a key is a duplicate while the row exists.
    UNIQUE KEY job_queue_task_key (task_key),
    -- Claim: WHERE queue = ? AND status = 'ready' ORDER BY priority, id.
    KEY job_queue_claim (queue, status, priority, id),
    -- Promote due jobs: WHERE status = 'scheduled' AND run_at <= now ORDER BY run_at, id.
    KEY job_queue_due (status, run_at, id),
    -- Reclaim expired leases: WHERE status = 'running' AND lease_until < now.
    KEY job_queue_lease (status, lease_until, id),
    -- Prune: WHERE status = 'done' AND finished_at < cutoff.
    KEY job_queue_finished (status, finished_at, id)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;

-- Queues an operator has paused: no worker claims from them until they are resumed.
CREATE TABLE job_queue_pause (
    queue     VARCHAR(64) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    paused_at DATETIME(6) NOT NULL,
    PRIMARY KEY (queue)
) ENGINE = InnoDB;
