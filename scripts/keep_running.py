"""Run a command, and run it again whenever it exits on its own: the local stack's supervisor for the Airflow
scheduler, as systemd's `Restart=always` or a Kubernetes Deployment is in production.

Airflow's scheduler exits when a database error escapes its loop, e.g. a deadlock between its update of a paused
DAG's running runs and an `airflow dags test` of that DAG in another process. A scheduler that stays down leaves
every later run queued. A SIGTERM or SIGINT (`make down`, an executor switch: sent to the whole process group)
stops both this supervisor and the command.

    python scripts/keep_running.py airflow scheduler
"""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

RESTART_DELAY_SECONDS = float(os.environ.get("BLOBGC_RESTART_DELAY_SECONDS", "5"))

stopping = False


def stop(signum: int, _frame: object) -> None:
    global stopping
    stopping = True


def main(argv: list[str]) -> int:
    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    while True:
        rc = subprocess.Popen(argv).wait()
        if stopping:
            return rc
        print(f"[keep_running] {' '.join(argv)} exited with {rc}; starting it again in {RESTART_DELAY_SECONDS:g} s",
              flush=True)
        time.sleep(RESTART_DELAY_SECONDS)
        if stopping:
            return rc


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
