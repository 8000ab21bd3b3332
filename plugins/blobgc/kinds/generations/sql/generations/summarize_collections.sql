-- A run's collections, generation by generation, for its report.
SELECT generation, dry_run, references_scanned, filter_bytes, blobs_deleted, bytes_reclaimed, deletions_cleared,
       blobs_kept, attempts, finished_at IS NOT NULL
FROM blobgc.generation_collection
WHERE dag_id = %(dag_id)s AND run_id = %(run_id)s
ORDER BY generation
