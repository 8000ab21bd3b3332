#!/usr/bin/env python3
"""How long the test suite takes in one process (the baseline) and on pytest-xdist workers (`make test`), measured
in the same session against the same running stack (issue 30: `make test` on a fresh clone within 12 minutes).

Each command is timed whole, with the CPU seconds of pytest and everything it started (Airflow's CLI, pip of
the install test); the services of the stack are not counted. Both must pass: a failing suite is not a figure.

    make up && source .blobgc/env && python bench/test_suite.py                 # the whole suite, twice
    python bench/test_suite.py --workers 3 tests/dags tests/dag_kit              # a part of it, three workers
"""
from __future__ import annotations

import argparse
import resource
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def timed_pytest(workers: int, paths: list[str]) -> tuple[float, float, str]:
    """Wall and CPU seconds of one pytest session, and its summary line; fails loudly if a test failed."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.monotonic()
    result = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-n", str(workers),
                             *paths], cwd=ROOT, capture_output=True, text=True)
    wall = time.monotonic() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    summary = (result.stdout.strip().splitlines() or ["(nothing printed)"])[-1]
    if result.returncode != 0:
        sys.exit(f"pytest -n {workers} failed ({summary}):\n{result.stdout[-4000:]}\n{result.stderr[-2000:]}")
    return wall, cpu, summary


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workers", type=int, default=2, help="pytest-xdist workers of the measured run (2)")
    parser.add_argument("paths", nargs="*", help="test paths (the whole suite when none)")
    args = parser.parse_args()
    figures = {}
    for label, workers in (("one process (-n 0)", 0), (f"{args.workers} workers (-n {args.workers})", args.workers)):
        wall, cpu, summary = timed_pytest(workers, args.paths)
        figures[label] = wall
        print(f"{label:>24}: {wall:7.1f} s wall, {cpu:7.1f} s CPU   {summary}", flush=True)
    baseline, parallel = figures.values()
    print(f"{'ratio':>24}: {baseline / parallel:.2f} (one process's wall time over {args.workers} workers')")


if __name__ == "__main__":
    main()
