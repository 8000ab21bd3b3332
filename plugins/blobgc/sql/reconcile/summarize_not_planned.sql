-- What a reconcile run considered and did not plan, per collection or bucket, from its checkpoints.
SELECT coalesce(scope, shard) AS scope,
       bool_or(inventory_phase IS NOT NULL) AS from_inventory,
       coalesce(sum(considered), 0), coalesce(sum(accounted), 0), coalesce(sum(too_young), 0),
       min(first_eligible_at), coalesce(sum(orphans), 0), coalesce(sum(unknown_keys), 0),
       coalesce(sum(waiting), 0)
FROM blobgc.reconcile_checkpoint
WHERE run_id = %(run_id)s
GROUP BY 1
ORDER BY 1
