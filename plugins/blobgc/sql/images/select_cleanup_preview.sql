-- What the cleanup would remove: per image id, its stale unbound rows and whether its files would go (no other row left).
SELECT s.image_id, count(*) AS stale_rows,
       NOT EXISTS (SELECT 1 FROM app.image i
                   WHERE i.image_id = s.image_id AND NOT (i.offer_id IS NULL AND i.last_update < %(cutoff)s))
           AS files_go
FROM app.image s
WHERE s.offer_id IS NULL AND s.last_update < %(cutoff)s
GROUP BY s.image_id
ORDER BY s.image_id
