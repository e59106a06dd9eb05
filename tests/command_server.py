"""A process with the command line's modules imported once (and DuckDB, pyarrow and the
object-store clients it reaches for) that runs each command in a child forked from it.

The crash tests kill a command before each of its changes to a store, then finish its work
with another command: hundreds of commands, each of which would otherwise spend most of its
time starting Python and importing the same libraries. A forked child is still a process of
its own, with its own environment, folder and output, and it dies as one: SIGKILL, no
clean-up of any kind.

    server = commands()                          # one per test process, started on first use
    done = server.run(["index", "compact", url], env=..., crash=True)   # tests/crash_after.py
"""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import Any

TIMEOUT = 120.0  # seconds a command may take before it is killed and reported as 124


@dataclass(frozen=True, slots=True)
class Finished:
    """What a command left: its exit status (minus the signal that killed it), its output."""

    returncode: int
    stdout: str
    stderr: str


class CommandServer:
    def __init__(self) -> None:
        self._process = subprocess.Popen(
            [sys.executable, __file__],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            cwd=Path(__file__).parent,
        )

    def run(
        self, argv: list[str], *, env: dict[str, str], cwd: Path | None = None, crash: bool = False
    ) -> Finished:
        """``agenttape ARGV`` (through tests/crash_after.py with ``crash``) in a forked child."""
        assert self._process.stdin is not None and self._process.stdout is not None
        with tempfile.TemporaryDirectory(prefix="agenttape-command-") as folder:
            out, err = Path(folder, "stdout"), Path(folder, "stderr")
            request = {
                "argv": [str(argument) for argument in argv],
                "env": env,
                "cwd": str(cwd or Path.cwd()),
                "out": str(out),
                "err": str(err),
                "crash": crash,
            }
            self._process.stdin.write(json.dumps(request) + "\n")
            self._process.stdin.flush()
            answer = self._process.stdout.readline()
            if not answer:
                raise RuntimeError(f"the command server ended (status {self._process.wait()})")
            return Finished(json.loads(answer)["status"], out.read_text(), err.read_text())

    def close(self) -> None:
        if self._process.stdin is not None:
            self._process.stdin.close()
        self._process.wait(timeout=30)


_server: CommandServer | None = None


def commands() -> CommandServer:
    """This test process's server, started on first use and stopped at exit."""
    global _server
    if _server is None:
        _server = CommandServer()
        atexit.register(_server.close)
    return _server


# -- the server process ------------------------------------------------------------------------


def _child(request: dict[str, Any]) -> None:
    """In the forked child: become the command, run it, exit with its status."""
    code: Any = 1
    try:
        os.chdir(request["cwd"])
        os.environ.clear()
        os.environ.update(request["env"])
        os.dup2(os.open(os.devnull, os.O_RDONLY), 0)
        for fd, path in ((1, request["out"]), (2, request["err"])):
            os.dup2(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), fd)
        import random

        random.seed()  # a process of its own draws its own numbers
        argv = request["argv"]
        sys.argv = ["agenttape", *argv]
        if request["crash"]:
            import crash_after

            crash_after.arm(argv)
            code = crash_after.run(argv)
        else:
            from agenttape._tools.cli import main

            code = main(argv)
    except SystemExit as exit_:
        code = exit_.code
    except BaseException:
        traceback.print_exc()
        code = 1
    finally:
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(Exception):
                stream.flush()
        if code is None:
            code = 0
        elif not isinstance(code, int):
            sys.stderr.write(f"{code}\n")
            sys.stderr.flush()
            code = 1
        os._exit(code)


def _wait(pid: int) -> int:
    """The child's exit status as subprocess reports it, killing it after ``TIMEOUT``."""
    deadline = time.monotonic() + TIMEOUT
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return os.waitstatus_to_exitcode(status)
        if time.monotonic() > deadline:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            return 124
        time.sleep(0.002)


PRELOADED = (
    "agenttape._tools.cli",
    "agenttape._production.store",
    "crash_after",
    "duckdb",
    "pyarrow.parquet",
    "fsspec",
    "obstore.store",  # imported only: its runtime starts in the child that uses it
)


def serve() -> None:
    import importlib

    for name in PRELOADED:
        with contextlib.suppress(ImportError):
            importlib.import_module(name)

    for line in sys.stdin:
        request = json.loads(line)
        sys.stdout.flush()
        pid = os.fork()
        if pid == 0:
            _child(request)
        sys.stdout.write(json.dumps({"status": _wait(pid)}) + "\n")
        sys.stdout.flush()


if __name__ == "__main__":
    serve()
