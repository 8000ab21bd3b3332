-- Why a run may not plan again: its gate judged the plan already, it executed part of it, or another run executes it.
SELECT 'its gate judged the plan (' || decision || ')' FROM blobgc.gate_decision
WHERE dag_id = %(dag_id)s AND run_id = %(run_id)s
UNION ALL
SELECT 'it executed part of it' WHERE EXISTS (
    SELECT 1 FROM blobgc.plan_outcome WHERE dag_id = %(dag_id)s AND run_id = %(run_id)s)
UNION ALL
SELECT 'run ' || run_id || ' executes it' FROM blobgc.run
WHERE dag_id = %(dag_id)s AND plan_run_id = %(run_id)s AND run_id <> %(run_id)s
LIMIT 1
