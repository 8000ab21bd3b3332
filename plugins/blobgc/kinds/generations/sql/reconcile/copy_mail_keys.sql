-- Every key a generation blob row accounts for (and must have), for the inventory anti-join: blobgc.kinds.generations.layouts.mail_key.
SELECT 'mail/' || blob_id, true FROM gen.blob
