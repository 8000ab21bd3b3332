-- Seed 003's generation-based collector (Apache James ADR 39): which run opened which generation,
-- and what each run's collection of each generation did.

-- One generation per run of blobgc_generations: a retried open_generation finds its run's row and
-- opens nothing new.
CREATE TABLE blobgc.generation_opened (
    dag_id      text NOT NULL,
    run_id      text NOT NULL,
    generation  integer NOT NULL UNIQUE,
    opened_at   timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (dag_id, run_id)
);

-- One row per run and collected generation. Deleted blobs, bytes and cleared deletions are added in
-- the transaction that deleted them (so a retry never counts twice); the scan's figures and `kept`
-- are those of the latest attempt. A dry run writes its row once, with its whole report.
CREATE TABLE blobgc.generation_collection (
    dag_id               text NOT NULL,
    run_id               text NOT NULL,
    generation           integer NOT NULL,
    dry_run              boolean NOT NULL,
    attempts             integer NOT NULL DEFAULT 0,
    false_positive_rate  double precision,
    filter_bytes         bigint,
    references_scanned   bigint,
    blobs_deleted        bigint NOT NULL DEFAULT 0,
    bytes_reclaimed      bigint NOT NULL DEFAULT 0,
    deletions_cleared    bigint NOT NULL DEFAULT 0,
    blobs_kept           bigint,
    started_at           timestamptz NOT NULL DEFAULT now(),
    finished_at          timestamptz,
    PRIMARY KEY (dag_id, run_id, generation)
);
