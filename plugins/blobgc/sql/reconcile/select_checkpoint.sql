-- A shard's checkpoint in a reconcile run (none yet: start from the beginning).
SELECT start_after, inventory_phase, done
FROM blobgc.reconcile_checkpoint
WHERE run_id = %(run_id)s AND shard = %(shard)s
