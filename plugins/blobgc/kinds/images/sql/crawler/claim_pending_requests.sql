-- Claim pending crawl requests for a run (and find those it claimed already, on a retry).
WITH claimed AS (
    UPDATE app.crawl_request SET status = 'claimed', claimed_by = %(run_id)s
    WHERE id = ANY (ARRAY(
        SELECT id FROM app.crawl_request WHERE status = 'pending' ORDER BY id LIMIT %(limit)s FOR UPDATE SKIP LOCKED
    ))
    RETURNING id, offer_id, urls
)
SELECT id, offer_id, urls FROM claimed
UNION ALL
SELECT id, offer_id, urls FROM app.crawl_request WHERE status = 'claimed' AND claimed_by = %(run_id)s
ORDER BY id
