-- A planning attempt's figures for one generation, replacing an earlier attempt's: its reference scan, what the filter
-- kept, and on a dry run what its plan would delete (a real run's execution adds what it deleted, from 0).
-- finished_at: set when nothing is left to do (a dry run, or a real run that planned nothing here).
INSERT INTO blobgc.generation_collection AS c
    (dag_id, run_id, generation, dry_run, attempts, false_positive_rate, filter_bytes, references_scanned,
     blobs_deleted, bytes_reclaimed, deletions_cleared, blobs_kept, finished_at)
VALUES (%(dag_id)s, %(run_id)s, %(generation)s, %(dry_run)s, 1, %(false_positive_rate)s, %(filter_bytes)s,
        %(references_scanned)s, %(blobs)s, %(bytes)s, %(deletions)s, %(kept)s,
        CASE WHEN %(finished)s THEN now() END)
ON CONFLICT (dag_id, run_id, generation) DO UPDATE
SET attempts = c.attempts + 1, false_positive_rate = excluded.false_positive_rate,
    filter_bytes = excluded.filter_bytes, references_scanned = excluded.references_scanned,
    blobs_deleted = excluded.blobs_deleted, bytes_reclaimed = excluded.bytes_reclaimed,
    deletions_cleared = excluded.deletions_cleared, blobs_kept = excluded.blobs_kept,
    finished_at = excluded.finished_at
