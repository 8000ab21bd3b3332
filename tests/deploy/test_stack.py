"""scripts/stack.py: the local stack."""
from __future__ import annotations

import subprocess
import sys

from tests.helpers import ROOT


def test_make_up_is_idempotent_when_the_stack_is_running(stack):
    result = subprocess.run([sys.executable, str(ROOT / "scripts" / "stack.py"), "up"], cwd=ROOT,
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr
    for service in ("postgres", "redis", "S3", "airflow"):
        assert f"{service} already running" in result.stdout
