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

-- Every object the collector deletes (or, on a dry run, would delete), recorded before the deletion.
CREATE TABLE blobgc.deletion_log (
    id                 bigserial PRIMARY KEY,
    dag_id             text NOT NULL,
    run_id             text NOT NULL,
    dry_run            boolean NOT NULL DEFAULT false,
    source             text NOT NULL,
    bucket             text NOT NULL,
    key                text NOT NULL,
    size_bytes         bigint,
    version_id         text,
    logged_at          timestamptz NOT NULL DEFAULT now(),
    deleted_at         timestamptz,
    deleted_by_run_id  text
);
CREATE INDEX deletion_log_run_idx ON blobgc.deletion_log (dag_id, run_id);
CREATE INDEX deletion_log_key_idx ON blobgc.deletion_log (bucket, key);

-- Object deletions still owed: inserted with the row deletion, removed once S3 confirms.
CREATE TABLE blobgc.outbox (
    log_id           bigint PRIMARY KEY REFERENCES blobgc.deletion_log (id),
    dag_id           text NOT NULL,
    bucket           text NOT NULL,
    key              text NOT NULL,
    attempts         integer NOT NULL DEFAULT 0,
    last_error       text,
    last_attempt_at  timestamptz,
    created_at       timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX outbox_dag_idx ON blobgc.outbox (dag_id, log_id);

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
