"""blobgc.core.migrate: the migration runner."""
from __future__ import annotations

from blobgc.core.migrate import apply_migrations


def test_migrations_are_idempotent(conn):
    assert apply_migrations(conn) == []
    versions = [r[0] for r in conn.execute("SELECT version FROM blobgc.schema_migration ORDER BY version")]
    assert versions[:7] == ["0001_app_schema", "0002_blobgc_schema", "0003_paste_expiry", "0004_image_crawler",
                           "0005_reconcile", "0006_generations", "0007_audit_restore"]
