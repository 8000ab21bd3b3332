-- The latest reconcile run that recorded a finding (by reconcile_finding_latest_idx: one index entry read).
SELECT f.run_id
FROM blobgc.reconcile_finding f
ORDER BY f.found_at DESC, f.id DESC
LIMIT 1;
