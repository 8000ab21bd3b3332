-- A dry run's whole report of one generation, written once: returns a row only the first time.
INSERT INTO blobgc.generation_collection
    (dag_id, run_id, generation, dry_run, attempts, false_positive_rate, filter_bytes, references_scanned,
     blobs_deleted, bytes_reclaimed, deletions_cleared, blobs_kept, finished_at)
VALUES (%(dag_id)s, %(run_id)s, %(generation)s, true, 1, %(false_positive_rate)s, %(filter_bytes)s,
        %(references_scanned)s, %(blobs)s, %(bytes)s, %(deletions)s, %(kept)s, now())
ON CONFLICT (dag_id, run_id, generation) DO NOTHING
RETURNING true
