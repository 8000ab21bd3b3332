"""The collecting DAGs over a collections file (docs/reference.md §6), run as Airflow runs them (in-process DAG.test())."""
from __future__ import annotations

from tests.helpers import object_keys, run_dag
from tests.support.collections import (
    add_upload,
    backdate_marks,
    backdate_uploads,
    create_shop,
    new_schema,
    shop_yaml,
    write_collections,
)


def test_a_bad_collections_file_fails_the_first_task_of_each_dag_naming_collection_and_field(conn, s3, bucket,
                                                                                             tmp_path):
    schema = new_schema()
    create_shop(conn, schema)
    add_upload(conn, s3, schema, bucket, 1, b"x")
    bad = write_collections(tmp_path, shop_yaml(schema, bucket).replace("size: size_bytes", "size: ext"))
    env = {"BLOBGC_COLLECTIONS": str(bad)}
    for dag_id, first in (("blobgc_mark", "check_references"), ("blobgc_sweep", "plan_shards"),
                          ("blobgc_reconcile", "plan_shards")):
        run = run_dag(dag_id, env_extra=env)
        assert run.returncode == 1 and run.task_states[first] == "failed", (dag_id, run.task_states)
        assert "collection 'shop_uploads', field 'size': column 'ext' is text, not a number" in run.output
        assert not any(state == "success" for task, state in run.task_states.items()
                       if task not in (first, "retry_owed_objects")), run.task_states
    assert conn.execute(f"SELECT count(*) FROM {schema}.upload").fetchone()[0] == 1
    assert len(object_keys(s3, bucket)) == 2


def test_two_collections_in_one_bucket_and_a_run_limited_to_one_of_them(conn, s3, bucket, tmp_path):
    a, b = new_schema(), new_schema()
    for schema in (a, b):
        create_shop(conn, schema)
        for i in (1, 2):
            add_upload(conn, s3, schema, bucket, i, f"{schema}-{i}".encode(), prefix=f"{schema}/",
                       thumbs=f"{schema}-thumbs/")
    text = shop_yaml(a, bucket, name=a, prefix=f"{a}/", thumbs=f"{a}-thumbs/") + \
        shop_yaml(b, bucket, name=b, prefix=f"{b}/", thumbs=f"{b}-thumbs/").replace("collections:\n", "")
    env = {"BLOBGC_COLLECTIONS": str(write_collections(tmp_path, text))}

    marked = run_dag("blobgc_mark", conf={"collections": [a]}, env_extra=env)
    assert marked.returncode == 0, marked.output[-3000:]
    assert marked.task_states["mark_blobs[0]"] == "success" and "mark_blobs[1]" not in marked.task_states
    assert conn.execute("SELECT to_regclass(%s)", (f"blobgc.mark_{b}",)).fetchone()[0] is None
    backdate_marks(conn, a, "2 days")
    backdate_uploads(conn, a, [1, 2], "2 days")
    swept = run_dag("blobgc_sweep", conf={"collections": [a]}, env_extra=env)
    assert swept.returncode == 0, swept.output[-3000:]
    assert conn.execute(f"SELECT count(*) FROM {a}.upload").fetchone()[0] == 0
    assert conn.execute(f"SELECT count(*) FROM {b}.upload").fetchone()[0] == 2
    assert {k.split("/")[0] for k in object_keys(s3, bucket)} == {b, f"{b}-thumbs"}
