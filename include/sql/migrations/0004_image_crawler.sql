-- Seed 001's crawler: the application's pending crawl requests, and the crawler's per-URL work and outcomes.

-- The application queues partner photos to fetch for an offer here (what blobgc_crawler does when
-- it is triggered without conf). A run claims pending requests and marks them done.
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

-- One row per (offer, URL) of a crawler run, staged before the mapped batches run, with its outcome:
-- new (downloaded and processed), linked (a new row for an image bound elsewhere), rebound (an
-- unbound row bound again), unchanged (already bound to this offer) or failed (with the error).
CREATE TABLE blobgc.crawl_item (
    run_id       text NOT NULL,
    item_no      integer NOT NULL,
    batch_no     integer NOT NULL,
    request_id   bigint,
    offer_id     bigint NOT NULL,
    url          text NOT NULL,
    url_hash     text NOT NULL,
    num          smallint NOT NULL,
    outcome      text CHECK (outcome IN ('new', 'linked', 'rebound', 'unchanged', 'failed')),
    image_id     text,
    error        text,
    finished_at  timestamptz,
    PRIMARY KEY (run_id, item_no)
);
CREATE INDEX crawl_item_batch_idx ON blobgc.crawl_item (run_id, batch_no);

-- The files each image id was stored with, and their sizes, written with its first row: the cleaner
-- deletes exactly these (whatever blobgc_image_sizes says by then) and reports the bytes reclaimed.
CREATE TABLE blobgc.image_file (
    image_id   text PRIMARY KEY,
    keys       text[] NOT NULL,
    sizes      bigint[] NOT NULL,
    stored_at  timestamptz NOT NULL DEFAULT now(),
    CHECK (cardinality(keys) = cardinality(sizes))
);
