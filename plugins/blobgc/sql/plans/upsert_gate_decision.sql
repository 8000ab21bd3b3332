-- The gate's judgement of a run's plan, and the decision (a later decision replaces 'waiting').
INSERT INTO blobgc.gate_decision (dag_id, run_id, plan_run_id, planned_rows, planned_objects, planned_bytes,
                                  judgement, decision, decided_by, decided_at)
VALUES (%(dag_id)s, %(run_id)s, %(plan_run_id)s, %(planned_rows)s, %(planned_objects)s, %(planned_bytes)s,
        %(judgement)s, %(decision)s, %(decided_by)s, CASE WHEN %(decision)s = 'waiting' THEN NULL ELSE now() END)
ON CONFLICT (dag_id, run_id) DO UPDATE
SET plan_run_id = excluded.plan_run_id, planned_rows = excluded.planned_rows,
    planned_objects = excluded.planned_objects, planned_bytes = excluded.planned_bytes,
    judgement = excluded.judgement, decision = excluded.decision, decided_by = excluded.decided_by,
    decided_at = excluded.decided_at
