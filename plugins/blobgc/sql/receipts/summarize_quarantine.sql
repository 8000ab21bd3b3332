-- What became of the objects a run moved into quarantine: held (and until when), purged, brought back by an undo.
SELECT count(*)                                                            AS objects,
       coalesce(sum(size_bytes), 0)::bigint                                      AS bytes,
       count(*) FILTER (WHERE purged_at IS NULL AND restored_at IS NULL)   AS held,
       coalesce(sum(size_bytes) FILTER (WHERE purged_at IS NULL AND restored_at IS NULL), 0)::bigint AS bytes_held,
       count(*) FILTER (WHERE purged_at IS NOT NULL AND restored_at IS NULL) AS purged,
       coalesce(sum(size_bytes) FILTER (WHERE purged_at IS NOT NULL AND restored_at IS NULL), 0)::bigint AS bytes_purged,
       count(*) FILTER (WHERE restored_at IS NOT NULL)                     AS restored,
       min(expires_at) FILTER (WHERE purged_at IS NULL AND restored_at IS NULL) AS first_expiry,
       max(expires_at) FILTER (WHERE purged_at IS NULL AND restored_at IS NULL) AS last_expiry,
       max(purged_at)                                                      AS last_purged_at,
       max(days)                                                           AS days
FROM blobgc.quarantine
WHERE dag_id = %(dag_id)s AND run_id = %(run_id)s
