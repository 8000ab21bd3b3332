-- Bind rows to offers with their order and touch them; a row to rebind must still be unbound. Returns the rows changed.
UPDATE app.image i
SET offer_id = b.offer_id, num = b.num, last_update = now()
FROM unnest(%(ids)s::bigint[], %(offer_ids)s::bigint[], %(nums)s::smallint[], %(rebind)s::boolean[])
     AS b(id, offer_id, num, rebind)
WHERE i.id = b.id AND (NOT b.rebind OR i.offer_id IS NULL)
RETURNING i.id
