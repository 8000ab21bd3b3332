"""Migration 0014: blobgc.reconcile_checkpoint's columns named for what they hold, on a database with checkpoints."""
from __future__ import annotations

import psycopg
import pytest

from blobgc.core.migrations import apply_migrations, migrations
from tests.core.test_migrate import connect, new_database  # noqa: F401 - the fixture

MIGRATION = "0014_reconcile_checkpoint_inventory_phase"


def columns(conn) -> list[str]:
    return [r[0] for r in conn.execute(
        "SELECT column_name FROM information_schema.columns WHERE table_schema = 'blobgc' "
        "AND table_name = 'reconcile_checkpoint' ORDER BY ordinal_position")]


def test_the_checkpoints_inventory_phase_is_kept_under_its_own_name_and_the_rest_goes(new_database, tmp_path):
    for version, text in migrations():  # blobgc's migrations before this one, as released
        if version < MIGRATION:
            (tmp_path / f"{version}.sql").write_text(text, encoding="utf-8")
    dsn = new_database()
    with connect(dsn) as conn:
        applied = apply_migrations(conn, folder=tmp_path)
        assert applied[-1] < MIGRATION
        conn.execute(
            "INSERT INTO blobgc.reconcile_checkpoint (run_id, shard, start_after, pending_ref, pending_keys) VALUES "
            "('r1', 'inventory:blobgc:1/2', 'pastes/ab', 'leftovers', '{}'),"
            "('r1', 'inventory:blobgc:2/2', 'pastes/cd', 'lacking', '{}'),"
            "('r1', 'pastes/a', 'pastes/a9', NULL, '{}'),"
            "('r0', 'images/3f/', 'images/3f/3f01/orig.jpg', '3f01', '{images/3f/3f01/big.jpg}')")  # an old listing
        assert apply_migrations(conn)[0] == MIGRATION  # and the later ones
        assert "inventory_phase" in columns(conn)
        assert not {"pending_ref", "pending_keys"} & set(columns(conn))
        assert dict(conn.execute("SELECT shard, inventory_phase FROM blobgc.reconcile_checkpoint").fetchall()) == {
            "inventory:blobgc:1/2": "leftovers",
            "inventory:blobgc:2/2": "lacking",
            "pastes/a": None,
            "images/3f/": None,  # a listed page's pending row id, which no run resumes from
        }
        with pytest.raises(psycopg.errors.CheckViolation):
            conn.execute("UPDATE blobgc.reconcile_checkpoint SET inventory_phase = '3f01' WHERE run_id = 'r0'")
