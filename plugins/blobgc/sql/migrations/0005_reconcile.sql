-- Seed 001 §5's reconciliation: per-shard checkpoints, and the findings that are reported, never acted on.

-- Where each shard of a reconcile run got to: the last key of the last fully checked page, and its counts.
-- A retried shard resumes after start_after instead of listing from the start.
CREATE TABLE blobgc.reconcile_checkpoint (
    run_id        text NOT NULL,
    shard         text NOT NULL,
    start_after   text NOT NULL DEFAULT '',
    pending_ref   text,
    pending_keys  text[] NOT NULL DEFAULT '{}',
    pages         integer NOT NULL DEFAULT 0,
    keys_checked  bigint NOT NULL DEFAULT 0,
    orphans       bigint NOT NULL DEFAULT 0,
    orphan_bytes  bigint NOT NULL DEFAULT 0,
    too_young     bigint NOT NULL DEFAULT 0,
    unknown_keys  bigint NOT NULL DEFAULT 0,
    missing       bigint NOT NULL DEFAULT 0,
    done          boolean NOT NULL DEFAULT false,
    updated_at    timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (run_id, shard)
);

-- Keys that match no known layout (never deleted), and rows whose object is missing (never "fixed").
CREATE TABLE blobgc.reconcile_finding (
    id        bigserial PRIMARY KEY,
    run_id    text NOT NULL,
    kind      text NOT NULL CHECK (kind IN ('unknown_key', 'missing_object')),
    bucket    text NOT NULL,
    key       text NOT NULL,
    source    text,
    found_at  timestamptz NOT NULL DEFAULT now(),
    UNIQUE (run_id, kind, bucket, key)
);
