-- The next reference generation, recorded as this run's.
WITH opened AS (
    INSERT INTO gen.generation (id, created_at)
    SELECT coalesce(max(id), 0) + 1, now() FROM gen.generation
    RETURNING id
)
INSERT INTO blobgc.generation_opened (dag_id, run_id, generation)
SELECT %(dag_id)s, %(run_id)s, id FROM opened
RETURNING generation
