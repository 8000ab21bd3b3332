"""demo_app.migrate: the demo application's own migrations (schemas app and gen), recorded in app.schema_migration.

The helpers and the `new_database` fixture are tests/core/test_migrate.py's, which also migrates a database from
before the split with both runners.
"""
from __future__ import annotations

from blobgc.core.migrations import apply_migrations
from demo_app.migrate import FOLDER, TABLE, apply_app_migrations
from tests.core import test_migrate as core
from tests.core.test_migrate import connect, migrate_the_old_way, recorded, schema_names, schema_of, versions

new_database = core.new_database  # the fixture


def test_app_migrations_are_idempotent(conn):
    assert apply_app_migrations(conn) == []
    assert recorded(conn, TABLE) == versions(FOLDER)


def test_the_app_migrates_into_a_database_without_blobgc(new_database):
    with connect(new_database()) as conn:
        before = schema_names(conn)
        assert apply_app_migrations(conn) == versions(FOLDER)
        assert schema_names(conn) - before == {"app", "gen", "studio"}


def test_a_database_migrated_before_0006_gets_the_app_parts_it_lacks(new_database):
    """Migrated with the old 0001..0005 only: blobgc's 0006 and 0008 now come without the app's parts, which the
    app's 0004 and 0005 bring."""
    fresh, old = new_database(), new_database()
    with connect(fresh) as conn:
        apply_migrations(conn)
        apply_app_migrations(conn)
        expected = schema_of(conn, "app", "gen", "blobgc")
    with connect(old) as conn:
        migrate_the_old_way(conn, ["0001_app_schema", "0002_blobgc_schema", "0003_paste_expiry",
                                   "0004_image_crawler", "0005_reconcile"])
        assert apply_migrations(conn) == [v for v in versions() if v[:4] > "0005"]
        assert apply_app_migrations(conn) == ["0004_mail_blob_sizes", "0005_image_unbound_stamp", "0006_studio_schema"]
        assert recorded(conn, TABLE) == versions(FOLDER)
        assert schema_of(conn, "app", "gen", "blobgc") == expected


def test_the_app_may_migrate_before_blobgc_on_an_old_database(new_database):
    with connect(new_database()) as conn:
        migrate_the_old_way(conn, ["0001_app_schema", "0002_blobgc_schema", "0003_paste_expiry"])
        assert apply_app_migrations(conn) == ["0003_crawl_requests", "0004_mail_blob_sizes",
                                              "0005_image_unbound_stamp", "0006_studio_schema"]
        assert apply_migrations(conn)[0] == "0004_image_crawler"
        assert apply_app_migrations(conn) == []
