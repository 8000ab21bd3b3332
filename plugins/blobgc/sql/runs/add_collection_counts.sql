-- Add a real run's deleted rows, objects and bytes (reclaimed, and deleted) to its figures for one collection, in the
-- transaction that did the work (blobgc.reclaim_daily_by_collection).
INSERT INTO blobgc.run_collection AS c
    (dag_id, run_id, collection, rows_deleted, objects_deleted, bytes_reclaimed, bytes_deleted)
VALUES (%(dag_id)s, %(run_id)s, %(collection)s, %(rows)s, %(objects)s, %(bytes)s, %(bytes_deleted)s)
ON CONFLICT (dag_id, run_id, collection) DO UPDATE
SET rows_deleted    = c.rows_deleted + excluded.rows_deleted,
    objects_deleted = c.objects_deleted + excluded.objects_deleted,
    bytes_reclaimed = c.bytes_reclaimed + excluded.bytes_reclaimed,
    bytes_deleted   = c.bytes_deleted + excluded.bytes_deleted
