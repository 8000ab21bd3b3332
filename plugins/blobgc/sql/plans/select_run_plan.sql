-- The plan a run executes (NULL until its first task fixed it).
SELECT plan_run_id FROM blobgc.run WHERE dag_id = %(dag_id)s AND run_id = %(run_id)s
