-- A clip of a studio project, using an asset.
INSERT INTO studio.clip (project_id, asset_id) VALUES (%(project_id)s, %(asset_id)s)
