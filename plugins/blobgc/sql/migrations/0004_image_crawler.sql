-- Seed 001's crawler: its per-URL work and outcomes.

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
