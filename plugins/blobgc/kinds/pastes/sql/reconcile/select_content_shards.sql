-- The shards of pastes/ that rows fall in.
SELECT DISTINCT left(content_hash, 1) FROM app.content
