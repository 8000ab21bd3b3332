-- Record an "Undo this run" press and the blobgc_restore run it triggered.
INSERT INTO blobgc.undo_request (dag_id, run_id, restore_run_id, requested_by)
VALUES (%(dag_id)s, %(run_id)s, %(restore_run_id)s, %(requested_by)s)
ON CONFLICT (dag_id, run_id, restore_run_id) DO NOTHING;
