-- Record a pass's sightings of orphans and return on how many passes in a row each was found, unchanged (this one
-- included): one found by the previous pass counts on, one found again by this pass (a retry) counts once, and one
-- whose object changed (size or LastModified) or that the previous pass did not find starts over.
INSERT INTO blobgc.reconcile_sighting AS s (bucket, key, size_bytes, last_modified, pass, seen)
SELECT %(bucket)s, o.key, o.size, date_trunc('second', o.modified), %(pass)s, 1
FROM unnest(%(keys)s::text[], %(sizes)s::bigint[], %(modified)s::timestamptz[]) AS o(key, size, modified)
ON CONFLICT (bucket, key) DO UPDATE SET
    seen = CASE
        WHEN (s.size_bytes, s.last_modified) IS DISTINCT FROM (excluded.size_bytes, excluded.last_modified) THEN 1
        WHEN s.pass = excluded.pass THEN s.seen
        WHEN s.pass = %(previous)s::bigint THEN s.seen + 1
        ELSE 1
    END,
    size_bytes = excluded.size_bytes, last_modified = excluded.last_modified, pass = excluded.pass
RETURNING key, seen
