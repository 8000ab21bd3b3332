"""The install test's virtualenv, built in the background while the rest of the suite runs.

`scripts/install_venv.py` spends a minute or more in pip on a fresh machine (Airflow and the providers,
from pip's cache), nearly all of it waiting on the disk. The suite starts it as soon as collection shows
that the install test will run (`tests/conftest.py`), and the test's fixture waits for it.
"""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tests.helpers import ROOT

_build: subprocess.Popen | None = None


def start_building() -> None:
    """Start `scripts/install_venv.py` in the background (once)."""
    global _build
    if _build is None:
        _build = subprocess.Popen([sys.executable, str(ROOT / "scripts" / "install_venv.py")], cwd=ROOT,
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def installed_python(timeout: float = 1500) -> Path:
    """The virtualenv's python, with this checkout's wheel freshly installed; fails loudly if the build failed."""
    start_building()
    assert _build is not None
    out, err = _build.communicate(timeout=timeout)
    if _build.returncode != 0:
        raise AssertionError(f"building or installing the wheel failed:\n{out}\n{err}")
    return Path(out.strip().splitlines()[-1])
