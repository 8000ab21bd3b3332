"""Issue 33: quarantine (issue 32) on Google Cloud Storage and Azure Blob Storage, through the same core code as on
S3: owed objects are copied aside in their own bucket and verified before the originals go, the purge deletes a copy
once its window has passed (by the copy's own time, made old through the local server's backdate call) and only
then counts its bytes reclaimed, and undo brings back from quarantine what is still there."""
from __future__ import annotations

import pytest

from blobgc.collectors.restore import cancel_owed_deletions, plan_restore, restore_objects, restore_rows
from blobgc.core.quarantine import QuarantinePolicy, purge_quarantine, quarantine_key
from blobgc.core.runs import RunRef, ensure_run
from blobgc.kinds.blobs.layouts import blob_keys
from tests.helpers import NOW
from tests.support.restore import swept_run
from tests.support.stores import store_of

DAYS = 7


@pytest.fixture(params=["gcs", "azure"])
def store(request):
    yield from store_of(request.param, versioned=False)


def test_quarantine_moves_objects_aside_the_purge_frees_them_after_their_window_and_undo_brings_back_the_rest(
        conn, store):
    run, kept, garbage = swept_run(conn, store.client, store.bucket, "manual__q_store",
                                   quarantine=QuarantinePolicy({store.bucket: DAYS}))
    keys = sorted(k for g in garbage for k in blob_keys(g))
    copies = {k: quarantine_key("blobgc_sweep", run.run_id, k) for k in keys}
    assert store.keys() == {k for b in kept for k in blob_keys(b)} | set(copies.values())
    for key, copy in copies.items():  # byte for byte
        assert store.read(copy) == (b"r" * 100 if key.endswith("raw") else b"t" * 10)
    recorded = conn.execute("SELECT key, quarantine_key, size_bytes FROM blobgc.quarantine WHERE run_id = %s "
                            "ORDER BY key", (run.run_id,)).fetchall()
    assert recorded == [(k, copies[k], 100 if k.endswith("raw") else 10) for k in keys]

    purged_key = keys[0]
    store.backdate(copies[purged_key], (DAYS + 1) * 86400)  # one copy's window is over
    purge = purge_quarantine(conn, store.client, ensure_run(conn, RunRef("blobgc_sweep", "manual__q_later"), NOW))
    assert (purge.purged, purge.held) == (1, len(keys) - 1)
    assert copies[purged_key] not in store.keys()

    restore = RunRef("blobgc_restore", "undo__q_store")
    plan = plan_restore(conn, store.client, run.run_id, run.dag_id)
    cancel_owed_deletions(conn, restore, plan)
    objects = restore_objects(conn, store.client, restore, plan)
    assert (objects.restored, objects.not_restored) == (len(keys) - 1, 1)
    [(detail, n)] = objects.reasons.items()
    assert n == 1 and "purged from quarantine at " in detail, detail
    for key in keys[1:]:
        assert store.read(key) == (b"r" * 100 if key.endswith("raw") else b"t" * 10)
    rows = restore_rows(conn, store.client, restore, plan)
    back = {r for (r,) in conn.execute("SELECT id FROM app.blob WHERE id = ANY(%s)", (garbage,))}
    owner = next(g for g in garbage if purged_key in blob_keys(g))
    assert back == set(garbage) - {owner} and rows.restored == len(garbage) - 1  # a row comes back whole or not
