-- "Undo this run" presses for one run, newest first, with the blobgc_restore run each triggered as blobgc recorded it.
SELECT u.restore_run_id, u.requested_by, u.requested_at, r.started_at, r.finished_at, r.details
FROM blobgc.undo_request u
LEFT JOIN blobgc.run r ON r.dag_id = 'blobgc_restore' AND r.run_id = u.restore_run_id
WHERE u.dag_id = %(dag_id)s AND u.run_id = %(run_id)s
ORDER BY u.requested_at DESC;
