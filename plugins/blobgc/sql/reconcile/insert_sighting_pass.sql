-- Record a real reconcile run as a pass of sightings, once: its other tasks and their retries find it recorded.
INSERT INTO blobgc.reconcile_pass (dag_id, run_id) VALUES (%(dag_id)s, %(run_id)s)
ON CONFLICT (dag_id, run_id) DO NOTHING
