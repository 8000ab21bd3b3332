-- One part's counts of a dry run's report, locked until the transaction ends (add_part_counts moves the run's totals by the difference).
SELECT rows_deleted, objects_deleted, bytes_reclaimed
FROM blobgc.run_part
WHERE dag_id = %(dag_id)s AND run_id = %(run_id)s AND part = %(part)s
FOR UPDATE
