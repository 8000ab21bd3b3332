-- Fix the plan a run executes, once: returns the plan it was given (a retry with the same plan returns it too).
UPDATE blobgc.run SET plan_run_id = coalesce(plan_run_id, %(plan_run_id)s)
WHERE dag_id = %(dag_id)s AND run_id = %(run_id)s
RETURNING plan_run_id
