-- What this run did with one plan item (in the transaction that did it).
INSERT INTO blobgc.plan_outcome (dag_id, run_id, item_id, rows_deleted, objects_owed, skipped_ids, skipped_keys)
VALUES (%(dag_id)s, %(run_id)s, %(item_id)s, %(rows_deleted)s, %(objects_owed)s, %(skipped_ids)s, %(skipped_keys)s)
