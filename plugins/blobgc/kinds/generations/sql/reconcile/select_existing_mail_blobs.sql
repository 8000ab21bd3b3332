-- Which of the given generation blob ids have a row.
SELECT blob_id FROM gen.blob WHERE blob_id = ANY(%(refs)s::text[])
