"""Build blobgc's wheel and install it into a virtualenv that holds only Airflow and the providers.

This is what a platform team does to add blobgc to an Airflow it already runs, and what the install
test (tests/deploy/test_install.py) checks. The virtualenv is cached at `.blobgc/install-venv`: it is
built once per version of the pinned lock (`requirements.txt`, used as constraints, so nothing newer than
the lock and nothing beyond the package registries is fetched); every call rebuilds the wheel from the
working tree and reinstalls it, with the dependencies it declares and those of its extra `azure` (unless the
tree is what the installed wheel was built from: a digest of its sources, `.wheel-sha256`).

    python scripts/install_venv.py                 # prints the virtualenv's python
    python scripts/install_venv.py --airflow-only  # only the cached virtualenv
"""
from __future__ import annotations

import fcntl
import hashlib
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
VENV = ROOT / ".blobgc" / "install-venv"
LOCK = ROOT / "requirements.txt"
# What the team's Airflow already has: Airflow itself and the providers blobgc uses. Nothing of blobgc's.
AIRFLOW = [
    "apache-airflow", "apache-airflow-providers-amazon", "apache-airflow-providers-postgres",
    "apache-airflow-providers-redis", "apache-airflow-providers-smtp", "apache-airflow-providers-standard",
]
PIP = ["--quiet", "--disable-pip-version-check"]
# blobgc's wheel as the README installs it, with pip; its bytecode is compiled on first import
INSTALL = [*PIP, "--no-compile"]
# the one extra the install test covers (README, "Object stores"): Azure Blob Storage's provider comes with it;
# Google's (blobgc[gcs]) stays out, so the test also sees a store whose provider is missing
EXTRA = "azure"


def run(*argv: str | Path) -> None:
    subprocess.run([str(a) for a in argv], check=True)


def airflow_venv() -> Path:
    """The cached virtualenv with Airflow and the providers only, (re)built when the lock changes."""
    stamp = VENV / ".lock-sha256"
    digest = hashlib.sha256(LOCK.read_bytes()).hexdigest()
    if stamp.exists() and stamp.read_text() == digest and (VENV / "bin" / "airflow").exists():
        return VENV
    shutil.rmtree(VENV, ignore_errors=True)
    run(sys.executable, "-m", "venv", VENV)  # with pip, for the README's own install step (install(), below)
    # Airflow is the team's, already there: installed by the checkout's uv (the lock's), resolved under the lock
    run(ROOT / ".venv" / "bin" / "uv", "pip", "install", "--quiet", "--compile-bytecode", "--python",
        VENV / "bin" / "python", "-c", LOCK, *AIRFLOW)
    stamp.write_text(digest)
    return VENV


def build_wheel(out: Path) -> Path:
    """blobgc's wheel from the working tree (setuptools from the lock, no build isolation: no download).

    It is built from a copy of what the wheel is made of, so that the build's egg-info never lands in
    plugins/, where the checkout's own Airflow would read its entry point (and load the plugin twice)."""
    source = out / "source"
    for part in ("pyproject.toml", "README.md"):
        (source / part).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / part, source / part)
    shutil.copytree(ROOT / "plugins" / "blobgc", source / "plugins" / "blobgc",
                    ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    run(ROOT / ".venv" / "bin" / "pip", "wheel", *PIP, "--no-deps", "--no-build-isolation", "-w", out, source)
    (wheel,) = out.glob("blobgc-*.whl")
    return wheel


def source_digest() -> str:
    """What the wheel is made of (`build_wheel`'s copy), and the extra it is installed with, hashed."""
    digest = hashlib.sha256(EXTRA.encode())
    files = [ROOT / "pyproject.toml", ROOT / "README.md"]
    files += sorted(p for p in (ROOT / "plugins" / "blobgc").rglob("*")
                    if p.is_file() and "__pycache__" not in p.parts and p.suffix != ".pyc")
    for path in files:
        digest.update(str(path.relative_to(ROOT)).encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()


def install() -> Path:
    """Install a wheel built from the working tree into the cached virtualenv; return its python. Not again when
    the tree is what the installed wheel was built from (`make test` installs it while the stack starts; the test
    then finds it done)."""
    venv = airflow_venv()
    stamp, digest = venv / ".wheel-sha256", source_digest()
    if stamp.exists() and stamp.read_text() == digest:
        return venv / "bin" / "python"
    stamp.unlink(missing_ok=True)
    with tempfile.TemporaryDirectory() as out:
        wheel = build_wheel(Path(out))
        run(venv / "bin" / "pip", "uninstall", *PIP, "--yes", "blobgc")
        run(venv / "bin" / "pip", "install", *INSTALL, "-c", LOCK, f"{wheel}[{EXTRA}]")
    stamp.write_text(digest)
    return venv / "bin" / "python"


if __name__ == "__main__":
    VENV.parent.mkdir(parents=True, exist_ok=True)
    with open(VENV.parent / "install-venv.lock", "w") as lock:  # one build at a time (test workers, say)
        fcntl.flock(lock, fcntl.LOCK_EX)
        print(airflow_venv() if sys.argv[1:] == ["--airflow-only"] else install())
