-- The W3C trace context (`traceparent`) of the code that enqueued the job, so that the job's
-- span continues that trace (feature `opentelemetry`). NULL when the enqueue was not traced,
-- and for rows inserted by producers that do not trace. 55 characters in version 00; later
-- versions may append fields, hence the room.
ALTER TABLE job_queue ADD COLUMN traceparent VARCHAR(128) CHARACTER SET ascii NULL DEFAULT NULL;
