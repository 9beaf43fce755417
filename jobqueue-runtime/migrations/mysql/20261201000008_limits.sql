-- Concurrency and rate limits by key, shared by every worker.
--
-- Each limited job carries its limits, as it carries its lease, so that claims, outcomes and
-- maintenance apply them without knowing the kind:
--   concurrency_key, concurrency_limit: at most `concurrency_limit` jobs of this key run at
--                  once (NULL, 0: no concurrency limit).
--   rate_key, rate_limit, rate_window_ms: at most `rate_limit` jobs of this key start in any
--                  window of `rate_window_ms` (NULL, 0, 0: no rate limit).
-- The columns go at the end with constant defaults, and 'blocked' at the end of the status
-- ENUM (same storage size): both servers apply this without rebuilding the table (instant on
-- MariaDB 10.3+ and MySQL 8.0.12+; an ENUM extended at its end is a metadata change).
--
-- status 'blocked': a ready job that a claim found at its key's limit. It leaves the claim
-- index's 'ready' range, so it does not hold up the jobs behind it, and waits in
-- job_queue_blocked until a slot of its key frees.
ALTER TABLE job_queue
    MODIFY status ENUM('scheduled', 'ready', 'running', 'done', 'failed', 'cancelled', 'blocked') NOT NULL DEFAULT 'scheduled',
    ADD COLUMN concurrency_key VARBINARY(1020) NULL DEFAULT NULL,
    ADD COLUMN concurrency_limit INT UNSIGNED NOT NULL DEFAULT 0,
    ADD COLUMN rate_key VARBINARY(1020) NULL DEFAULT NULL,
    ADD COLUMN rate_limit INT UNSIGNED NOT NULL DEFAULT 0,
    ADD COLUMN rate_window_ms INT UNSIGNED NOT NULL DEFAULT 0;

-- The slots of each limited key, created by the first claim that needs them: slot_no
-- 0..limit-1 of `c:<key>` for a concurrency key, of `r:<key>` for a rate key.
--   job_id, attempt: the claim holding a concurrency slot, NULL when free. Released with
--                  `WHERE job_id = ? AND attempt = ?` in the transaction that ends the claim,
--                  so a worker that lost its lease matches nothing and frees nothing twice.
--   free_at:       for a rate slot, when it may start another job: a start takes a slot whose
--                  free_at has passed and sets it to now + the window.
-- A claim takes a slot with FOR UPDATE SKIP LOCKED: N rows per key, so no single hot row,
-- and no claim waits for another.
CREATE TABLE job_queue_slot (
    slot_key  VARBINARY(1024) NOT NULL,
    slot_no   INT UNSIGNED NOT NULL,
    job_id    BIGINT UNSIGNED NULL,
    attempt   INT UNSIGNED NULL,
    free_at   DATETIME(6) NOT NULL DEFAULT '2000-01-01 00:00:00',
    PRIMARY KEY (slot_key, slot_no),
    -- Release by claim: WHERE job_id IN (...).
    KEY job_queue_slot_holder (job_id)
) ENGINE = InnoDB;

-- The blocked jobs of each key (the `slot_key` of the limit they wait for), in claim order.
-- A freed slot wakes the first of its key (back to 'ready'); maintenance wakes any left over.
CREATE TABLE job_queue_blocked (
    slot_key  VARBINARY(1024) NOT NULL,
    priority  SMALLINT NOT NULL,
    job_id    BIGINT UNSIGNED NOT NULL,
    PRIMARY KEY (slot_key, priority, job_id),
    KEY job_queue_blocked_job (job_id)
) ENGINE = InnoDB;
