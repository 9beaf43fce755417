-- Placeholder until the PostgreSQL schema lands.
CREATE OR REPLACE FUNCTION job_queue_now() RETURNS timestamp(6) LANGUAGE sql STABLE AS $$ SELECT statement_timestamp() AT TIME ZONE 'UTC' $$;
