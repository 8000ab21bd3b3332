-- The application deletes a reference (a mail deleted); the trigger records the deletion in the same transaction.
DELETE FROM gen.reference WHERE owner_id = %(owner_id)s AND blob_id = %(blob_id)s
