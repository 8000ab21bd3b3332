-- Review, approve, undo (issue 20): a plan that becomes the run, a gate on unusual deletions, and what a run saves.

-- A plan: exactly what a run would delete, item by item (one row per batch of rows or keys), under the id of the
-- run that made it. A dry run's plan is kept for `from_plan`; a real run plans first, passes the gate, then deletes
-- its own plan. `row_ids` are the rows an item deletes (NULL when it deletes objects only); `keys`/`sizes` the
-- objects (a NULL size is unknown); `modified_before` the listing's cut-off for an orphan object (it is deleted
-- only if still not written since).
CREATE TABLE blobgc.plan_item (
    id               bigserial PRIMARY KEY,
    dag_id           text NOT NULL,
    run_id           text NOT NULL,
    part             text NOT NULL DEFAULT '',
    collection       text,
    source           text NOT NULL,
    bucket           text NOT NULL,
    row_ids          text[],
    keys             text[] NOT NULL,
    sizes            bigint[] NOT NULL,
    bytes            bigint NOT NULL DEFAULT 0,
    modified_before  timestamptz,
    planned_at       timestamptz NOT NULL DEFAULT now(),
    CHECK (cardinality(keys) = cardinality(sizes))
);
CREATE INDEX plan_item_run_idx ON blobgc.plan_item (dag_id, run_id, part, id);

-- What the run executing a plan did with each item: the rows and objects it deleted (or owed), and those it
-- skipped because they were referenced again since the plan was made. A retried task skips the items here.
CREATE TABLE blobgc.plan_outcome (
    dag_id          text NOT NULL,
    run_id          text NOT NULL,
    item_id         bigint NOT NULL REFERENCES blobgc.plan_item (id) ON DELETE CASCADE,
    rows_deleted    integer NOT NULL DEFAULT 0,
    objects_owed    integer NOT NULL DEFAULT 0,
    skipped_ids     text[] NOT NULL DEFAULT '{}',
    skipped_keys    text[] NOT NULL DEFAULT '{}',
    done_at         timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (dag_id, run_id, item_id)
);
CREATE INDEX plan_outcome_item_idx ON blobgc.plan_outcome (item_id);

-- Which plan a run executes (its own, or a dry run's given as Param from_plan), and when that plan was made.
ALTER TABLE blobgc.run ADD COLUMN plan_run_id text;

-- The gate's judgement of a real run's plan against the DAG's history, and the human decision when it waited.
-- decision: passed (under the threshold, or a dry run), waiting, approved, rejected, timed_out.
CREATE TABLE blobgc.gate_decision (
    dag_id            text NOT NULL,
    run_id            text NOT NULL,
    plan_run_id       text NOT NULL,
    planned_rows      bigint NOT NULL,
    planned_objects   bigint NOT NULL,
    planned_bytes     bigint NOT NULL,
    judgement         jsonb NOT NULL,
    decision          text NOT NULL CHECK (decision IN ('passed', 'waiting', 'approved', 'rejected', 'timed_out')),
    decided_by        text,
    decided_at        timestamptz,
    created_at        timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (dag_id, run_id)
);

-- USD per GB-month (GB = 2^30 bytes, as S3 bills) per storage class, copied from Variable blobgc_storage_prices
-- by each run's report step. The bytes blobgc deletes are priced at 'STANDARD' (S3 Standard's list price,
-- $0.023, while the Variable does not say otherwise).
CREATE TABLE blobgc.storage_price (
    storage_class       text PRIMARY KEY,
    usd_per_gb_month    numeric NOT NULL CHECK (usd_per_gb_month >= 0),
    updated_at          timestamptz NOT NULL DEFAULT now()
);
INSERT INTO blobgc.storage_price (storage_class, usd_per_gb_month) VALUES ('STANDARD', 0.023);

-- blobgc.reclaim_daily_by_collection's companion: the same rows, with the monthly storage cost they save.
CREATE VIEW blobgc.reclaim_savings_daily_by_collection AS
SELECT d.*,
       round(d.bytes_reclaimed::numeric / 1073741824
             * coalesce((SELECT usd_per_gb_month FROM blobgc.storage_price WHERE storage_class = 'STANDARD'), 0.023),
             6) AS usd_per_month_saved
FROM blobgc.reclaim_daily_by_collection d;

-- "Undo this run" presses from the receipt page: who asked, and the blobgc_restore run it triggered.
CREATE TABLE blobgc.undo_request (
    dag_id          text NOT NULL,
    run_id          text NOT NULL,
    restore_run_id  text NOT NULL,
    requested_by    text NOT NULL,
    requested_at    timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (dag_id, run_id, restore_run_id)
);
