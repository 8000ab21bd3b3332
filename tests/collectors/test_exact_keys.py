"""Exact keys (issue 29): an object is accounted for only when a row forms exactly its key.

The templates here are the shapes real applications use and a key read back into column values gets
wrong: `studio/{checksum}.{kind}` with kind `tar.gz`, `u/{owner}_{name}` with `alice` / `my_cat.jpg`,
and `files/{path}` with a path holding `/`. Reconcile by listing and from an inventory report, the
sweep (on the path the DAG runs: plan, gate, execute, drain) and every drain guard must agree on them.
"""
from __future__ import annotations

import uuid

import pytest

from blobgc.collectors.mark import mark_collection
from blobgc.collectors.reconcile.from_inventory import locate, reconcile_from_inventory, scope_of
from blobgc.collectors.reconcile.listing import reconcile_shard
from blobgc.collectors.reconcile.shards import collection_shards
from blobgc.collectors.sweep import execute_plan_part, plan_collection, range_part
from blobgc.core.collections import bind, parse_collections
from blobgc.core.inventory_reports import Destination
from blobgc.core.outbox import delete_owed_objects, record_deletions
from blobgc.core.gate import GateSettings, judge, record_judgement
from blobgc.core.plans import APPROVED, fix_plan
from blobgc.core.references import discover_references
from blobgc.core.runs import RunRef, ensure_run
from blobgc.inventory import report_of_bucket
from tests.helpers import NOW, object_keys
from tests.support.collections import write_collections
from tests.support.reconcile import age, execute_plan, floor_cutoff, put, sha

SCHEMA_SQL = """
CREATE SCHEMA {s};
CREATE TABLE {s}.asset (
    id          bigint PRIMARY KEY,
    checksum    text,
    kind        text,
    owner       text,
    name        text,
    path        text,
    size_bytes  bigint,
    created_at  timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX ON {s}.asset (checksum);
CREATE INDEX ON {s}.asset (owner);
CREATE INDEX ON {s}.asset (path);
CREATE TABLE {s}.used (asset_id bigint NOT NULL REFERENCES {s}.asset (id));
"""
TEMPLATES = ["studio/{checksum}.{kind}", "u/{owner}_{name}", "files/{path}"]
LIVE = {  # id -> (checksum, kind, owner, name, path); each row is referenced by {s}.used
    1: (sha("one"), "tar.gz", "alice", "my_cat.jpg", "2024/05/cat.jpg"),
    2: (sha("two"), "gz", "alice_my", "dog.jpg", None),  # no path: forms no files/ key
}


def collection_yaml(schema: str, bucket: str) -> str:
    keys = "".join(f'      - "{t}"\n' for t in TEMPLATES)
    return (f"collections:\n  {schema}:\n    table: {schema}.asset\n    id: id\n    created_at: created_at\n"
            f"    size: size_bytes\n    bucket: {bucket}\n    keys:\n{keys}    grace_hours: 24\n")


def formed(row: tuple) -> list[str]:
    checksum, kind, owner, name, path = row
    keys = [f"studio/{checksum}.{kind}", f"u/{owner}_{name}"]
    return keys + ([f"files/{path}"] if path is not None else [])


@pytest.fixture
def assets(conn, s3, bucket, tmp_path, monkeypatch):
    """The collection, its live rows and their objects, in a bucket of its own; the file is BLOBGC_COLLECTIONS."""
    schema = f"exact_{uuid.uuid4().hex[:8]}"
    with conn.transaction():
        conn.execute(SCHEMA_SQL.format(s=schema))
        for i, row in LIVE.items():
            conn.execute(f"INSERT INTO {schema}.asset (id, checksum, kind, owner, name, path, size_bytes) "
                         "VALUES (%s, %s, %s, %s, %s, %s, 5)", (i, *row))
            conn.execute(f"INSERT INTO {schema}.used VALUES (%s)", (i,))
    put(s3, bucket, *(k for row in LIVE.values() for k in formed(row)))
    text = collection_yaml(schema, bucket)
    monkeypatch.setenv("BLOBGC_COLLECTIONS", str(write_collections(tmp_path, text)))
    bound = bind(conn, parse_collections(text)[schema], default_bucket="blobgc")
    return schema, bound


