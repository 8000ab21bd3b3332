-- A reconcile run's totals over its shards.
SELECT count(*), count(*) FILTER (WHERE done), coalesce(sum(pages), 0), coalesce(sum(keys_checked), 0),
       coalesce(sum(orphans), 0), coalesce(sum(orphan_bytes), 0), coalesce(sum(too_young), 0),
       coalesce(sum(unknown_keys), 0), coalesce(sum(missing), 0)
FROM blobgc.reconcile_checkpoint
WHERE run_id = %(run_id)s
