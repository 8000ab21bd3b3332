-- A studio asset's row (demo_app.studio), after its objects are stored; returns its uuid.
INSERT INTO studio.asset (checksum, kind, bytes) VALUES (%(checksum)s, %(kind)s, %(bytes)s) RETURNING id
