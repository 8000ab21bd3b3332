"""blobgc_mark under Airflow."""
from __future__ import annotations


from demo_app.blobs import poll_page_usage
from tests.helpers import make_blobs, run_dag
from tests.support.references import flags


def test_extra_reference_sql_that_is_wrong_fails_the_mark_dag_first(conn, s3, bucket):
    """Finding 17 (extra SQL): through Airflow, the mark's first task fails naming the query; no page usage is removed
    and no blob flips."""

    blob = make_blobs(conn, s3, bucket, 1)[0]
    poll_page_usage(conn, blob, "/stale")
    with conn.transaction():
        conn.execute("UPDATE app.page_using_blob SET updated_at = now() - interval '40 days'")
    before = flags(conn)
    result = run_dag("blobgc_mark", env_extra={"AIRFLOW_VAR_BLOBGC_EXTRA_BLOB_REFERENCES": '["SELECT 42"]'})
    output = result.stdout + result.stderr
    assert result.returncode != 0 and "extra reference query [0] returns a column of type integer" in output, \
        output[-3000:]
    assert flags(conn) == before
    assert conn.execute("SELECT count(*) FROM app.page_using_blob").fetchone()[0] == 1
