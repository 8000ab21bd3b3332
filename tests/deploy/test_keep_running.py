"""scripts/keep_running.py: the local stack's scheduler is started again when it exits on its own, and stops with
the stack."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

from tests.helpers import ROOT, wait_until


def test_a_command_that_exits_is_started_again_until_the_group_is_stopped(tmp_path):
    starts = tmp_path / "starts"
    command = f"echo started >> {starts}; exit 3"  # a scheduler whose loop died
    proc = subprocess.Popen([sys.executable, str(ROOT / "scripts" / "keep_running.py"), "sh", "-c", command],
                            env={**os.environ, "BLOBGC_RESTART_DELAY_SECONDS": "0.2"}, start_new_session=True,
                            stdout=subprocess.PIPE, text=True)
    try:
        wait_until(lambda: starts.exists() and len(starts.read_text().splitlines()) >= 3, timeout=20)
    finally:
        os.killpg(proc.pid, signal.SIGTERM)  # as `make down` stops it
    assert proc.wait(timeout=20) is not None
    assert "exited with 3; starting it again in 0.2 s" in proc.stdout.read()
    stopped_at = len(starts.read_text().splitlines())
    time.sleep(0.6)
    assert len(starts.read_text().splitlines()) == stopped_at  # nothing starts it once stopped
