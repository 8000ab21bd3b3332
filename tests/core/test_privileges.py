"""blobgc.core.privileges: a run's missing privileges, each named with the GRANT that gives it (issue 30).

Each test works in a database of its own with a new role (tests/support/grants.py): the README's least-privilege
block, applied exactly, is what most of them start from, and `check_dag_privileges` is what every DAG's first task
calls (`blobgc.dag_kit.steps.open_step`).
"""
from __future__ import annotations

import contextlib
import os
import subprocess
import sys
from collections.abc import Iterator

import psycopg
import pytest
from psycopg.conninfo import make_conninfo

from blobgc.collectors.mark import mark_collection
from blobgc.core.collections import bind, load_collections
from blobgc.core.privileges import (
    MissingPrivileges,
    check_migrate_privileges,
    check_privileges,
    dag_needs,
    named_relations,
    relation_names,
)
from blobgc.dag_kit.privileges import check_dag_privileges
from tests.helpers import ROOT
from tests.support.sweep import references_of
from tests.support.grants import (
    REFERENCES_QUERY,
    drop_role_database,
    grants,
    new_role_database,
    readme_block,
    revoking,
    with_names,
)

COLLECTION_DAGS = ("blobgc_mark", "blobgc_sweep", "blobgc_reconcile", "blobgc_restore")
COLLECTIONS_YAML = f"""
collections:
  uploads:
    table: shop.upload
    id: id
    size: size_bytes
    keys: ['uploads/{{id}}/raw']
    references: ["{REFERENCES_QUERY}"]
"""
# README grant (with role `blobgc`) -> each DAG's GRANTs once it is revoked ({r}: the role); a DAG left out lacks
# nothing then. `migrate` is python -m blobgc.migrate. The role owns blobgc's tables (it migrated them), and
# collection uploads has not been marked yet (its first real mark creates blobgc.mark_uploads).
REVOKED = {
    "GRANT USAGE, CREATE ON SCHEMA blobgc TO blobgc;": {
        "blobgc_mark": ["GRANT USAGE, CREATE ON SCHEMA blobgc TO {r};"],
        "blobgc_sweep": ["GRANT USAGE ON SCHEMA blobgc TO {r};"],
        "blobgc_reconcile": ["GRANT USAGE ON SCHEMA blobgc TO {r};"],
        "blobgc_restore": ["GRANT USAGE ON SCHEMA blobgc TO {r};"],
        "migrate": ["GRANT USAGE, CREATE ON SCHEMA blobgc TO {r};"]},
    "GRANT USAGE ON SCHEMA shop TO blobgc;": {dag: ["GRANT USAGE ON SCHEMA shop TO {r};"] for dag in COLLECTION_DAGS},
    "GRANT SELECT, INSERT, UPDATE, DELETE ON shop.upload TO blobgc;": {
        "blobgc_mark": ["GRANT SELECT ON shop.upload TO {r};"],
        "blobgc_sweep": ["GRANT SELECT, UPDATE, DELETE ON shop.upload TO {r};"],
        "blobgc_reconcile": ["GRANT SELECT ON shop.upload TO {r};"],
        "blobgc_restore": ["GRANT SELECT, INSERT ON shop.upload TO {r};"]},
    "GRANT SELECT ON shop.post, shop.attachment TO blobgc;": {  # restore checks no reference: it needs neither
        dag: ["GRANT SELECT ON shop.post, shop.attachment TO {r};"] for dag in COLLECTION_DAGS[:3]},
}


@pytest.fixture
def admin_dsn(stack) -> str:
    return stack["BLOBGC_PG_DSN"]


@pytest.fixture
def collections_file(tmp_path, monkeypatch):
    path = tmp_path / "collections.yaml"
    path.write_text(COLLECTIONS_YAML)
    monkeypatch.setenv("BLOBGC_COLLECTIONS", str(path))
    return path


