-- A run that may hold a plan: whether it was a dry run, when it finished, the plan it executes, and when its plan was
-- made (its first item: a plan is as old as its oldest part; its start when it planned nothing).
SELECT r.dry_run, r.finished_at, r.plan_run_id,
       coalesce((SELECT min(p.planned_at) FROM blobgc.plan_item p WHERE p.dag_id = r.dag_id AND p.run_id = r.run_id),
                r.started_at) AS planned_at,
       EXISTS (SELECT 1 FROM blobgc.plan_item p WHERE p.dag_id = r.dag_id AND p.run_id = r.run_id) AS has_items,
       now() AS now
FROM blobgc.run r
WHERE r.dag_id = %(dag_id)s AND r.run_id = %(run_id)s