LIVE_KEYS = {k for row in LIVE.values() for k in formed(row)}
# Keys no row forms, each one reading away from a live key: a parse-back would take several for live ones.
ORPHANS = {
    f"studio/{sha('one')}.tar",  # row 1 forms .tar.gz, not .tar
    f"studio/{sha('three')}.tar.gz",
    "u/alice_my_cow.jpg",  # alice/my_cow.jpg and alice_my/cow.jpg: neither is a row's pair
    "u/bob_x.jpg",
    "files/2024/05/dog.jpg",
    "files/2024/05/cat.jpg/old",
}
UNKNOWN = {"studio/no-extension", "u/no-underscore"}  # under a prefix, of no template's shape: reported, kept


def reconcile_by(source: str, conn, s3, bucket, reports, run, bound) -> None:
    if source == "listing":
        for shard in collection_shards([bound]):
            reconcile_shard(conn, s3, run, shard, bucket="blobgc", confirmations=1, cutoff=floor_cutoff(),
                            collection=bound)
    else:
        report_of_bucket(s3, bucket, Destination(reports, "inv/"), file_format="parquet", rows_per_file=4)
        report = locate(s3, {bucket: f"s3://{reports}/inv"}, bucket, None, 48)
        scope = scope_of(conn, "blobgc", [bound], bucket, seeds=False, prefixes=None)
        reconcile_from_inventory(conn, s3, s3, run, scope, report.location, confirmations=1, cutoff=floor_cutoff(),
                                 max_age_hours=48, part_rows=3)
    execute_plan(conn, run)


def new_run(conn, dag_id: str, run_id: str, dry_run: bool = False) -> RunRef:
    run = ensure_run(conn, RunRef(dag_id, run_id, dry_run), NOW)
    fix_plan(conn, run, None, 24)
    return run


@pytest.mark.parametrize("source", ["listing", "inventory"])
def test_ambiguous_separator_reconcile_deletes_exactly_the_keys_no_row_forms(conn, s3, bucket, reports, assets,
                                                                            source):
    schema, bound = assets
    put(s3, bucket, *ORPHANS, *UNKNOWN)
    age(s3, bucket)
    run = new_run(conn, "blobgc_reconcile", f"{source}-{schema}")
    reconcile_by(source, conn, s3, bucket, reports, run, bound)
    assert {r[0] for r in conn.execute("SELECT key FROM blobgc.deleted_object WHERE run_id = %s",
                                       (run.run_id,))} == ORPHANS
    assert {r[0] for r in conn.execute("SELECT key FROM blobgc.reconcile_finding WHERE run_id = %s AND "
                                       "kind = 'unknown_key'", (run.run_id,))} == UNKNOWN
    drained = delete_owed_objects(conn, s3, run)
    assert drained.objects_deleted == len(ORPHANS)
    assert object_keys(s3, bucket) == LIVE_KEYS | UNKNOWN  # every live object kept, every orphan gone


def test_ambiguous_separator_listing_and_inventory_plan_the_same_orphans(conn, s3, bucket, reports, assets):
    schema, bound = assets
    put(s3, bucket, *ORPHANS, *UNKNOWN)
    age(s3, bucket)
    plans = {}
    for source in ("listing", "inventory"):
        run = new_run(conn, "blobgc_reconcile", f"dry-{source}-{schema}", dry_run=True)
        reconcile_by(source, conn, s3, bucket, reports, run, bound)
        plans[source] = {r[0] for r in conn.execute(
            "SELECT unnest(keys) FROM blobgc.plan_item WHERE run_id = %s", (run.run_id,))}
    assert plans["listing"] == plans["inventory"] == ORPHANS


def sweep(conn, s3, bound, run_id: str):
    """The sweep as its DAG runs it: mark, plan, the gate's approval, execute, drain."""
    refs = discover_references(conn, bound.collection.table, extra_sql=[], id_column="id")
    mark_collection(conn, bound, refs)
    with conn.transaction():
        conn.execute(f"UPDATE blobgc.mark_{bound.name} SET unused_since = now() - interval '2 days'")
        conn.execute(f"UPDATE {bound.collection.table} SET created_at = now() - interval '2 days'")
    run = new_run(conn, "blobgc_sweep", run_id)
    cutoff = floor_cutoff()
    plan_collection(conn, run, bound, refs, cutoff=cutoff)
    record_judgement(conn, run, judge(conn, run, GateSettings()), APPROVED, "alice")
    executed = execute_plan_part(conn, run, bound, refs, cutoff=cutoff, part=range_part((None, None), bound.name))
    return run, executed, delete_owed_objects(conn, s3, run)