@pytest.fixture
def readme_role(admin_dsn, collections_file):
    """A database of its own and a new role with exactly the README's block, migrated as that role."""
    made = []

    def make(*, migrate: bool = True) -> tuple[str, str, str]:
        made.append(new_role_database(admin_dsn, migrate=migrate))
        return made[-1]

    yield make
    for _dsn, role, database in made:
        drop_role_database(admin_dsn, role, database)


def admin_of(admin_dsn: str, database: str) -> psycopg.Connection:
    return psycopg.connect(make_conninfo(admin_dsn, dbname=database), autocommit=True)


def check(dsn: str, dag_id: str, **params) -> None:
    """What the DAG's first task checks, with `params` (collections: all, a real run, by default)."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        if dag_id == "migrate":
            check_migrate_privileges(conn)
        else:
            check_dag_privileges(conn, dag_id, {"collections": None, "dry_run": False, **params})


@contextlib.contextmanager
def role_with_blobgcs_own_tables(admin_dsn: str, database: str, name: str, *grants: str
                                 ) -> Iterator[tuple[str, str]]:
    """A new login role holding blobgc's own schema and tables, USAGE on schema app and `grants` ("{role}" filled
    in): (its name, its DSN). Dropped afterwards."""
    role = f"blobgc_{name}_{os.getpid()}"
    with admin_of(admin_dsn, database) as admin:
        admin.execute(f"DROP ROLE IF EXISTS {role}")
        admin.execute(f"CREATE ROLE {role} LOGIN")
        admin.execute(f"GRANT USAGE ON SCHEMA app, blobgc TO {role}")
        admin.execute(f"GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA blobgc TO {role}")
        admin.execute(f"GRANT USAGE ON ALL SEQUENCES IN SCHEMA blobgc TO {role}")
        for grant in grants:
            admin.execute(grant.format(role=role))
    try:
        yield role, make_conninfo(admin_dsn, dbname=database, user=role)
    finally:
        with admin_of(admin_dsn, database) as admin:
            admin.execute(f"DROP OWNED BY {role}")
            admin.execute(f"DROP ROLE {role}")


def test_the_readme_grants_are_every_privilege_the_collection_dags_and_migrate_need(readme_role):
    dsn, role, _database = readme_role()
    with psycopg.connect(dsn) as conn:
        assert not conn.execute("SELECT has_database_privilege(current_database(), 'CREATE')").fetchone()[0]
    for dag_id in (*COLLECTION_DAGS, "migrate"):
        check(dsn, dag_id)
    for dag_id in COLLECTION_DAGS:
        check(dsn, dag_id, dry_run=True, collections=["uploads"])


def test_the_readme_block_has_exactly_the_grants_the_revocation_test_knows():
    assert sorted(REVOKED) == sorted(s for s in grants(readme_block()) if "CONNECT" not in s)


@pytest.mark.parametrize("grant", sorted(REVOKED))
def test_each_readme_grant_revoked_is_named_with_its_grant_by_every_dag_that_needs_it(readme_role, admin_dsn, grant):
    dsn, role, database = readme_role()
    with admin_of(admin_dsn, database) as admin:
        admin.execute(revoking(with_names(grant, role, database)))
    for dag_id in (*COLLECTION_DAGS, "migrate"):
        expected = [g.format(r=role) for g in REVOKED[grant].get(dag_id, [])]
        if not expected:
            check(dsn, dag_id)
            continue
        for dry_run in (False, True):
            with pytest.raises(MissingPrivileges) as refused:
                check(dsn, dag_id, dry_run=dry_run)
            assert refused.value.grants == expected, (dag_id, str(refused.value))
            for statement in expected:
                assert statement in str(refused.value)
    with admin_of(admin_dsn, database) as admin:  # the GRANTs named are exactly what fixes it
        for statement in {g.format(r=role) for gs in REVOKED[grant].values() for g in gs}:
            admin.execute(statement)
    for dag_id in (*COLLECTION_DAGS, "migrate"):
        check(dsn, dag_id)


def test_without_the_readme_connect_grant_the_role_cannot_connect(readme_role, admin_dsn):
    (connect,) = [s for s in grants(readme_block()) if "CONNECT" in s]
    dsn, role, database = readme_role(migrate=False)
    with admin_of(admin_dsn, database) as admin:
        admin.execute(revoking(with_names(connect, role, database)))
    with pytest.raises(psycopg.OperationalError, match="CONNECT privilege"):
        psycopg.connect(dsn).close()


def test_each_missing_privilege_is_named_with_why_the_run_needs_it(readme_role, admin_dsn):
    dsn, role, database = readme_role()
    with admin_of(admin_dsn, database) as admin:
        admin.execute(f"REVOKE UPDATE, DELETE ON shop.upload FROM {role}")
        admin.execute(f"REVOKE SELECT ON shop.attachment FROM {role}")
    with pytest.raises(MissingPrivileges) as refused:
        check(dsn, "blobgc_sweep", dry_run=True)
    assert str(refused.value) == "\n".join([
        f"blobgc_sweep cannot run as role {role}: it lacks 3 privileges it needs (a dry run is checked for what the "
        "real run needs, so that it proves the real run can run):",
        "  - UPDATE on table shop.upload: the real blobgc_sweep claims the rows of collection 'uploads' with "
        "SELECT … FOR UPDATE SKIP LOCKED",
        "  - DELETE on table shop.upload: the real blobgc_sweep deletes the rows of collection 'uploads'",
        "  - SELECT on table shop.attachment: references[0] of collection 'uploads' reads it",
        "Grant them (as the owner of each object, or a superuser), then run it again:",
        f"  GRANT UPDATE, DELETE ON shop.upload TO {role};",
        f"  GRANT SELECT ON shop.attachment TO {role};"])


def test_migrate_without_schema_blobgc_needs_create_on_the_database_and_says_so_without_a_traceback(
        readme_role, admin_dsn):
    dsn, role, database = readme_role(migrate=False)
    with admin_of(admin_dsn, database) as admin:
        admin.execute("DROP SCHEMA blobgc")
    with pytest.raises(MissingPrivileges) as refused:
        check(dsn, "migrate")
    assert refused.value.grants == [f"GRANT CREATE ON DATABASE {database} TO {role};"]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "plugins"), os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run([sys.executable, "-m", "blobgc.migrate", "--dsn", dsn], env=env, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 2, done.stdout + done.stderr
    assert "Traceback" not in done.stderr
    assert f"python -m blobgc.migrate creates schema blobgc\n" in done.stderr
    assert f"  GRANT CREATE ON DATABASE {database} TO {role};" in done.stderr
    with admin_of(admin_dsn, database) as admin:
        admin.execute(f"GRANT CREATE ON DATABASE {database} TO {role}")
    done = subprocess.run([sys.executable, "-m", "blobgc.migrate", "--dsn", dsn], env=env, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    with psycopg.connect(dsn) as conn:
        assert conn.execute("SELECT nspowner::regrole::text FROM pg_namespace WHERE nspname = 'blobgc'"
                            ).fetchone()[0] == role


def test_blobgc_tables_another_role_migrated_are_named_in_one_grant_with_their_sequences(readme_role, admin_dsn):
    dsn, role, database = readme_role(migrate=False)
    with admin_of(admin_dsn, database) as admin:
        from blobgc.core.migrations import apply_migrations

        apply_migrations(admin)  # as the superuser: blobgc's tables are not the role's
        tables = [r[0] for r in admin.execute("SELECT quote_ident(tablename) FROM pg_tables WHERE schemaname = "
                                              "'blobgc' ORDER BY tablename")]
        sequences = [r[0] for r in admin.execute("SELECT quote_ident(sequencename) FROM pg_sequences WHERE "
                                                 "schemaname = 'blobgc' ORDER BY sequencename")]
    assert tables and sequences
    with pytest.raises(MissingPrivileges) as refused:
        check(dsn, "blobgc_reconcile")
    expected = [f"GRANT SELECT, INSERT, UPDATE, DELETE ON {', '.join('blobgc.' + t for t in tables)} TO {role};",
                f"GRANT USAGE ON SEQUENCE {', '.join('blobgc.' + s for s in sequences)} TO {role};"]
    assert [g for g in refused.value.grants if " ON SEQUENCE " in g or "INSERT" in g] == expected
    with admin_of(admin_dsn, database) as admin:
        for statement in refused.value.grants:
            admin.execute(statement)
    check(dsn, "blobgc_reconcile")


def test_app_blobs_mark_needs_its_own_columns_and_the_page_usages(conn, admin_dsn, collections_file):
    """The demo's app_blob: the mark writes app.blob's own columns and removes stale page usages."""
    collections_file.write_text("collections:\n  app_blob:\n    table: app.blob\n    id: id\n"
                                "    created_at: created_at\n    size: size_bytes\n"
                                "    keys: ['blobs/{id}/raw', 'blobs/{id}/thumbnail']\n")
    with role_with_blobgcs_own_tables(admin_dsn, conn.info.dbname, "app",
                                      "GRANT SELECT ON ALL TABLES IN SCHEMA app TO {role}") as (role, dsn):
        with pytest.raises(MissingPrivileges) as refused:
            check(dsn, "blobgc_mark", collections=["app_blob"])
        assert refused.value.grants == [f"GRANT UPDATE ON app.blob TO {role};",
                                        f"GRANT UPDATE, DELETE ON app.page_using_blob TO {role};"]


def test_a_seed_dag_names_what_it_lacks_on_its_tables(conn, admin_dsn):
    with role_with_blobgcs_own_tables(admin_dsn, conn.info.dbname, "seed",
                                      "GRANT SELECT, UPDATE ON app.paste TO {role}",
                                      "GRANT SELECT, INSERT, UPDATE, DELETE ON app.content TO {role}") as (role, dsn):
        with pytest.raises(MissingPrivileges) as refused:
            check(dsn, "blobgc_paste_expiry")
        assert refused.value.grants == [f"GRANT DELETE ON app.paste TO {role};"]
        assert "DELETE on table app.paste: blobgc_paste_expiry collects from app.paste" in str(refused.value)
        check(dsn, "blobgc_media_staging")  # no table of the application's: blobgc's own are enough


def test_the_relations_a_references_query_reads_are_found_qualified_quoted_or_on_the_search_path(conn):
    with conn.transaction(force_rollback=True):
        conn.execute('CREATE SCHEMA "Odd Shop"; CREATE TABLE "Odd Shop"."Legacy Ref" (upload_id bigint); '
                     "CREATE TABLE public.legacy_ref (upload_id bigint)")
        query = ('SELECT r.upload_id FROM "Odd Shop"."Legacy Ref" AS r JOIN legacy_ref l USING (upload_id) '
                 "WHERE r.upload_id IN (SELECT target_id FROM shop_x.nothing_here) AND EXTRACT(year FROM now()) > 0")
        assert relation_names(query) == [("r", "upload_id"), ("Odd Shop", "Legacy Ref"), ("shop_x", "nothing_here"),
                                         (None, "legacy_ref")]  # no name of a column, a function or EXTRACT's
        assert named_relations(conn, relation_names(query)) == [("Odd Shop", "Legacy Ref"), ("public", "legacy_ref")]


def test_a_missing_grant_on_an_oddly_named_table_is_a_grant_that_runs(readme_role, admin_dsn, collections_file):
    dsn, role, database = readme_role()
    with admin_of(admin_dsn, database) as admin:
        admin.execute('CREATE SCHEMA "Odd Shop"; CREATE TABLE "Odd Shop"."Legacy Ref" (upload_id bigint)')
    collections_file.write_text(COLLECTIONS_YAML.replace(
        "references: [", "references: ['SELECT upload_id FROM \"Odd Shop\".\"Legacy Ref\"', "))
    with pytest.raises(MissingPrivileges) as refused:
        check(dsn, "blobgc_mark")
    assert refused.value.grants == [f'GRANT USAGE ON SCHEMA "Odd Shop" TO {role};',
                                    f'GRANT SELECT ON "Odd Shop"."Legacy Ref" TO {role};']
    with admin_of(admin_dsn, database) as admin:
        for statement in refused.value.grants:
            admin.execute(statement)
    check(dsn, "blobgc_mark")


def test_the_check_is_one_round_trip_whatever_it_asks(conn):
    needs = dag_needs(conn, "blobgc_generations")
    assert len(needs) > 50
    sent = []
    with conn.transaction(force_rollback=True):
        original = conn.execute

        def counting(*args, **kwargs):
            sent.append(args[0])
            return original(*args, **kwargs)

        conn.execute = counting  # type: ignore[method-assign]
        try:
            check_privileges(conn, "blobgc_generations", needs)
        finally:
            conn.execute = original  # type: ignore[method-assign]
    assert len(sent) == 1


def test_a_restore_needs_no_collections_file_unless_it_names_collections(readme_role, collections_file):
    """A seed DAG's run is restored without one; the DAGs that read the file still fail on it, naming it."""
    from blobgc.core.collections import CollectionsError

    dsn, _role, _database = readme_role()
    collections_file.unlink()
    check(dsn, "blobgc_restore")
    for dag_id, params in (("blobgc_restore", {"collections": ["uploads"]}), ("blobgc_mark", {})):
        with pytest.raises(CollectionsError, match=f"cannot read the collections file {collections_file}"):
            check(dsn, dag_id, **params)


