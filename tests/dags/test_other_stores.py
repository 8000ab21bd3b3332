"""Issue 33: the collecting DAGs on Google Cloud Storage and Azure Blob Storage, as on S3 (docs/reference.md §7).

Each scenario runs the real DAGs (`run_dag`) over a collection whose `conn_id` names the store's connection
(`blobgc_gcs`, `blobgc_azure`), against the local stack's servers for them (scripts/gcs_server.py,
scripts/azure_server.py), in a versioned bucket (container) of the test's own. Objects are made old through each
server's backdate call, rows in SQL; a key is made undeletable as its cloud allows (a GCS temporary hold, an
Azure lease), never by a stub.
"""
from __future__ import annotations

import hashlib
import json
from contextlib import ExitStack

import pytest

from tests.helpers import run_dag
from tests.support.collections import add_upload, backdate_marks, backdate_uploads, create_shop, new_schema, shop_yaml
from tests.support.stores import Store, store_of

NAME = "shop_uploads"


@pytest.fixture(params=["gcs", "azure"])
def store(request):
    yield from store_of(request.param)


def collection_text(schema: str, store: Store, name: str = NAME) -> str:
    """The shop's collection (tests/support/collections.py) in `store`'s bucket, through `store`'s connection."""
    text = shop_yaml(schema, store.bucket, name=name, prefix=f"{name}/", thumbs=f"{name}-thumbs/")
    return text.replace(f"    bucket: {store.bucket}\n", f"    bucket: {store.bucket}\n    conn_id: {store.conn_id}\n")


def shop_in(conn, store: Store, name: str = NAME) -> tuple[str, list[dict]]:
    """A shop schema with three uploads in `store` (content and thumbnail each); the product shows the first."""
    schema = new_schema()
    create_shop(conn, schema)
    uploads = [add_upload(conn, store.client, schema, store.bucket, i, f"{store.kind} {name} {i}".encode(),
                          prefix=f"{name}/", thumbs=f"{name}-thumbs/") for i in (1, 2, 3)]
    with conn.transaction():
        conn.execute(f"INSERT INTO {schema}.product (id, photo_id) VALUES (1, 1)")
    return schema, uploads


def keys_of(*uploads: dict) -> set[str]:
    return {k for u in uploads for k in (u["key"], u["thumb"])}


def ok(result) -> None:
    assert result.returncode == 0, result.output[-4000:]


def owed_keys(conn) -> set[str]:
    return {k for (k,) in conn.execute("SELECT key FROM blobgc.deleted_object WHERE owed")}


def test_mark_sweep_dry_run_from_plan_a_refused_key_retried_and_undo(conn, store, tmp_path):
    """Mark and sweep a collection on the store: the dry run deletes nothing; the real run from its plan deletes
    exactly it, but a key the store refuses (held, leased) stays owed, and the next run deletes it once allowed;
    blobgc_restore then brings back every row and object of the run from the versioned bucket, bytes and all."""
    schema, uploads = shop_in(conn, store)
    path = tmp_path / "collections.yaml"
    path.write_text(collection_text(schema, store))
    env = {"BLOBGC_COLLECTIONS": str(path), "BLOBGC_TASK_RETRIES": "0"}
    ok(run_dag("blobgc_mark", env_extra=env))
    backdate_marks(conn, NAME, "2 days")
    backdate_uploads(conn, schema, [1, 2, 3], "2 days")
    everything = keys_of(*uploads)
    contents = {k: store.read(k) for k in everything}

    dry = run_dag("blobgc_sweep", conf={"dry_run": True}, env_extra=env)
    ok(dry)
    assert conn.execute(f"SELECT count(*) FROM {schema}.upload").fetchone()[0] == 3
    assert store.keys() == everything

    refused = uploads[2]["key"]
    store.refuse_deletes(refused)
    try:
        real = run_dag("blobgc_sweep", conf={"from_plan": dry.run_id}, env_extra=env)
        ok(real)
        assert [r for (r,) in conn.execute(f"SELECT id FROM {schema}.upload")] == [1]
        assert store.keys() == keys_of(uploads[0]) | {refused}
        assert owed_keys(conn) == {refused}
    finally:
        store.allow_deletes(refused)
    with conn.transaction():  # the owed row's backoff is over, as if its wait had passed
        conn.execute("UPDATE blobgc.outbox SET next_attempt_at = now() - interval '1 second'")
    ok(run_dag("blobgc_sweep", env_extra=env))
    assert store.keys() == keys_of(uploads[0])
    assert owed_keys(conn) == set()

    restored = run_dag("blobgc_restore", conf={"run_id": real.run_id, "source_dag_id": "blobgc_sweep"},
                       env_extra=env)
    ok(restored)
    assert sorted(r for (r,) in conn.execute(f"SELECT id FROM {schema}.upload")) == [1, 2, 3]
    assert store.keys() == everything
    assert {k: store.read(k) for k in everything} == contents


