-- The end of a collection attempt: what it kept.
UPDATE blobgc.generation_collection
SET blobs_kept = %(kept)s, finished_at = now()
WHERE dag_id = %(dag_id)s AND run_id = %(run_id)s AND generation = %(generation)s