def test_a_schema_the_role_may_not_use_stops_only_the_dag_that_reads_it(readme_role, admin_dsn):
    """A `gen` schema of someone else's, holding a table of a seed layout's name: mark and its check of the
    collections go on (tables are looked up by name, not through to_regclass, which fails on such a schema);
    reconcile, which would list that layout's objects, names what it lacks."""
    from blobgc.dag_kit.collections import checked_collections

    dsn, role, database = readme_role()
    with admin_of(admin_dsn, database) as admin:
        admin.execute("CREATE SCHEMA gen; CREATE TABLE gen.blob (blob_id text PRIMARY KEY)")
    check(dsn, "blobgc_mark")
    with psycopg.connect(dsn) as conn:
        assert [b.name for b in checked_collections(conn, {"collections": None})] == ["uploads"]
    with pytest.raises(MissingPrivileges) as refused:
        check(dsn, "blobgc_reconcile")
    assert refused.value.grants == [f"GRANT USAGE ON SCHEMA gen TO {role};", f"GRANT SELECT ON gen.blob TO {role};"]
    check(dsn, "blobgc_reconcile", collections=["uploads"])  # its collections' objects only: no seed layout


def test_a_mark_after_the_first_needs_no_create_on_schema_blobgc(readme_role, admin_dsn, collections_file):
    """The first real mark creates blobgc.mark_uploads (CREATE on schema blobgc, asked for then); later marks do not
    run CREATE TABLE IF NOT EXISTS, which PostgreSQL refuses without CREATE even when the table exists."""
    dsn, role, database = readme_role()

    def mark() -> int:
        with psycopg.connect(dsn, autocommit=True) as conn:
            bound = bind(conn, load_collections(default_bucket="blobgc")["uploads"], default_bucket="blobgc")
            return mark_collection(conn, bound, references_of(conn, bound)).became_unused

    with admin_of(admin_dsn, database) as admin:
        admin.execute("INSERT INTO shop.upload SELECT i, 10 * i FROM generate_series(1, 3) AS i")
    assert mark() == 3
    with admin_of(admin_dsn, database) as admin:
        admin.execute(f"REVOKE CREATE ON SCHEMA blobgc FROM {role}")
    check(dsn, "blobgc_mark")  # the table exists: CREATE is no longer asked for...
    assert mark() == 0  # ...nor needed
