"""scripts/s3_server.py: the local S3 server answers as S3 does."""
from __future__ import annotations


from tests.helpers import deny_deletes, object_keys


def test_local_s3_answers_quiet_delete_objects_with_errors_only(s3, bucket):
    """scripts/s3_server.py: quiet mode lists errors only, as S3 does; loud mode lists every deletion."""
    for key in ("a", "b", "locked/c"):
        s3.put_object(Bucket=bucket, Key=key, Body=b"x")
    deny_deletes(s3, bucket, "locked/")
    quiet = s3.delete_objects(Bucket=bucket, Delete={"Objects": [{"Key": "a"}, {"Key": "locked/c"}], "Quiet": True})
    assert "Deleted" not in quiet
    assert [(e["Key"], e["Code"]) for e in quiet["Errors"]] == [("locked/c", "AccessDenied")]
    loud = s3.delete_objects(Bucket=bucket, Delete={"Objects": [{"Key": "b"}], "Quiet": False})
    assert [d["Key"] for d in loud["Deleted"]] == ["b"]
    assert object_keys(s3, bucket) == {"locked/c"}
    s3.delete_bucket_policy(Bucket=bucket)
