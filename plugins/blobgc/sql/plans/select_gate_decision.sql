-- A run's gate decision, who made it and the judgement behind it.
SELECT decision, decided_by, decided_at, judgement, planned_rows, planned_objects, planned_bytes
FROM blobgc.gate_decision WHERE dag_id = %(dag_id)s AND run_id = %(run_id)s
