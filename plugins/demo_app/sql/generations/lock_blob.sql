-- An existing blob's row, held (KEY SHARE) until the transaction adding a reference to it ends.
SELECT generation FROM gen.blob WHERE blob_id = %(blob_id)s FOR KEY SHARE
