-- The real runs (other than this one) that have executed a plan, begun to, wait to, or whose gate refused it: a plan
-- is executed once, and a plan a person (or the timeout) refused is never executed by another run either.
SELECT DISTINCT r.run_id, g.decision
FROM blobgc.run r
LEFT JOIN blobgc.gate_decision g ON g.dag_id = r.dag_id AND g.run_id = r.run_id
WHERE r.dag_id = %(dag_id)s AND r.plan_run_id = %(plan_run_id)s AND NOT r.dry_run AND r.run_id <> %(run_id)s
  AND (EXISTS (SELECT 1 FROM blobgc.plan_outcome o WHERE o.dag_id = r.dag_id AND o.run_id = r.run_id)
       OR g.decision IS NOT NULL)
ORDER BY 1
