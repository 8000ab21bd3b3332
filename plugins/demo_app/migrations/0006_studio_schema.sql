-- The demo's second application (demo_app.studio), collected as `studio_assets` (include/collections.yaml):
-- uuid ids, content-addressed objects keyed by two columns, covers (nullable, SET NULL) and clips.
CREATE SCHEMA IF NOT EXISTS studio;
CREATE TABLE studio.asset (
    id           uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    checksum     text NOT NULL,
    kind         text NOT NULL,
    bytes        bigint NOT NULL,
    uploaded_at  timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX asset_checksum_kind_idx ON studio.asset (checksum, kind);
CREATE TABLE studio.project (
    id           bigint PRIMARY KEY,
    cover_asset  uuid REFERENCES studio.asset ON DELETE SET NULL
);
CREATE INDEX project_cover_asset_idx ON studio.project (cover_asset);
CREATE TABLE studio.clip (
    id          bigserial PRIMARY KEY,
    project_id  bigint NOT NULL REFERENCES studio.project ON DELETE CASCADE,
    asset_id    uuid NOT NULL REFERENCES studio.asset
);
CREATE INDEX clip_asset_id_idx ON studio.clip (asset_id);
