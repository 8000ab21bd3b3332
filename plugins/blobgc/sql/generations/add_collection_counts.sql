-- Add one batch's work to its collection; call in the transaction that did it.
UPDATE blobgc.generation_collection
SET blobs_deleted = blobs_deleted + %(blobs)s, bytes_reclaimed = bytes_reclaimed + %(bytes)s,
    deletions_cleared = deletions_cleared + %(deletions)s
WHERE dag_id = %(dag_id)s AND run_id = %(run_id)s AND generation = %(generation)s
