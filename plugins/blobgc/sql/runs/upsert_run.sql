-- Create a DAG run's report row once, fixing its reference time (never past now()); return it and now().
WITH inserted AS (
    INSERT INTO blobgc.run (dag_id, run_id, dry_run, reference_time)
    VALUES (%(dag_id)s, %(run_id)s, %(dry_run)s, LEAST(%(reference_time)s::timestamptz, now()))
    ON CONFLICT (dag_id, run_id) DO NOTHING
    RETURNING reference_time
)
SELECT coalesce((SELECT reference_time FROM inserted),
                (SELECT reference_time FROM blobgc.run WHERE dag_id = %(dag_id)s AND run_id = %(run_id)s)),
       now()
