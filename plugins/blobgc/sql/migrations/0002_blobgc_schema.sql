-- blobgc's own bookkeeping: runs, the deletion log (written before deleting) and the outbox of owed deletions.
CREATE SCHEMA IF NOT EXISTS blobgc;

-- One row per DAG run; counters are bumped in the same transaction as the work they count.
CREATE TABLE blobgc.run (
    dag_id           text NOT NULL,
    run_id           text NOT NULL,
    dry_run          boolean NOT NULL,
    reference_time   timestamptz,
    started_at       timestamptz NOT NULL DEFAULT now(),
    finished_at      timestamptz,
    rows_deleted     bigint NOT NULL DEFAULT 0,
    objects_deleted  bigint NOT NULL DEFAULT 0,
    bytes_reclaimed  bigint NOT NULL DEFAULT 0,
    details          jsonb NOT NULL DEFAULT '{}'::jsonb,
    PRIMARY KEY (dag_id, run_id)
);
CREATE INDEX run_started_at_idx ON blobgc.run (started_at);

-- Every object the collector deletes (or, on a dry run, would delete), recorded before the deletion:
-- one row per batch and bucket, keys and sizes side by side (a NULL size is unknown). Writing one
-- row per batch instead of one per key keeps logging off the sweep's critical path.
CREATE TABLE blobgc.deletion_log (
    id         bigserial PRIMARY KEY,
    dag_id     text NOT NULL,
    run_id     text NOT NULL,
    dry_run    boolean NOT NULL DEFAULT false,
    source     text NOT NULL,
    bucket     text NOT NULL,
    keys       text[] NOT NULL,
    sizes      bigint[] NOT NULL,
    logged_at  timestamptz NOT NULL DEFAULT now(),
    CHECK (cardinality(keys) = cardinality(sizes))
);
CREATE INDEX deletion_log_run_idx ON blobgc.deletion_log (dag_id, run_id);

-- Object deletions still owed: the keys of a log row that S3 has not confirmed yet. Inserted in the
-- transaction that deletes the rows; removed once DeleteObjects confirms every key. keys/sizes are
-- NULL while every key of the log row is owed, and hold the remaining ones after a partial failure.
CREATE TABLE blobgc.outbox (
    log_id           bigint PRIMARY KEY REFERENCES blobgc.deletion_log (id),
    dag_id           text NOT NULL,
    bucket           text NOT NULL,
    keys             text[],
    sizes            bigint[],
    attempts         integer NOT NULL DEFAULT 0,
    last_errors      jsonb,
    last_attempt_at  timestamptz,
    created_at       timestamptz NOT NULL DEFAULT now(),
    CHECK (cardinality(keys) = cardinality(sizes))
);
CREATE INDEX outbox_dag_idx ON blobgc.outbox (dag_id, log_id);

-- Which run confirmed which keys of a log row, and when.
CREATE TABLE blobgc.deletion_settlement (
    log_id      bigint NOT NULL REFERENCES blobgc.deletion_log (id),
    run_id      text NOT NULL,
    settled_at  timestamptz NOT NULL DEFAULT now(),
    keys        text[] NOT NULL
);
CREATE INDEX deletion_settlement_log_idx ON blobgc.deletion_settlement (log_id);

-- The deletion log one object a row, for audits: who logged it, whether it is still owed, who deleted it.
CREATE VIEW blobgc.deleted_object AS
SELECT l.id AS log_id, l.dag_id, l.run_id, l.dry_run, l.source, l.bucket, k.key, k.size_bytes, l.logged_at,
       s.settled_at AS deleted_at, s.run_id AS deleted_by_run_id,
       (o.log_id IS NOT NULL AND (o.keys IS NULL OR k.key = ANY (o.keys))) AS owed
FROM blobgc.deletion_log l
CROSS JOIN LATERAL unnest(l.keys, l.sizes) AS k(key, size_bytes)
LEFT JOIN blobgc.outbox o ON o.log_id = l.id
LEFT JOIN LATERAL (
    SELECT st.settled_at, st.run_id
    FROM blobgc.deletion_settlement st
    WHERE st.log_id = l.id AND k.key = ANY (st.keys)
    ORDER BY st.settled_at
    LIMIT 1
) s ON true;

-- For analysts: storage reclaimed per day, DAG and dry-run flag (CONTRACT §5).
CREATE VIEW blobgc.reclaim_daily AS
SELECT (r.started_at AT TIME ZONE 'UTC')::date AS day,
       r.dag_id,
       r.dry_run,
       count(*)::bigint                AS runs,
       sum(r.rows_deleted)::bigint     AS rows_deleted,
       sum(r.objects_deleted)::bigint  AS objects_deleted,
       sum(r.bytes_reclaimed)::bigint  AS bytes_reclaimed
FROM blobgc.run r
GROUP BY 1, 2, 3;
