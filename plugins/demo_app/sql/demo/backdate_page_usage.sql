-- Demo data: a page usage last confirmed some time ago.
UPDATE app.page_using_blob SET updated_at = now() - %(age)s::interval WHERE blob_id = %(blob_id)s
