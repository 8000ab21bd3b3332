-- Delete claimed rows of a collection that no reference of any kind points at (re-checked here, in the deleting
-- statement, whatever each foreign key's ON DELETE action) and forget their marks; return each row's id, size,
-- the keys its templates form, and its image for the deletion log.
WITH deleted AS (
    DELETE FROM {table} AS b
    WHERE b.{id} = ANY(%(ids)s::text[]::{type}[]) AND {unreferenced}
    RETURNING b.{id} AS id, {size} AS size, {keys} AS keys, to_jsonb(b)::text AS image
),
forgotten AS (
    DELETE FROM {marks} AS m USING deleted AS d WHERE m.id = d.id
)
SELECT id::text, size, keys, image FROM deleted
