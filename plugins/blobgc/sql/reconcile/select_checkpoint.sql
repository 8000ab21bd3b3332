-- A shard's checkpoint in a reconcile run (none yet: start from the beginning).
SELECT start_after, pending_ref, pending_keys, done
FROM blobgc.reconcile_checkpoint
WHERE run_id = %(run_id)s AND shard = %(shard)s
