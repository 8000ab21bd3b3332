-- Every key a content row accounts for (and must have), for the inventory anti-join: blobgc.kinds.pastes.layouts.content_key.
SELECT 'pastes/' || content_hash, true FROM app.content
