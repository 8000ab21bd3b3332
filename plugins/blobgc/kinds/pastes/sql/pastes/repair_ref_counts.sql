-- Set each given content's ref_count to its real count of pastes, where they differ; returns the old and new counts.
WITH truth AS (
    SELECT c.content_hash, c.ref_count AS was,
           (SELECT count(*) FROM app.paste p WHERE p.content_hash = c.content_hash)::integer AS pastes
    FROM app.content c
    WHERE c.content_hash = ANY(%(hashes)b::text[])
)
UPDATE app.content c
SET ref_count = truth.pastes
FROM truth
WHERE c.content_hash = truth.content_hash AND c.ref_count <> truth.pastes
RETURNING c.content_hash, truth.was, truth.pastes
