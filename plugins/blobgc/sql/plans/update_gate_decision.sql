-- A human's answer to a waiting gate (or the timeout's), with who gave it.
UPDATE blobgc.gate_decision SET decision = %(decision)s, decided_by = %(decided_by)s, decided_at = now()
WHERE dag_id = %(dag_id)s AND run_id = %(run_id)s
RETURNING decision