def test_reconcile_by_listing_deletes_an_old_orphan_keeps_a_young_one_and_reports_an_unknown_key(conn, store,
                                                                                                  tmp_path):
    schema, uploads = shop_in(conn, store)
    path = tmp_path / "collections.yaml"
    path.write_text(collection_text(schema, store))
    old, young = (f"{NAME}/{hashlib.sha256(t).hexdigest()}.png" for t in (b"old orphan", b"young orphan"))
    unknown = f"{NAME}/not-of-the-templates-shape"
    for key in (old, young, unknown):
        store.client.put_object(Bucket=store.bucket, Key=key, Body=b"orphan")
    for key in keys_of(*uploads) | {old, unknown}:
        store.backdate(key, 2 * 3600)  # past the age floor of 1 hour; the young orphan is just written

    result = run_dag("blobgc_reconcile", conf={"min_age_hours": 1, "confirmations": 1},
                     env_extra={"BLOBGC_COLLECTIONS": str(path), "BLOBGC_TASK_RETRIES": "0"})
    ok(result)
    assert store.keys() == keys_of(*uploads) | {young, unknown}
    findings = conn.execute("SELECT kind, bucket, key FROM blobgc.reconcile_finding WHERE run_id = %s",
                            (result.run_id,)).fetchall()
    assert findings == [("unknown_key", store.bucket, unknown)]


def test_reconcile_from_an_inventory_report_in_the_clouds_own_format(conn, store, tmp_path):
    """source=inventory on the store: a report written here in its cloud's documented format (GCS Storage Insights
    in CSV, Azure Blob Inventory in Parquet; blobgc.inventory's writer; every format of both is read in
    tests/collectors/test_inventory_gcs_azure.py), found through Variable blobgc_inventory (gs://, az://), checked,
    anti-joined: the old orphan deleted, the young one kept."""
    from blobgc.core.inventory_reports import Destination
    from blobgc.inventory import report_of_bucket

    schema, uploads = shop_in(conn, store)
    path = tmp_path / "collections.yaml"
    path.write_text(collection_text(schema, store))
    old, young = (f"{NAME}/{hashlib.sha256(t).hexdigest()}.png" for t in (b"old orphan", b"young orphan"))
    for key in (old, young):
        store.client.put_object(Bucket=store.bucket, Key=key, Body=b"orphan")
    for key in keys_of(*uploads) | {old}:
        store.backdate(key, 2 * 3600)
    scheme, file_format = {"gcs": ("gs", "CSV"), "azure": ("az", "Parquet")}[store.kind]
    report_of_bucket(store.client, store.bucket, Destination(store.bucket, "inventory/", scheme),
                     file_format=file_format)
    env = {"BLOBGC_COLLECTIONS": str(path), "BLOBGC_TASK_RETRIES": "0",
           "AIRFLOW_VAR_BLOBGC_INVENTORY": json.dumps({store.bucket: f"{scheme}://{store.bucket}/inventory"})}
    result = run_dag("blobgc_reconcile", conf={"min_age_hours": 1, "confirmations": 1, "source": "inventory",
                                              "collections": [NAME]},
                     env_extra=env)
    ok(result)
    assert store.keys(f"{NAME}") == keys_of(*uploads) | {young}
    assert "inventory of" in result.output, result.output[-3000:]


def test_one_collections_file_with_an_s3_a_gcs_and_an_azure_collection_in_one_run_of_each_dag(conn, tmp_path):
    """One deployment collects from all three stores at once: each collection's garbage and orphans are deleted in
    its own store by one run each of blobgc_mark, blobgc_sweep and blobgc_reconcile; what is in use stays."""
    with ExitStack() as cleanup:
        stores = {kind: cleanup.enter_context(contextmanager_of(kind)) for kind in ("s3", "gcs", "azure")}
        text, shops, orphans = "collections:\n", {}, {}
        for kind, store in stores.items():
            name = f"shop_{kind}"
            schema, uploads = shop_in(conn, store, name)
            shops[kind] = (schema, uploads)
            text += collection_text(schema, store, name).replace("collections:\n", "")
            orphans[kind] = f"{name}/{hashlib.sha256(kind.encode()).hexdigest()}.png"
            store.client.put_object(Bucket=store.bucket, Key=orphans[kind], Body=b"orphan")
            store.backdate(orphans[kind], 2 * 3600)
        path = tmp_path / "collections.yaml"
        path.write_text(text)
        env = {"BLOBGC_COLLECTIONS": str(path), "BLOBGC_TASK_RETRIES": "0"}

        ok(run_dag("blobgc_mark", env_extra=env))
        for kind, (schema, _) in shops.items():
            backdate_marks(conn, f"shop_{kind}", "2 days")
            backdate_uploads(conn, schema, [1, 2, 3], "2 days")
        ok(run_dag("blobgc_sweep", env_extra=env))
        ok(run_dag("blobgc_reconcile", conf={"min_age_hours": 1, "confirmations": 1}, env_extra=env))

        for kind, store in stores.items():
            schema, uploads = shops[kind]
            assert [r for (r,) in conn.execute(f"SELECT id FROM {schema}.upload")] == [1], kind
            assert store.keys() == keys_of(uploads[0]), kind
        objects = dict(conn.execute("SELECT bucket, count(*) FROM blobgc.deleted_object WHERE NOT owed "
                                    "GROUP BY bucket").fetchall())
        assert objects == {store.bucket: 5 for store in stores.values()}  # 2 uploads x 2 keys, and the orphan


def contextmanager_of(kind: str):
    from contextlib import contextmanager

    return contextmanager(store_of)(kind)
