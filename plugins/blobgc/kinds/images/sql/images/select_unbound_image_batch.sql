-- Plan a batch of stale unbound rows (nothing locked); files_go: the image id's last stale row, no other row left.
SELECT s.id, s.image_id,
       NOT EXISTS (SELECT 1 FROM app.image i
                   WHERE i.image_id = s.image_id AND i.id <> s.id
                     AND (i.id > s.id OR NOT (i.offer_id IS NULL AND i.last_update < %(cutoff)s))) AS files_go
FROM app.image s
WHERE s.offer_id IS NULL AND s.last_update < %(cutoff)s AND s.id > %(after)s
ORDER BY s.id
LIMIT %(batch_size)s
