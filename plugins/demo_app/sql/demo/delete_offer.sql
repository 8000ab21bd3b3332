-- The demo sells an offer: ON DELETE SET NULL unbinds its photos.
DELETE FROM app.offer WHERE id = %(id)s
