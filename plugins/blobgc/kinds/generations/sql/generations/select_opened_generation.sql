-- The generation a run opened, if it already did.
SELECT generation FROM blobgc.generation_opened WHERE dag_id = %(dag_id)s AND run_id = %(run_id)s
