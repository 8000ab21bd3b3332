-- A reconcile run's totals over its shards, and up to 10 keys of the orphans waiting for confirmation.
SELECT count(*), count(*) FILTER (WHERE done), coalesce(sum(pages), 0), coalesce(sum(keys_checked), 0),
       coalesce(sum(orphans), 0), coalesce(sum(orphan_bytes), 0), coalesce(sum(too_young), 0),
       coalesce(sum(unknown_keys), 0), coalesce(sum(missing), 0), coalesce(sum(waiting), 0),
       (SELECT coalesce(array_agg(k ORDER BY k), '{}')
        FROM (SELECT unnest(waiting_sample) AS k FROM blobgc.reconcile_checkpoint WHERE run_id = %(run_id)s
              ORDER BY 1 LIMIT 10) AS sample)
FROM blobgc.reconcile_checkpoint
WHERE run_id = %(run_id)s
