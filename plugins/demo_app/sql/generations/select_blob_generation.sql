-- An existing blob's generation.
SELECT generation FROM gen.blob WHERE blob_id = %(blob_id)s
