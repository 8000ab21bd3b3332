"""blobgc.core.runs: run recording and the one clock of every cut-off."""
from __future__ import annotations

import logging
from datetime import datetime, timedelta, timezone

from blobgc.core.runs import RunRef, cutoff, ensure_run
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
