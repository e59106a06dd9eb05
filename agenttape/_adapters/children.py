"""Python processes the code under test starts inherit the network guard.

While a cassette that blocks the network is active, the environment says so
(``AGENTTAPE_GUARD``: the cassette, its mode and allowed hosts) and puts
``agenttape/_bootstrap`` first on ``PYTHONPATH``; the ``sitecustomize`` there guards each
Python child before its own code runs, as ``agenttape run`` children open their cassette. So
a child started through ``subprocess`` (with the inherited environment, or an explicit one),
``os.system`` or ``multiprocessing`` (spawn, and fork, which copies the guard) cannot reach
the network either. A child that is not Python, or a socket made in C, stays out of reach:
see the network guard in the documentation.
"""

from __future__ import annotations

import functools
import json
import os
import subprocess
import threading
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from .._core.tape import Tape
from . import ledger

GUARD_VARIABLE = "AGENTTAPE_GUARD"
BOOTSTRAP = str(Path(__file__).resolve().parent.parent / "_bootstrap")

_lock = threading.Lock()
_before: dict[str, str | None] | None = None  # the variables as they were, while changed
_guard: dict[str, str] = {}  # what a child's environment gets now; empty: nothing


def update(tape: Tape | None) -> None:
    """Follows the newest process-wide tape: while it blocks the network, the environment
    children inherit carries the guard; otherwise it is as it was."""
    global _before
    with _lock:
        if tape is not None and tape.block_network:
            if _before is None:
                _before = {name: os.environ.get(name) for name in (GUARD_VARIABLE, "PYTHONPATH")}
                _patch_popen()
            settings = {
                "cassette": str(tape.path),
                "mode": tape.mode,
                "allowed_hosts": list(tape.allowed_hosts),
            }
            _guard.clear()
            _guard[GUARD_VARIABLE] = json.dumps(settings)
            _guard["PYTHONPATH"] = _on_path(_before["PYTHONPATH"])
            os.environ.update(_guard)
        elif _before is not None:
            for name, value in _before.items():
                if value is None:
                    os.environ.pop(name, None)
                else:
                    os.environ[name] = value
            _before = None
            _guard.clear()


def _on_path(python_path: str | None) -> str:
    entries = [BOOTSTRAP, *(python_path or "").split(os.pathsep)]
    return os.pathsep.join(entry for entry in dict.fromkeys(entries) if entry)


def _patch_popen() -> None:
    """A child given an environment of its own (``env=``) gets the guard in it too."""
    ledger.apply("subprocess", [popen_patch()])


def popen_patch() -> ledger.Patch:
    return ledger.wrap(subprocess.Popen, "__init__", _make_init)


def _make_init(original: Any) -> Any:
    @functools.wraps(original)
    def init(self: Any, *args: Any, **kwargs: Any) -> None:
        environment = kwargs.get("env")
        guard = dict(_guard)
        if isinstance(environment, Mapping) and guard:
            own = dict(environment)
            guard["PYTHONPATH"] = _on_path(own.get("PYTHONPATH"))
            kwargs["env"] = {**own, **guard}
        original(self, *args, **kwargs)

    return init


def inherit() -> None:
    """In a child (called by the bootstrap): refuse the network as the parent's cassette
    does. A guard the child cannot read is reported, never silently dropped."""
    import socket
    import sys

    from . import network_guard

    try:
        settings = json.loads(os.environ[GUARD_VARIABLE])
        guard = network_guard.Guard(
            Path(settings["cassette"]),
            str(settings["mode"]),
            tuple(str(host) for host in settings["allowed_hosts"]),
        )
    except (KeyError, TypeError, ValueError) as exc:
        sys.stderr.write(f"agenttape: {GUARD_VARIABLE} cannot be read ({exc}); not guarded\n")
        return
    ledger.apply("socket", network_guard.install(socket))
    network_guard.inherit(guard)
