"""Python processes the code under test starts inherit the network guard.

While a cassette that blocks the network is active, each child process started from then on
gets the guard in its own environment at start (``AGENTTAPE_GUARD``: the cassette, its mode
and allowed hosts; ``agenttape/_bootstrap`` first on its ``PYTHONPATH``), and the
``sitecustomize`` there guards it before its own code runs, as ``agenttape run`` children
open their cassette. ``os.environ`` itself is never edited: the guard is added where a child
is started — ``subprocess.Popen`` (with the inherited environment, or an explicit one), an
``os.system`` command (run by a shell that exports the two variables first), and a
``multiprocessing`` spawn (whose child guards itself before it unpickles anything); a fork
copies the parent's guard. A child that is not Python, or a socket made in C, stays out of
reach: see the network guard in the documentation.
"""

from __future__ import annotations

import functools
import json
import os
import shlex
import subprocess
import sys
import threading
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .._core.blame import passed_through
from . import ledger

if TYPE_CHECKING:
    from .._core.tape import Tape

__tracebackhide__ = passed_through

GUARD_VARIABLE = "AGENTTAPE_GUARD"
BOOTSTRAP = str(Path(__file__).resolve().parent.parent / "_bootstrap")

_lock = threading.Lock()
_guard: dict[str, str] = {}  # what a child's environment gets now (replaced, never changed)

# Run first by a multiprocessing spawn child, before its own code and the pickled target.
_SPAWNED = """\
try:
    from agenttape._adapters.children import guard_spawned
except ImportError as exc:
    import sys
    sys.stderr.write("agenttape: cannot import agenttape (%s); its network is not guarded\\n" % exc)
else:
    guard_spawned({settings!r})
"""


def update(tape: Tape | None) -> None:
    """Follows the newest process-wide tape: while it blocks the network, children started
    from here on get the guard; otherwise they start as they would."""
    global _guard
    with _lock:
        if tape is not None and tape.block_network:
            _install()
            settings = {
                "cassette": str(tape.path),
                "mode": tape.mode,
                "allowed_hosts": list(tape.allowed_hosts),
            }
            _guard = {GUARD_VARIABLE: json.dumps(settings)}
        else:
            _guard = {}


def for_child(environment: Mapping[str, str]) -> dict[str, str]:
    """The variables to add to a child's ``environment``; none while nothing is guarded."""
    guard = _guard
    if not guard:
        return {}
    return {**guard, "PYTHONPATH": _on_path(environment.get("PYTHONPATH"))}


def _on_path(python_path: str | None) -> str:
    entries = [BOOTSTRAP, *(python_path or "").split(os.pathsep)]
    return os.pathsep.join(entry for entry in dict.fromkeys(entries) if entry)


def _install() -> None:
    """Where children start, once (called with the lock held)."""
    ledger.apply("subprocess", patches())


def patches() -> list[ledger.Patch]:
    """Where children start: ``Popen``, ``os.system`` (POSIX) and, once imported,
    multiprocessing's spawn command line."""
    declared = [ledger.wrap(subprocess.Popen, "__init__", _make_init)]
    if os.name == "posix":
        declared.append(ledger.wrap(os, "system", _make_system))
    if "multiprocessing" in sys.modules:
        import multiprocessing.spawn

        declared.append(
            ledger.wrap(multiprocessing.spawn, "get_command_line", _make_get_command_line)
        )
    return declared


def _make_init(original: Any) -> Any:
    """A child started with the inherited environment gets a copy of it with the guard; one
    given an environment of its own (``env=``) gets the guard in it too."""

    @functools.wraps(original)
    def init(self: Any, *args: Any, **kwargs: Any) -> None:
        environment = kwargs.get("env")
        if _guard and (environment is None or isinstance(environment, Mapping)):
            own = dict(os.environ if environment is None else environment)
            added = for_child(own)
            if added:
                kwargs["env"] = {**own, **added}
        original(self, *args, **kwargs)

    return init


def _make_system(original: Any) -> Any:
    """``os.system`` runs its command in a shell that exports the guard first: the C library
    starts the shell, with ``os.environ`` as it is."""

    @functools.wraps(original)
    def system(command: Any) -> int:
        added = for_child(os.environ)
        if added and isinstance(command, (str, bytes)):
            exports = "export " + " ".join(
                f"{name}={shlex.quote(value)}" for name, value in added.items()
            )
            command = (
                os.fsencode(exports) + b"; " + command
                if isinstance(command, bytes)
                else f"{exports}; {command}"
            )
        result: int = original(command)
        return result

    return system


def _make_get_command_line(original: Any) -> Any:
    """A spawned child (``python -c 'from multiprocessing.spawn import spawn_main; ...'``)
    runs the guard first: it starts with ``os.environ`` as it is."""

    @functools.wraps(original)
    def get_command_line(**kwargs: Any) -> list[str]:
        command: list[str] = original(**kwargs)
        guard = _guard
        if guard and "-c" in command[:-1]:
            at = command.index("-c") + 1
            command[at] = _SPAWNED.format(settings=guard[GUARD_VARIABLE]) + command[at]
        return command

    return get_command_line


def guard_spawned(settings: str) -> None:
    """In a multiprocessing spawn child: guarded as a child started with the guard in its
    environment is, and its own children after it."""
    os.environ[GUARD_VARIABLE] = settings
    os.environ["PYTHONPATH"] = _on_path(os.environ.get("PYTHONPATH"))
    inherit()


def inherit() -> None:
    """In a child (called by the bootstrap): refuse the network as the parent's cassette
    does. A guard the child cannot read is reported, never silently dropped."""
    import socket

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
