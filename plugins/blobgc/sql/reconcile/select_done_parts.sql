-- Which of an inventory run's parts (checkpoint names) are done: a retried task skips them.
SELECT shard FROM blobgc.reconcile_checkpoint WHERE run_id = %(run_id)s AND shard = ANY(%(shards)s::text[]) AND done
