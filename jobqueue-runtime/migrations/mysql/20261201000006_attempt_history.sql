-- How each attempt ended, snoozes, and what a job returned.
--
-- claimed_at:  when the current (or last) claim was made: the start of the attempt, for
--              its entry in attempt_log. Set by the claim.
-- snoozes:     how many times the job asked to run again later (`JobError::snooze`). A
--              snooze spends no attempt: it raises max_attempts by one, since attempts
--              only ever grows (it fences every write). Bounded by the kind's
--              `max_snoozes`.
-- attempt_log: the last 20 attempts, oldest first, as a JSON array of
--              {"attempt", "started_at", "ended_at", "worker", "outcome", "error"}
--              (times in UTC, server clock; error at most 2 KiB). Appended by the same
--              fenced UPDATE that records the outcome, so a worker that lost its claim adds
--              nothing, and deleted with the job when it is pruned. NULL until the first
--              attempt ends. Plain text, not the JSON type: MariaDB's JSON adds a CHECK
--              constraint, and the library writes it only through JSON functions.
-- output:      what a job returned (serialized as JSON), once it is done; NULL for `()` and
--              for every job that is not done. At most 64 KiB (a larger output fails the
--              attempt); MEDIUMTEXT since TEXT holds at most 64 KiB less two bytes.
--
-- Cheap on a table of millions of rows: columns added at the end, nullable or with a
-- constant default, which MariaDB (10.3+) and MySQL (8.0.12+) add instantly, without
-- copying the table.
--
-- During a rolling upgrade an older worker does not know these columns and keeps working:
-- it never writes them (its claims leave claimed_at as it was, its outcomes add no entry to
-- attempt_log, its done jobs have no output). A job a newer worker snoozed comes back with
-- max_attempts raised by one; an older worker claims it like any job, and its budget of
-- attempts is what it was before the snooze.
ALTER TABLE job_queue
    ADD COLUMN claimed_at DATETIME(6) NULL,
    ADD COLUMN snoozes INT UNSIGNED NOT NULL DEFAULT 0,
    ADD COLUMN attempt_log MEDIUMTEXT NULL,
    ADD COLUMN output MEDIUMTEXT NULL;
