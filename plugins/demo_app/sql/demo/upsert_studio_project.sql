-- A studio project with its cover asset (NULL: none).
INSERT INTO studio.project (id, cover_asset) VALUES (%(id)s, %(cover)s)
ON CONFLICT (id) DO UPDATE SET cover_asset = excluded.cover_asset
