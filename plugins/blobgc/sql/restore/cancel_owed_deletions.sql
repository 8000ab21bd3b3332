-- Take a run's still-owed deletions out of the outbox (those objects were never deleted) and record each cancelled key.
WITH cancelled AS (
    DELETE FROM blobgc.outbox o
    USING blobgc.deletion_log l
    WHERE o.log_id = l.id AND l.dag_id = %(dag_id)s AND l.run_id = %(run_id)s AND NOT l.dry_run
      AND (%(sources)s::text[] IS NULL OR l.source = ANY(%(sources)s::text[]))
    RETURNING l.bucket, coalesce(o.keys, l.keys) AS keys
)
INSERT INTO blobgc.restore_item (restore_run_id, source_dag_id, source_run_id, kind, bucket, item, outcome, detail)
SELECT %(restore_run_id)s, %(dag_id)s, %(run_id)s, 'owed', c.bucket, k.key, 'cancelled',
       'owed deletion cancelled: the object had not been deleted yet and stays'
FROM cancelled c
CROSS JOIN LATERAL unnest(c.keys) AS k(key)
ON CONFLICT DO NOTHING
RETURNING item;
