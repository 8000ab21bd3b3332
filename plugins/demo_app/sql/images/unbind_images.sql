-- Unbind rows from their offer (as ON DELETE SET NULL does), starting their grace now.
UPDATE app.image SET offer_id = NULL, last_update = now() WHERE id = ANY(%(ids)s::bigint[])