def test_ambiguous_separator_the_sweep_keeps_a_shared_key_that_another_row_forms(conn, s3, bucket, assets):
    schema, bound = assets
    with conn.transaction():  # row 3 shares row 1's content object, and is used by nothing
        conn.execute(f"INSERT INTO {schema}.asset (id, checksum, kind, path) VALUES (3, %s, 'tar.gz', 'three.bin')",
                     (sha("one"),))
    put(s3, bucket, "files/three.bin")
    run, executed, drained = sweep(conn, s3, bound, f"shared-{schema}")
    assert executed.rows_deleted == 1
    assert {r[0] for r in conn.execute("SELECT key FROM blobgc.deleted_object WHERE run_id = %s AND kept_at IS NOT NULL",
                                       (run.run_id,))} == {f"studio/{sha('one')}.tar.gz"}
    assert object_keys(s3, bucket) == LIVE_KEYS  # row 1's object stays; row 3's own file is gone
    assert drained.objects_deleted == 1


def test_unparsable_owed_key_a_value_holding_a_slash_is_deleted_and_a_null_forms_no_key(conn, s3, bucket, assets):
    schema, bound = assets
    with conn.transaction():  # unused: a path holding /, and no owner or name (NULL: no u/ key at all)
        conn.execute(f"INSERT INTO {schema}.asset (id, checksum, kind, path) VALUES (4, %s, 'bin', '2023/01/x.bin')",
                     (sha("four"),))
    put(s3, bucket, f"studio/{sha('four')}.bin", "files/2023/01/x.bin", "u/None_None")
    run, executed, drained = sweep(conn, s3, bound, f"slash-{schema}")
    owed = {r[0] for r in conn.execute("SELECT key FROM blobgc.deleted_object WHERE run_id = %s", (run.run_id,))}
    assert owed == {f"studio/{sha('four')}.bin", "files/2023/01/x.bin"}  # never u/None_None
    assert (drained.objects_deleted, drained.owed_after) == (2, 0)
    assert object_keys(s3, bucket) == LIVE_KEYS | {"u/None_None"}


def owe(conn, source: str, bucket: str, keys: list[str], run_id: str) -> RunRef:
    run = ensure_run(conn, RunRef("blobgc_sweep", run_id), NOW)
    with conn.transaction():
        record_deletions(conn, run, source=source, bucket=bucket, keys=keys, sizes=[None] * len(keys))
    return run


def test_wrong_default_bucket_the_guard_reads_the_file_with_the_deployments_default_bucket(conn, s3, bucket,
                                                                                          tmp_path, monkeypatch):
    # a: u/{id} in the default bucket; c: u/{id} in `bucket`. Valid, but not with `bucket` as the default.
    text = ("collections:\n  a:\n    table: app.blob\n    id: id\n    keys: ['u/{id}']\n"
            f"  c:\n    table: app.content\n    id: content_hash\n    bucket: {bucket}\n    keys: ['u/{{content_hash}}']\n")
    monkeypatch.setenv("BLOBGC_COLLECTIONS", str(write_collections(tmp_path, text)))
    put(s3, bucket, "u/gone")
    run = owe(conn, "collection:c", bucket, ["u/gone"], "default-bucket")
    drained = delete_owed_objects(conn, s3, run, default_bucket="blobgc")
    assert (drained.objects_deleted, drained.owed_after, drained.parked) == (1, 0, 0)
    assert object_keys(s3, bucket) == set()


def test_wrong_default_bucket_keys_of_an_undeclared_collection_stay_owed_parked_and_the_rest_drains(
        conn, s3, bucket, assets):
    schema, _bound = assets
    put(s3, bucket, "old/1", "files/none-forms-this")
    stale = owe(conn, "collection:no_longer_declared", bucket, ["old/1"], "stale")
    owe(conn, f"collection:{schema}", bucket, ["files/none-forms-this"], "fresh")
    drained = delete_owed_objects(conn, s3, stale)
    assert drained.objects_deleted == 1 and drained.parked == 1
    assert object_keys(s3, bucket) == LIVE_KEYS | {"old/1"}
    row = conn.execute("SELECT keys, parked_at IS NOT NULL, last_errors::text FROM blobgc.outbox").fetchone()
    assert row[0] == ["old/1"] and row[1] and "'no_longer_declared' is no longer declared" in row[2]


@pytest.mark.parametrize(("source", "key"), [
    ("app.content", "pastes/abc123"),  # seed 002's own example hash
    ("app.content", "pastes/Sha1:ABC/def"),
    ("app.blob", "blobs/a.b/c/raw"),
    ("gen.blob", "mail/inbox/1"),
    ("app.image", "images/x/x/thumb.jpg"),
])
def test_narrow_seed_layout_an_owed_key_of_any_column_value_is_deleted(conn, s3, bucket, source, key):
    put(s3, bucket, key)
    run = owe(conn, source, bucket, [key], f"seed-{uuid.uuid4().hex[:6]}")
    drained = delete_owed_objects(conn, s3, run)
    assert (drained.objects_deleted, drained.owed_after) == (1, 0)
    assert object_keys(s3, bucket) == set()


