-- Dry run of update_unused_flags: count the flips one key range would make, changing nothing.
SELECT count(*) FILTER (WHERE NOT b.unused) AS would_become_unused,
       count(*) FILTER (WHERE b.unused) AS would_become_used
FROM app.blob b
WHERE b.id >= %(lo)s AND (%(hi)s::text IS NULL OR b.id < %(hi)s)
  AND b.unused = (b.id IN ({referenced}))
