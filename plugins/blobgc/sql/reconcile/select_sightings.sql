-- On how many passes in a row up to the latest one each of a dry run's orphans was found, unchanged (0: not found by
-- the latest pass, or its object changed since): a dry run records no sighting.
SELECT o.key, coalesce(s.seen, 0)
FROM unnest(%(keys)s::text[], %(sizes)s::bigint[], %(modified)s::timestamptz[]) AS o(key, size, modified)
LEFT JOIN blobgc.reconcile_sighting AS s
       ON s.bucket = %(bucket)s AND s.key = o.key AND s.pass = %(latest)s::bigint
      AND s.size_bytes = o.size AND s.last_modified = date_trunc('second', o.modified)
