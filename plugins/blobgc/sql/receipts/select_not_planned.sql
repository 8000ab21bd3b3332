-- What a run considered and did not plan, per collection, as its report recorded it (blobgc.run.details, key not_planned; NULL when it recorded none).
SELECT details -> 'not_planned' AS not_planned
FROM blobgc.run
WHERE dag_id = %(dag_id)s AND run_id = %(run_id)s;
