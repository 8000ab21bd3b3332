"""blobgc.core.runs: run recording and the one clock of every cut-off."""
from __future__ import annotations

import logging
import threading
import time
from datetime import datetime, timedelta, timezone

from blobgc.core.runs import RunRef, add_counts, cutoff, ensure_run
from tests.helpers import FAR_FUTURE


def test_future_logical_date_is_clamped_to_the_database_now_once_per_run(conn, caplog):
    """Finding 2 (future logical date): the reference time is min(data-interval end, now()), fixed by the first task;
    a retry later reads the same value, and the clamp is logged."""
    db_now = conn.execute("SELECT now()").fetchone()[0]
    with caplog.at_level(logging.WARNING, logger="blobgc.runs"):
        first = ensure_run(conn, RunRef("blobgc_sweep", "future"), FAR_FUTURE)
    assert db_now <= first.reference_time < db_now + timedelta(minutes=1)
    assert "in the future" in caplog.text and "clamped" in caplog.text
    again = ensure_run(conn, RunRef("blobgc_sweep", "future"), FAR_FUTURE)
    assert again.reference_time == first.reference_time
    assert cutoff(again, hours=24) == first.reference_time - timedelta(hours=24)
    past = datetime(2026, 3, 1, tzinfo=timezone.utc)
    assert ensure_run(conn, RunRef("blobgc_sweep", "backfill"), past).reference_time == past  # a past run keeps its date


def test_two_writers_of_a_new_dry_run_part_at_once_count_each_batch_once(conn, other_conn):
    run = ensure_run(conn, RunRef("blobgc_generations", "dry-race", True))
    with conn.transaction():  # the first writer has written the part's first counts, not committed yet
        add_counts(conn, run, rows=1, objects=2, bytes_=30, part="generation 1")
        second = threading.Thread(target=lambda: add_counts(other_conn, run, rows=4, objects=5, bytes_=60,
                                                             part="generation 1"))
        second.start()
        time.sleep(0.5)  # the second writer is now waiting for the first one's row
    second.join(timeout=30)
    assert not second.is_alive()
    assert conn.execute("SELECT rows_deleted, objects_deleted, bytes_reclaimed FROM blobgc.run_part "
                        "WHERE run_id = 'dry-race'").fetchone() == (5, 7, 90)
    assert conn.execute("SELECT rows_deleted, objects_deleted, bytes_reclaimed FROM blobgc.run "
                        "WHERE run_id = 'dry-race'").fetchone() == (5, 7, 90)
