-- Defaults for every column but queue, kind, task_key and payload, so that a service in any
-- language can enqueue with one plain INSERT:
--
--   INSERT INTO job_queue (queue, kind, task_key, payload)
--   VALUES ('default', 'send_email', 'welcome:42', '{"user_id": 42}');
--
-- Such a row starts 'scheduled' at the server's current time; the next maintenance pass of
-- any worker (every second by default) promotes it to 'ready'. A status default cannot look
-- at run_at (an expression default may only read columns defined before it, and run_at
-- comes after status), and 'ready' would start a row given a future run_at at once.
-- max_attempts and lease_ms take the library's defaults (25 attempts, 30 s); a producer
-- that wants the kind's own values writes them.
--
-- Only defaults change: no row is rewritten, and both servers apply it without copying the
-- table (expression defaults need MySQL 8.0.13+ or MariaDB 10.2+).
ALTER TABLE job_queue
    MODIFY status ENUM('scheduled', 'ready', 'running', 'done', 'failed', 'cancelled') NOT NULL DEFAULT 'scheduled',
    MODIFY run_at DATETIME(6) NOT NULL DEFAULT (UTC_TIMESTAMP(6)),
    MODIFY max_attempts INT UNSIGNED NOT NULL DEFAULT 25,
    MODIFY lease_ms INT UNSIGNED NOT NULL DEFAULT 30000,
    MODIFY created_at DATETIME(6) NOT NULL DEFAULT (UTC_TIMESTAMP(6)),
    MODIFY updated_at DATETIME(6) NOT NULL DEFAULT (UTC_TIMESTAMP(6));
