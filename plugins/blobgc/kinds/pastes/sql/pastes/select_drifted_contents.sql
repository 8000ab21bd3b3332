-- Contents whose ref_count differs from their real count of pastes, or that no paste references (read without locks; the repair re-checks under lock).
SELECT c.content_hash, c.ref_count, coalesce(p.n, 0)::integer AS pastes, c.size_bytes
FROM app.content c
LEFT JOIN (SELECT content_hash, count(*) AS n FROM app.paste GROUP BY content_hash) p USING (content_hash)
WHERE c.ref_count <> coalesce(p.n, 0) OR p.n IS NULL
ORDER BY c.content_hash
