-- The reference time of the run that made a plan: the cutoff its pastes were judged due by.
SELECT reference_time FROM blobgc.run WHERE dag_id = %(dag_id)s AND run_id = %(plan_run_id)s
