-- As if an earlier blobgc_mark had found these studio assets unused `age` ago (blobgc's own mark state).
INSERT INTO blobgc.mark_studio_assets (id, unused_since)
SELECT unnest(%(ids)s::uuid[]), now() - %(age)s::interval
ON CONFLICT (id) DO UPDATE SET unused_since = excluded.unused_since
