-- How many blobs there are, when the planner has no estimate yet.
SELECT count(*) FROM app.blob
