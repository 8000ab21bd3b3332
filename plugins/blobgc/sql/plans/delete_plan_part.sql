-- Take back what an earlier attempt of this planning task planned in its part (and what was done with it).
DELETE FROM blobgc.plan_item WHERE dag_id = %(dag_id)s AND run_id = %(run_id)s AND part = %(part)s
