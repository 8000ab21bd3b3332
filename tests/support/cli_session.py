"""Commands of an installed Airflow run one after another in one interpreter of its virtualenv.

Each `airflow ...` command goes through `airflow.__main__.main`, the entry point of the `airflow` console script,
with its own arguments; `python -m module ...` and `python -c code ...` run as Python runs them. Each command has
its own environment additions, its own captured stdout and stderr (file descriptors 1 and 2, so every logging
handler's output too), and its own exit status. What one interpreter saves is Airflow's start: its imports, and
for `airflow dags test` the in-process Execution API's FastAPI app and its versioned routers, about 12 s of CPU
for each command on this machine (docs/benchmarks.md, "make test"). A DAG run in it is still parsed from its file
anew (`dags test` reads the DAG folder each time), so settings read at parse time (BLOBGC_TASK_RETRIES, ...)
follow each command's environment.

The test side is `CliSession`; run as a script (`python -P cli_session.py`, so that nothing of the checkout is
on the installed interpreter's path), this file is the interpreter's side: it reads one JSON request per line
on stdin and answers one JSON line on its own stdout. It imports only the standard library and what each
command imports.
"""
from __future__ import annotations

import json
import os
import select
import subprocess
import sys
import tempfile
from pathlib import Path


class CliSession:
    """An interpreter of `python` (an installed virtualenv's) that runs commands as `subprocess.run` would."""

    def __init__(self, python: Path, *, cwd: Path, env: dict[str, str]):
        self.folder = Path(tempfile.mkdtemp(prefix="blobgc-cli-session-"))
        self.process = subprocess.Popen([str(python), "-P", __file__], cwd=cwd, env=env, stdin=subprocess.PIPE,
                                        stdout=subprocess.PIPE, stderr=open(self.folder / "session.err", "wb"),
                                        text=True, bufsize=1)
        self.count = 0

    def run(self, *argv: str, timeout: float = 600,
            env_extra: dict[str, str] | None = None) -> subprocess.CompletedProcess:
        """`argv` (`airflow ...`, `python -m ...` or `python -c ...`) with `env_extra` added to the environment.

        Not Airflow's settings (AIRFLOW__*): Airflow reads them once, when the interpreter imports it."""
        if configured := [name for name in env_extra or {} if name.startswith("AIRFLOW__")]:
            raise ValueError(f"{configured}: Airflow reads its settings once per interpreter; set them for the session")
        self.count += 1
        out, err = self.folder / f"{self.count}.out", self.folder / f"{self.count}.err"
        assert self.process.stdin is not None and self.process.stdout is not None
        request = {"argv": list(argv), "env": env_extra or {}, "out": str(out), "err": str(err)}
        self.process.stdin.write(json.dumps(request) + "\n")
        self.process.stdin.flush()
        ready, _, _ = select.select([self.process.stdout], [], [], timeout)
        if not ready:
            self.close()
            raise subprocess.TimeoutExpired(list(argv), timeout, output=_read(out), stderr=_read(err))
        answer = self.process.stdout.readline()
        if not answer:
            raise AssertionError(f"the session's interpreter ended during {argv}:\n{_read(out)}\n{_read(err)}\n"
                                 f"{_read(self.folder / 'session.err')}")
        return subprocess.CompletedProcess(list(argv), json.loads(answer)["returncode"], _read(out), _read(err))

    def close(self) -> None:
        if self.process.poll() is None:
            assert self.process.stdin is not None
            self.process.stdin.close()
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


def _read(path: Path) -> str:
    return path.read_text(errors="replace") if path.exists() else ""


# --- the interpreter's side (the standard library only) -----------------------------------------------------


def _call(argv: list[str]) -> int:
    import runpy
    import traceback

    try:
        if argv[0] == "airflow":
            sys.argv = list(argv)
            from airflow.__main__ import main

            main()
        elif argv[:2] == ["python", "-m"]:
            sys.argv = [argv[2], *argv[3:]]
            runpy.run_module(argv[2], run_name="__main__", alter_sys=True)
        elif argv[:2] == ["python", "-c"]:
            sys.argv = ["-c", *argv[3:]]
            exec(compile(argv[2], "<string>", "exec"), {"__name__": "__main__"})  # noqa: S102 - `python -c`
        else:
            raise ValueError(f"not an airflow or python command: {argv}")
    except SystemExit as done:
        if done.code is None or isinstance(done.code, int):
            return done.code or 0
        print(done.code, file=sys.stderr)
        return 1
    except BaseException:  # noqa: BLE001 - printed, and the command's status is 1, as the interpreter's would be
        traceback.print_exc()
        return 1
    return 0


def _run_one(request: dict) -> int:
    environment = dict(os.environ)
    os.environ.update(request["env"])
    sys.stdout.flush()
    sys.stderr.flush()
    saved = os.dup(1), os.dup(2)
    try:
        with open(request["out"], "wb") as out, open(request["err"], "wb") as err:
            os.dup2(out.fileno(), 1)
            os.dup2(err.fileno(), 2)
            try:
                return _call(request["argv"])
            finally:
                sys.stdout.flush()
                sys.stderr.flush()
                os.dup2(saved[0], 1)
                os.dup2(saved[1], 2)
    finally:
        os.close(saved[0])
        os.close(saved[1])
        os.environ.clear()
        os.environ.update(environment)


def serve() -> None:
    """Requests from stdin, answers on stdout: both moved to descriptors of their own first, so that nothing a
    command leaves behind (a thread's or an exit handler's print) reaches the answers, and a command that reads its
    stdin reads an empty one, as it would under `subprocess.run`."""
    requests = os.fdopen(os.dup(0), "r")
    answers = os.fdopen(os.dup(1), "w", buffering=1)
    nothing = os.open(os.devnull, os.O_RDWR)
    os.dup2(nothing, 0)
    os.dup2(nothing, 1)
    for line in requests:
        answers.write(json.dumps({"returncode": _run_one(json.loads(line))}) + "\n")


if __name__ == "__main__":
    serve()
