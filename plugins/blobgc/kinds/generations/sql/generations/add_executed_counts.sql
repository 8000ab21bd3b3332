-- Add one executed plan item to the executing run's figures for its generation (a row of its own when it executes a
-- dry run's plan: the scan's figures are then the dry run's); call in the transaction that did it. Blobs kept:
-- skipped as referenced again since the plan. %(finished)s: the run's part of this generation is done.
INSERT INTO blobgc.generation_collection AS c
    (dag_id, run_id, generation, dry_run, blobs_deleted, bytes_reclaimed, deletions_cleared, blobs_kept, finished_at)
VALUES (%(dag_id)s, %(run_id)s, %(generation)s, false, %(blobs)s, %(bytes)s, %(deletions)s, %(kept)s,
        CASE WHEN %(finished)s THEN now() END)
ON CONFLICT (dag_id, run_id, generation) DO UPDATE
SET blobs_deleted = c.blobs_deleted + excluded.blobs_deleted,
    bytes_reclaimed = c.bytes_reclaimed + excluded.bytes_reclaimed,
    deletions_cleared = c.deletions_cleared + excluded.deletions_cleared,
    blobs_kept = coalesce(c.blobs_kept, 0) + excluded.blobs_kept,
    finished_at = CASE WHEN %(finished)s THEN now() ELSE c.finished_at END
