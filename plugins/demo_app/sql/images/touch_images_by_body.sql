-- The pre-upload cache: touch every row holding these bytes and return them, oldest first.
UPDATE app.image SET last_update = now()
WHERE body_hash = %(body_hash)s
RETURNING id, image_id, offer_id
