-- Record which connection one step of a run read its candidates from; the run keeps the replica's lag as the first
-- step that read from it measured it.
UPDATE blobgc.run
SET reads = reads || jsonb_build_object(%(task_id)s::text, %(reads)s::jsonb),
    replica_lag_seconds = CASE WHEN %(replica)s THEN coalesce(replica_lag_seconds, %(lag_seconds)s) ELSE replica_lag_seconds END
WHERE dag_id = %(dag_id)s AND run_id = %(run_id)s
