-- Orphans confirmed over several runs (issue 32, blobgc_reconcile's Param `confirmations`).
--
-- Each real reconcile run that reconciles a shard is a pass of sightings, numbered in the order runs first reconcile
-- one (a dry run, or a run executing a dry run's plan, is no pass). A sighting is an orphan found by a pass: its
-- object (size, LastModified to the second), the pass that last found it, and on how many passes in a row it was
-- found. Only the sightings of a run's pass and of the pass before it count; older ones are forgotten.
CREATE TABLE blobgc.reconcile_pass (
    pass       bigserial PRIMARY KEY,
    dag_id     text NOT NULL,
    run_id     text NOT NULL,
    started_at timestamptz NOT NULL DEFAULT now(),
    UNIQUE (dag_id, run_id),
    FOREIGN KEY (dag_id, run_id) REFERENCES blobgc.run (dag_id, run_id) ON DELETE CASCADE
);

CREATE TABLE blobgc.reconcile_sighting (
    bucket        text NOT NULL,
    key           text NOT NULL,
    size_bytes    bigint NOT NULL,
    last_modified timestamptz NOT NULL,
    pass          bigint NOT NULL REFERENCES blobgc.reconcile_pass (pass) ON DELETE CASCADE,
    seen          integer NOT NULL CHECK (seen >= 1),
    PRIMARY KEY (bucket, key)
);
CREATE INDEX reconcile_sighting_pass_idx ON blobgc.reconcile_sighting (pass);

-- A shard's orphans waiting for confirmation (found orphaned on fewer passes in a row than `confirmations`), and a
-- few of their keys for the report.
ALTER TABLE blobgc.reconcile_checkpoint
    ADD COLUMN waiting        bigint NOT NULL DEFAULT 0,
    ADD COLUMN waiting_sample text[] NOT NULL DEFAULT '{}';
