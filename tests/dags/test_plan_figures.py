"""Issue 29, `plan-figures-disagree`: a dry run's plan and the real run that executes it show figures that reconcile.

The dry run counts every planned key and the plan's sizes (the size column, on each row's first key); the real
run counts what its drain deleted, at the sizes the drain counted. Side by side they differed without a word. Now
every figure shown for a plan and its execution (the run's report, the receipt, `make demo`'s summary) says which
is which, and planned = deleted + absent + kept + failed, in keys and in bytes from one stated source.
"""
from __future__ import annotations

import re
from datetime import datetime, timedelta, timezone

from blobgc.reclaim.receipt_page import render_receipt
from blobgc.reclaim.receipts import collect_receipt
from demo_app.demo import print_summary
from tests.helpers import make_blobs, object_keys, run_dag, set_unused_since

SWEEP = "blobgc_sweep"
OUTCOMES = ("deleted", "absent", "kept", "failed")
SIZE_SOURCE = "the table's size column, on each row's first key only"
COUNTED = ("each deleted object's size as the drain counted it: the size logged for its key where there is one, else "
           "the store's at delete time")


def receipt_counts(page: str) -> dict[str, tuple[int, int]]:
    """The receipt's figures table: outcome -> (keys, bytes as planned)."""
    section = page.split('<table id="counts"', 1)[1].split("</table>", 1)[0]
    return {name: (int(keys), int(n_bytes)) for name, keys, n_bytes in
            re.findall(r'data-count="(\w+)" data-value="(\d+)" data-bytes="(\d+)"', section)}


def test_plan_figures_disagree_no_more_planned_is_deleted_absent_kept_failed_in_keys_and_bytes(conn, s3, bucket,
                                                                                                  capsys):
    since = datetime.now(timezone.utc) - timedelta(seconds=1)
    with_thumbnails = make_blobs(conn, s3, bucket, 4, size=100)  # raw 100 B (as the size column says), thumbnail 10 B
    without = make_blobs(conn, s3, bucket, 2, prefix="nothumb", size=100, thumbnails=False)  # thumbnail never made
    set_unused_since(conn, with_thumbnails + without, "3 days")
    env = {"AIRFLOW_VAR_BLOBGC_BUCKET": bucket}
    dry = run_dag(SWEEP, conf={"dry_run": True}, env_extra=env)
    assert dry.returncode == 0, dry.output[-3000:]
    rereferenced = with_thumbnails[0]  # referenced again after the plan: skipped at delete time, its objects kept
    with conn.transaction():
        conn.execute("INSERT INTO app.post (id) VALUES ('p1')")
        conn.execute("INSERT INTO app.blob_attachment (post_id, blob_id) VALUES ('p1', %s)", (rereferenced,))
    real = run_dag(SWEEP, conf={"from_plan": dry.run_id}, env_extra=env)
    assert real.returncode == 0, real.output[-3000:]
    assert object_keys(s3, bucket) == {f"blobs/{rereferenced}/raw", f"blobs/{rereferenced}/thumbnail"}

    # the run's own figures (blobgc.run, as blobgc.reclaim_daily): the dry run's are the plan, the real run's the drain
    counts = {run_id: (objects, n) for run_id, objects, n in conn.execute(
        "SELECT run_id, objects_deleted, bytes_reclaimed FROM blobgc.run WHERE dag_id = %s", (SWEEP,))}
    assert counts == {dry.run_id: (12, 600), real.run_id: (8, 5 * 100 + 3 * 10)}

    # the receipt: planned 12 = deleted 8 + absent 2 + kept 2 + failed 0; 600 B = 500 + 0 + 100 + 0 (the plan's
    # sizes), each figure labelled with its source
    receipt = collect_receipt(conn, SWEEP, real.run_id)
    assert receipt is not None
    page = render_receipt(receipt, root="/blobgc", may_undo=False, paused=None)
    shown = receipt_counts(page)
    assert shown == {"planned": (12, 600), "deleted": (8, 500), "absent": (2, 0), "kept": (2, 100), "failed": (0, 0)}
    assert shown["planned"] == tuple(sum(shown[o][i] for o in OUTCOMES) for i in (0, 1))
    assert "sizes from the table&#x27;s size column" in page and "6 planned keys of unknown size count 0" in page
    assert "planned 12 = deleted 8 + absent 2 + kept 2 + failed 0 keys" in page
    assert f"530 bytes; sizes: {COUNTED}".replace("'", "&#x27;") in page  # the run's bytes reclaimed
    dry_receipt = collect_receipt(conn, SWEEP, dry.run_id)
    assert dry_receipt is not None
    dry_page = render_receipt(dry_receipt, root="/blobgc", may_undo=False, paused=None)
    assert receipt_counts(dry_page) == {"planned": (12, 600)}
    assert "every key of its plan, whether or not the object exists" in dry_page
    assert "planned: 12 keys, 600 B (sizes from the table&#x27;s size column" in dry_page

    # the run's report (blobgc.run.details): the same figures
    figures = conn.execute("SELECT details -> 'plan' -> 'figures' FROM blobgc.run WHERE run_id = %s",
                           (real.run_id,)).fetchone()[0]
    keys = {o: figures[f"{o}_keys"] for o in OUTCOMES}
    n_bytes = {o: figures[f"{o}_bytes"] for o in OUTCOMES}
    assert (figures["planned_keys"], keys) == (12, {"deleted": 8, "absent": 2, "kept": 2, "failed": 0})
    assert (figures["planned_bytes"], n_bytes) == (600, {"deleted": 500, "absent": 0, "kept": 100, "failed": 0})
    assert figures["planned_keys"] == sum(keys.values()) and figures["planned_bytes"] == sum(n_bytes.values())
    assert figures["balanced"] is True and figures["not_reached_keys"] == 0 and figures["skipped_keys"] == 2
    assert figures["unknown_size_keys"] == 6  # the thumbnails: the size column is on each row's first key only
    # the drain's own figure, which blobgc.run counts, is stated apart, with its source
    assert (figures["deleted_counted_bytes"], figures["drained_keys"], figures["drained_bytes"]) == (530, 8, 530)
    assert (figures["size_source"], figures["counted_size_source"]) == (SIZE_SOURCE, COUNTED)
    dry_figures = conn.execute("SELECT details -> 'plan' -> 'figures' FROM blobgc.run WHERE run_id = %s",
                               (dry.run_id,)).fetchone()[0]
    assert dry_figures["lines"] == ["planned: 12 keys, 600 B (sizes from the table's size column, on each row's first "
                                    "key only; 6 keys of unknown size not counted)"]

    # make demo's summary: the dry run's figure and the real run's reconciliation, each with its source
    capsys.readouterr()
    print_summary(conn, since)
    summary = capsys.readouterr().out
    assert "planned: 12 keys, 600 B (sizes from the table's size column" in summary
    assert f"real run (the plan of dry run {dry.run_id})" in summary
    assert "planned 12 = deleted 8 + absent 2 + kept 2 + failed 0 keys" in summary
    assert "planned 600 B = deleted 500 B + absent 0 B + kept 100 B + failed 0 B (bytes as planned: sizes from " \
           "the table's size column" in summary
    assert f"bytes deleted: 530 B for the 8 deleted keys (sizes: {COUNTED}; reclaimed only once gone from storage" in summary
    assert "rows: planned 6 = deleted 5 + skipped 1" in summary
    assert "a real run's are the objects its drain deleted" in summary
