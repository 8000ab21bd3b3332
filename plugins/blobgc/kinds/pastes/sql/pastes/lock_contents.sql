-- Lock the given contents in hash order, waiting for writers that hold them; a later statement then sees their pastes.
SELECT content_hash FROM app.content WHERE content_hash = ANY(%(hashes)b::text[]) ORDER BY content_hash FOR UPDATE
