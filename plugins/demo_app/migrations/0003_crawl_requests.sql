-- Seed 001's crawl requests: the application queues partner photos to fetch for an offer here (what
-- blobgc_crawler does when it is triggered without conf). A run claims pending requests and marks them done.
CREATE TABLE app.crawl_request (
    id           bigserial PRIMARY KEY,
    offer_id     bigint NOT NULL REFERENCES app.offer ON DELETE CASCADE,
    urls         text[] NOT NULL,
    status       text NOT NULL DEFAULT 'pending' CHECK (status IN ('pending', 'claimed', 'done')),
    claimed_by   text,
    created_at   timestamptz NOT NULL DEFAULT now(),
    finished_at  timestamptz
);
CREATE INDEX crawl_request_pending_idx ON app.crawl_request (id) WHERE status = 'pending';
