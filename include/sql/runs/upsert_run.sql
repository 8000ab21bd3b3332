-- Create a DAG run's report row once; later calls (retries, other tasks) leave it as it is.
INSERT INTO blobgc.run (dag_id, run_id, dry_run, reference_time)
VALUES (%(dag_id)s, %(run_id)s, %(dry_run)s, %(reference_time)s)
ON CONFLICT (dag_id, run_id) DO NOTHING
