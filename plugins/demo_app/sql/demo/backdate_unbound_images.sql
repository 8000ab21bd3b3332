-- As if the demo's unbound photos had been left alone for a while.
UPDATE app.image SET last_update = now() - %(age)s::interval WHERE offer_id IS NULL
