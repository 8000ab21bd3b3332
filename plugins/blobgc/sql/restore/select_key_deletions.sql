-- For keys missing from the store that rows to be put back form: whether the run being undone found each one absent
-- when it deleted the row, and the latest real run that deleted it (the run whose undo would bring it back).
WITH settled AS (
    SELECT k.key, l.dag_id, l.run_id, s.outcome, s.settled_at
    FROM blobgc.deletion_settlement s
    JOIN blobgc.deletion_log l ON l.id = s.log_id
    CROSS JOIN LATERAL unnest(s.keys) AS k(key)
    WHERE l.bucket = %(bucket)s AND NOT l.dry_run AND s.keys && %(keys)s::text[] AND k.key = ANY(%(keys)s::text[])
)
SELECT m.key,
       EXISTS (SELECT 1 FROM settled a
               WHERE a.key = m.key AND a.outcome = 'absent' AND a.dag_id = %(dag_id)s AND a.run_id = %(run_id)s
              ) AS absent,
       d.dag_id, d.run_id
FROM unnest(%(keys)s::text[]) AS m(key)
LEFT JOIN LATERAL (
    SELECT s.dag_id, s.run_id FROM settled s
    WHERE s.key = m.key AND s.outcome = 'deleted'
    ORDER BY s.settled_at DESC
    LIMIT 1
) d ON true
ORDER BY m.key
