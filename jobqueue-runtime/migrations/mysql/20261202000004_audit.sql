-- Who did what from the dashboard: one row per action (retry, cancel, pause, resume, purge,
-- a bulk action), plus one row per job the action changed when it knows the ids (up to a
-- cap), so that a job's page can show its own history of operator actions.
--
-- `actor` is who the dashboard authenticated (a user name, `token`, `upstream` when the
-- application authenticates in front of it, or `loopback`); `action` a short verb; `job_id`
-- and `queue` what it touched, when it is one job or one queue; `detail` the filter and the
-- count of a bulk action or a purge, in words.
--
-- Rows are deleted by the workers' pruning once older than the longest retention of
-- finished jobs (30 days by default), through the `at` index.
--
-- A new table: no lock on any existing table; the same on MySQL 8.0 and MariaDB 10.6+.
CREATE TABLE job_queue_audit (
    id      BIGINT UNSIGNED NOT NULL AUTO_INCREMENT,
    at      DATETIME(6) NOT NULL,
    actor   VARCHAR(128) NOT NULL,
    action  VARCHAR(32) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    job_id  BIGINT UNSIGNED NULL,
    queue   VARCHAR(64) CHARACTER SET ascii COLLATE ascii_bin NULL,
    detail  TEXT NULL,
    PRIMARY KEY (id),
    KEY job_queue_audit_job (job_id, id),
    KEY job_queue_audit_at (at)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;
