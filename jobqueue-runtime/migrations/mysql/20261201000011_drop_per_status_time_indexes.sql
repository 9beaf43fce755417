-- Drops the three indexes that job_queue_status_at replaced (see the previous migration).
-- Dropping a secondary index is a metadata change on both servers.
--
-- Rolling upgrades: workers of earlier versions name these indexes in their maintenance
-- statements (promotion, reclaim, pruning), which fail once they are gone: such a worker logs
-- an error at each maintenance pass, and goes on claiming and finishing jobs, while the
-- upgraded workers (which start only once this migration is applied) do the maintenance.
-- Finish the rollout soon after migrating: until one upgraded worker runs, no job is
-- promoted, reclaimed or pruned.
ALTER TABLE job_queue
    DROP KEY job_queue_due,
    DROP KEY job_queue_lease,
    DROP KEY job_queue_finished;
