-- Put parked owed deletions of one DAG (all, or the given log rows) back in line, due at once, their failures forgotten.
UPDATE blobgc.outbox
SET parked_at = NULL, next_attempt_at = NULL, failures = 0
WHERE dag_id = %(dag_id)s AND parked_at IS NOT NULL
  AND (%(log_ids)s::bigint[] IS NULL OR log_id = ANY(%(log_ids)s::bigint[]))
RETURNING log_id
