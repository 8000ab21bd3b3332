-- Seed 003 (Apache James ADR 39): the size of a generation blob's object, for the reclaim report. Nullable:
-- blobs written by other code without it are collected all the same, their bytes counted as unknown.
ALTER TABLE gen.blob ADD COLUMN IF NOT EXISTS size_bytes bigint;
