-- Idle workers on PostgreSQL wait on LISTEN job_queue_ready instead of polling: each job that
-- becomes ready notifies that channel with its queue's name, and a worker serving that queue
-- wakes and claims. MySQL has no such signal: there an idle worker reads the claim index
-- every `idle_probe` interval instead.
--
-- The triggers below cover every way a job becomes claimable, whoever writes it: the
-- library's enqueues, promotion of scheduled jobs, retries, releases from `blocked`, jobs
-- handed back at shutdown, operators' retries and resumes, and the plain INSERTs of SQL
-- producers. PostgreSQL delivers a notification when its transaction commits (none for a
-- rolled back one), and folds identical ones within a transaction, so a bulk enqueue of
-- one queue sends one notification, not one per row.
--
-- Notifications are not stored: a worker that is not listening when one is sent never sees
-- it. Workers therefore still claim on a rare timer, and once after each (re)connection of
-- their listener.

CREATE FUNCTION job_queue_notify_ready() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
BEGIN
    IF TG_OP = 'DELETE' THEN
        PERFORM pg_notify('job_queue_ready', OLD.queue);
    ELSE
        PERFORM pg_notify('job_queue_ready', NEW.queue);
    END IF;
    RETURN NULL;
END
$$;

-- A job inserted ready (an enqueue without a delay).
CREATE TRIGGER job_queue_ready_insert
    AFTER INSERT ON job_queue
    FOR EACH ROW WHEN (NEW.status = 'ready')
    EXECUTE FUNCTION job_queue_notify_ready();

-- A job made ready: promoted, retried, released from blocked, handed back, run now. Not a
-- row that was ready already (a re-prioritisation that names status).
CREATE TRIGGER job_queue_ready_update
    AFTER UPDATE OF status ON job_queue
    FOR EACH ROW WHEN (NEW.status = 'ready' AND OLD.status IS DISTINCT FROM 'ready')
    EXECUTE FUNCTION job_queue_notify_ready();

-- A queue resumed: its ready jobs are claimable again.
CREATE TRIGGER job_queue_pause_resume
    AFTER DELETE ON job_queue_pause
    FOR EACH ROW
    EXECUTE FUNCTION job_queue_notify_ready();
