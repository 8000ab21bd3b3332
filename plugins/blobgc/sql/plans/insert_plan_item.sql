-- One item of a run's plan: a batch of rows (row_ids; NULL for objects only) and the objects they own, with sizes.
INSERT INTO blobgc.plan_item (dag_id, run_id, part, collection, source, bucket, row_ids, keys, sizes, bytes,
                              modified_before)
VALUES (%(dag_id)s, %(run_id)s, %(part)s, %(collection)s, %(source)s, %(bucket)s, %(row_ids)s, %(keys)s, %(sizes)s,
        %(bytes)s, %(modified_before)s)
