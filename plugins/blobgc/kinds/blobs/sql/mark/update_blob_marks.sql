-- Mark one key range in one pass, writing only the rows that change: flip `unused` (stamping
-- `updated_at` at the flip) and `visibility` as select_blob_marks decides.
WITH marks AS MATERIALIZED ({marks}),
changed AS (
    UPDATE app.blob b
    SET unused = b.unused <> m.flip_unused,
        updated_at = CASE WHEN m.flip_unused THEN now() ELSE b.updated_at END,
        visibility = CASE WHEN m.flip_visibility = (b.visibility = 'PUBLIC') THEN 'PRIVATE' ELSE 'PUBLIC' END
    FROM marks m
    WHERE b.id = m.id AND (m.flip_unused OR m.flip_visibility)
    RETURNING m.flip_unused, b.unused, m.flip_visibility
)
SELECT count(*) FILTER (WHERE flip_unused AND unused)     AS became_unused,
       count(*) FILTER (WHERE flip_unused AND NOT unused) AS became_used,
       count(*) FILTER (WHERE flip_visibility)            AS visibility_changed
FROM changed
