-- Two counters of how attempts end without the job's code deciding it.
--
-- lease_expiries:   how many times a lease of this job ran out (its worker crashed, was
--                   killed or stalled). Reclaim puts the job back with a growing delay and
--                   fails it once the count reaches the worker's bound (default 3): a job
--                   that kills every worker that runs it must not crash the fleet forever.
-- unrunnable_since: when a worker first found it could not run the job (its kind is not
--                   registered there, or its payload does not fit the kind's arguments),
--                   typically an old worker during a rolling deploy. Such a job waits for a
--                   worker that can run it without spending attempts, and fails once it has
--                   waited longer than the worker's bound (default 24 h). NULL otherwise.
ALTER TABLE job_queue
    ADD COLUMN lease_expiries INT UNSIGNED NOT NULL DEFAULT 0,
    ADD COLUMN unrunnable_since DATETIME(6) NULL;
