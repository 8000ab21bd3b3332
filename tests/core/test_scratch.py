"""The scratch location of a run's shared files (blobgc.core.scratch): Variable blobgc_scratch, and its folder."""
from __future__ import annotations

import pytest

from blobgc.core.scratch import Location, default_location, delete_tree, fetch_tree, is_scratch, keys_below, \
    put_tree, run_folder
from blobgc.core.settings import ConfigurationError


@pytest.mark.parametrize(("text", "expected"), [
    ("s3://blobgc-scratch", Location("s3", "blobgc-scratch", "")),
    ("s3://ops-bucket/blobgc/scratch/", Location("s3", "ops-bucket", "blobgc/scratch/")),
    ("gs://my_ops_bucket/tmp", Location("gs", "my_ops_bucket", "tmp/")),
    ("az://scratch/x", Location("az", "scratch", "x/")),
])
def test_a_scratch_location_is_a_folder_of_a_bucket_in_any_store(text, expected):
    assert Location.parse(text) == expected
    assert str(Location.parse(str(expected))) == str(expected)


@pytest.mark.parametrize("text", ["/tmp/scratch", "s3://", "http://bucket/x", "s3://UPPER/x"])
def test_a_bad_scratch_location_names_the_variable_and_the_forms_it_takes(text):
    with pytest.raises(ConfigurationError, match=r"Variable blobgc_scratch .*s3://<bucket>/<prefix>"):
        Location.parse(text)


def test_a_runs_folder_is_below_its_dag_and_run_and_the_default_is_never_judged_by_reconcile():
    root = default_location("s3", "reports")
    folder = run_folder(root, "blobgc_reconcile", "manual__2026-11-28T03:00:00+00:00").below("uploads")
    assert str(folder) == "s3://reports/.blobgc-scratch/blobgc_reconcile/manual__2026-11-28T03:00:00+00:00/uploads/"
    assert is_scratch(folder.prefix + "inventory/part=0/data_0.parquet")
    assert not is_scratch("uploads/.blobgc-scratch/x")


def test_files_put_fetched_and_deleted_below_a_folder_keep_their_paths_and_spare_the_kept_run(s3, bucket, tmp_path):
    source = tmp_path / "parts"
    for relative in ("inventory/part=0/data_0.parquet", "inventory/part=1/data_0.parquet",
                     "accounted/part=0/data_0.parquet"):
        (source / relative).parent.mkdir(parents=True, exist_ok=True)
        (source / relative).write_bytes(relative.encode())
    root = Location("s3", bucket, ".blobgc-scratch/")
    this, earlier = run_folder(root, "d", "run-2"), run_folder(root, "d", "run-1")
    assert put_tree(s3, source, this) == sum(len(p.encode()) for p in (
        "inventory/part=0/data_0.parquet", "inventory/part=1/data_0.parquet", "accounted/part=0/data_0.parquet"))
    put_tree(s3, source, earlier)
    fetched = fetch_tree(s3, this.below("inventory", "part=1"), tmp_path / "back")
    assert [p.read_bytes() for p in fetched] == [b"inventory/part=1/data_0.parquet"]
    assert delete_tree(s3, root.below("d"), keep=this.prefix) == 3  # an earlier run's leftovers
    assert sorted(keys_below(s3, root)) == sorted(this.prefix + p for p in (
        "inventory/part=0/data_0.parquet", "inventory/part=1/data_0.parquet", "accounted/part=0/data_0.parquet"))


def test_what_earlier_runs_left_is_deleted_only_once_older_than_written_before(s3, bucket, tmp_path):
    from datetime import datetime, timedelta, timezone

    from tests.helpers import backdate_object

    root = Location("s3", bucket, ".blobgc-scratch/")
    for run, days in (("old", 8), ("recent", 2)):
        key = run_folder(root, "d", run).prefix + "inventory/part=0/data_0.parquet"
        s3.put_object(Bucket=bucket, Key=key, Body=b"x")
        backdate_object(bucket, key, days * 86400)
    deleted = delete_tree(s3, root.below("d"), written_before=datetime.now(timezone.utc) - timedelta(days=7))
    assert deleted == 1 and [k.split("/")[2] for k in keys_below(s3, root)] == ["recent"]


def test_a_scratch_location_blobgc_may_not_write_names_the_variable(s3, bucket, tmp_path):
    import json

    (tmp_path / "part=0").mkdir()
    (tmp_path / "part=0" / "f.parquet").write_bytes(b"x")
    s3.put_bucket_policy(Bucket=bucket, Policy=json.dumps({"Version": "2012-10-17", "Statement": [
        {"Effect": "Deny", "Principal": "*", "Action": "s3:PutObject", "Resource": f"arn:aws:s3:::{bucket}/*"}]}))
    try:
        with pytest.raises(ConfigurationError, match="Variable blobgc_scratch"):
            put_tree(s3, tmp_path, Location("s3", bucket, "scratch/"))
    finally:
        s3.delete_bucket_policy(Bucket=bucket)
