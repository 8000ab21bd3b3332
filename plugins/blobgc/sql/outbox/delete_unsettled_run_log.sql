-- Forget what a run logged and still wholly owes for one source and part, before a retried task logs the same
-- keys again. Rows a drain has settled, even in part, stay (their keys are deleted or being retried).
WITH unsettled AS (
    DELETE FROM blobgc.outbox o
    USING blobgc.deletion_log l
    WHERE o.log_id = l.id AND l.dag_id = %(dag_id)s AND l.run_id = %(run_id)s AND l.source = %(source)s
      AND l.part = %(part)s
      AND o.keys IS NULL
      AND NOT EXISTS (SELECT 1 FROM blobgc.deletion_settlement s WHERE s.log_id = l.id)
    RETURNING o.log_id
)
DELETE FROM blobgc.deletion_log WHERE id IN (SELECT log_id FROM unsettled)
