-- The gate's judgement of a run's plan and the human decision, if the run met the gate.
SELECT plan_run_id, planned_rows, planned_objects, planned_bytes, judgement, decision, decided_by, decided_at,
       created_at
FROM blobgc.gate_decision
WHERE dag_id = %(dag_id)s AND run_id = %(run_id)s;
