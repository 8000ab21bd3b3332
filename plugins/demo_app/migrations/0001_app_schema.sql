-- The demo application's schema (CONTRACT §3): the tables the collector works on, for every seed.
CREATE SCHEMA IF NOT EXISTS app;
CREATE SCHEMA IF NOT EXISTS gen;

-- Seed 000: blobs referenced through ON DELETE RESTRICT foreign keys.
CREATE TABLE app.blob (
    id          text NOT NULL,
    filename    text,
    mimetype    text,
    size_bytes  bigint,
    visibility  text NOT NULL DEFAULT 'PRIVATE' CHECK (visibility IN ('PRIVATE', 'PUBLIC')),
    unused      boolean NOT NULL DEFAULT false,
    updated_at  timestamptz NOT NULL DEFAULT now(),
    created_at  timestamptz NOT NULL DEFAULT now(),
    -- Covering: the marking pass reads each key range from the index alone (an index-only scan in
    -- id order) instead of visiting most heap pages per range (measured 0.7 s vs 1.4 s at 1M blobs).
    PRIMARY KEY (id) INCLUDE (unused, visibility)
);
-- The sweep's candidates: unused blobs in id order (so parallel sweeps over id ranges stay apart), with their flip time.
CREATE INDEX blob_unused_idx ON app.blob (id, updated_at) WHERE unused;

CREATE TABLE app.post (
    id          text PRIMARY KEY,
    title       text,
    created_at  timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE app.blob_attachment (
    id       bigserial PRIMARY KEY,
    blob_id  text NOT NULL REFERENCES app.blob ON DELETE RESTRICT ON UPDATE CASCADE,
    post_id  text REFERENCES app.post ON DELETE CASCADE,
    UNIQUE (post_id, blob_id)
);
-- Foreign-key columns are indexed so that reference checks never scan a table.
CREATE INDEX blob_attachment_blob_id_idx ON app.blob_attachment (blob_id);

CREATE TABLE app.page_using_blob (
    blob_id     text REFERENCES app.blob ON DELETE RESTRICT,
    url         text,
    in_use      boolean NOT NULL DEFAULT true,
    updated_at  timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (blob_id, url)
);
CREATE INDEX page_using_blob_updated_at_idx ON app.page_using_blob (updated_at);

-- Seed 001: car-ad photos, non-unique image_id, nullable offer binding.
CREATE TABLE app.offer (
    id          bigint PRIMARY KEY,
    title       text,
    created_at  timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE app.image (
    id           bigserial PRIMARY KEY,
    image_id     text NOT NULL,
    offer_id     bigint NULL REFERENCES app.offer ON DELETE SET NULL,
    url_hash     text NULL,
    body_hash    text NULL,
    num          smallint NOT NULL DEFAULT 0,
    last_update  timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX image_image_id_idx ON app.image (image_id);
CREATE INDEX image_offer_id_idx ON app.image (offer_id);
CREATE INDEX image_url_hash_idx ON app.image (url_hash);
CREATE INDEX image_body_hash_idx ON app.image (body_hash);
CREATE INDEX image_unbound_idx ON app.image (last_update) WHERE offer_id IS NULL;

-- Seed 002: deduplicated pastes with a reference count.
CREATE TABLE app.content (
    content_hash  text PRIMARY KEY,
    ref_count     integer NOT NULL,
    size_bytes    bigint
);

CREATE TABLE app.paste (
    short_code    text PRIMARY KEY,
    content_hash  text NOT NULL REFERENCES app.content,
    expires_at    timestamptz NOT NULL,
    status        text NOT NULL DEFAULT 'NOT_EXPIRED'
);
CREATE INDEX paste_content_hash_idx ON app.paste (content_hash);
CREATE INDEX paste_expiring_idx ON app.paste (expires_at) WHERE status = 'NOT_EXPIRED';

-- Seed 003: Apache James ADR 39 reference generations.
CREATE TABLE gen.generation (
    id          integer PRIMARY KEY,
    created_at  timestamptz DEFAULT now()
);

CREATE TABLE gen.blob (
    blob_id     text PRIMARY KEY,
    generation  integer NOT NULL
);
CREATE INDEX gen_blob_generation_idx ON gen.blob (generation);

CREATE TABLE gen.reference (
    owner_id    text,
    blob_id     text,
    generation  integer,
    PRIMARY KEY (owner_id, blob_id)
);
CREATE INDEX gen_reference_blob_id_idx ON gen.reference (blob_id);

CREATE TABLE gen.deletion (
    blob_id       text,
    generation    integer,
    deleted_at    timestamptz,
    gc_iteration  integer
);
CREATE INDEX gen_deletion_generation_idx ON gen.deletion (generation, blob_id);

-- Deleting a reference records its deletion in the same transaction, so no caller can forget it.
CREATE FUNCTION gen.record_reference_deletion() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO gen.deletion (blob_id, generation, deleted_at, gc_iteration)
    VALUES (OLD.blob_id, OLD.generation, now(), (SELECT max(id) FROM gen.generation));
    RETURN OLD;
END;
$$;

CREATE TRIGGER reference_deleted AFTER DELETE ON gen.reference
FOR EACH ROW EXECUTE FUNCTION gen.record_reference_deletion();
