-- The distinct generations up to %(up_to)s that have deletions, by a loose index scan of
-- gen_deletion_generation_idx (one probe per generation, however many deletions each has).
WITH RECURSIVE found AS (
    (SELECT generation FROM gen.deletion
     WHERE generation <= %(up_to)s
     ORDER BY generation LIMIT 1)
    UNION ALL
    SELECT (SELECT d.generation FROM gen.deletion d
            WHERE d.generation > found.generation AND d.generation <= %(up_to)s
            ORDER BY d.generation LIMIT 1)
    FROM found
    WHERE found.generation IS NOT NULL
)
SELECT generation FROM found WHERE generation IS NOT NULL