def test_narrow_seed_layout_an_owed_key_whose_row_exists_again_is_kept(conn, s3, bucket):
    with conn.transaction():
        conn.execute("INSERT INTO app.content (content_hash, ref_count, size_bytes) VALUES ('abc123', 1, 5)")
    put(s3, bucket, "pastes/abc123")
    run = owe(conn, "app.content", bucket, ["pastes/abc123"], "seed-kept")
    drained = delete_owed_objects(conn, s3, run)
    assert (drained.objects_deleted, drained.owed_after) == (0, 0)
    assert object_keys(s3, bucket) == {"pastes/abc123"}


def test_ambiguous_separator_a_domain_column_holding_an_empty_value_forms_its_key(conn, s3, bucket, tmp_path,
                                                                                 monkeypatch):
    """A domain over text (format_type names the domain) may hold '': `u/{owner}_{name}` with owner `a_b` and name
    '' forms `u/a_b_`, whose only other reading (a / b_) no row has. The key is the row's, not an orphan."""
    schema = f"domain_{uuid.uuid4().hex[:8]}"
    with conn.transaction():
        conn.execute(f"CREATE SCHEMA {schema}")
        conn.execute(f"CREATE DOMAIN {schema}.label AS text")
        conn.execute(f"CREATE TABLE {schema}.tag (id bigint PRIMARY KEY, owner text, name {schema}.label)")
        conn.execute(f"CREATE INDEX ON {schema}.tag (owner)")
        conn.execute(f"INSERT INTO {schema}.tag VALUES (1, 'a_b', '')")
    text = (f"collections:\n  {schema}:\n    table: {schema}.tag\n    id: id\n    bucket: {bucket}\n"
            "    keys: ['u/{owner}_{name}']\n")
    monkeypatch.setenv("BLOBGC_COLLECTIONS", str(write_collections(tmp_path, text)))
    bound = bind(conn, parse_collections(text)[schema], default_bucket="blobgc")
    put(s3, bucket, "u/a_b_", "u/c_")
    age(s3, bucket)
    run = new_run(conn, "blobgc_reconcile", f"domain-{schema}")
    reconcile_by("listing", conn, s3, bucket, None, run, bound)
    delete_owed_objects(conn, s3, run)
    assert object_keys(s3, bucket) == {"u/a_b_"}  # u/c_ (owner c, name '') has no row: an orphan


def test_wrong_default_bucket_a_key_owed_in_a_bucket_its_collection_no_longer_uses_stays_owed(conn, s3, bucket,
                                                                                             assets):
    """The collection's rows judge keys of its own bucket only: a key owed when the collection lived in another
    bucket (the file changed since) could be another collection's there now."""
    put(s3, bucket, "files/moved")
    schema, _bound = assets
    run = owe(conn, f"collection:{schema}", "blobgc", ["files/moved"], "moved")
    drained = delete_owed_objects(conn, s3, run, default_bucket="blobgc")
    assert (drained.objects_deleted, drained.parked) == (0, 1)
    errors = conn.execute("SELECT last_errors::text FROM blobgc.outbox").fetchone()[0]
    assert f"keeps its objects in bucket '{bucket}' now, not in 'blobgc'" in errors


def test_wrong_default_bucket_a_database_error_while_judging_leaves_the_keys_owed_unparked_and_the_rest_drains(
        conn, s3, bucket, assets, monkeypatch):
    schema, _bound = assets
    put(s3, bucket, "files/judged-later", "pastes/gone")
    owe(conn, f"collection:{schema}", bucket, ["files/judged-later"], "db-error")
    run = owe(conn, "app.content", bucket, ["pastes/gone"], "db-error-2")
    import blobgc.core.collections as collections_module

    def failing(conn, *_args, **_kwargs):
        conn.execute("SELECT 1/0")

    monkeypatch.setattr(collections_module, "accounted_keys", failing)
    drained = delete_owed_objects(conn, s3, run)
    assert (drained.objects_deleted, drained.parked, drained.owed_after) == (1, 0, 1)
    assert object_keys(s3, bucket) - LIVE_KEYS == {"files/judged-later"}
    row = conn.execute("SELECT parked_at IS NULL, last_errors::text FROM blobgc.outbox").fetchone()
    assert row[0] and "could not be judged" in row[1] and "division by zero" in row[1]
