"""``agenttape run``: a program that never imports agenttape, and every process it starts,
recorded and replayed through one cassette.

How: the command runs with ``agenttape/_bootstrap`` first on PYTHONPATH; its
``sitecustomize`` opens a cassette in each Python process before user code runs
(``run_process``), as the environment variables say. Every other program (Node, curl, Go, a JVM) reaches the
network through the recording proxy, which runs in this process for the command's lifetime
and serves the same cassette; Python processes leave the proxy out of their own proxy
settings, so nothing is recorded twice.

Why fragments: several processes writing one cassette at exit would overwrite each other
(the last one wins, the others are lost). So while recording, each process writes only what it
recorded to its own fragment file, atomically, at exit; when the command has finished, the
parent merges the fragments into the cassette in one atomic write, ordered by start time. When
replaying, every process reads the cassette and never writes it; the processes share one
play log (the positions played, one a line), so a request two processes both make gets the responses in
recorded order, each once. A process forked without exec starts a fragment of its own.
"""

from __future__ import annotations

import contextlib
import functools
import heapq
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .._adapters import sdk_keys
from .._core import meta
from .._core.errors import AgentTapeError
from .._core.faults import (
    FAULTS_ENVIRONMENT_VARIABLE,
    Fault,
    fault_to_json,
    faults_from_environment,
)
from .._core.files import read, write_atomic
from .._core.models import Interaction
from .._core.options import MODE_ENVIRONMENT_VARIABLE
from .._core.text import counted
from .._core.wire import codec
from .run_process import (
    CASSETTE_VARIABLE,
    FRAGMENTS_VARIABLE,
    MODE_VARIABLE,
    REQUESTED_MODE_VARIABLE,
    open_cassette,
    process_mode,
)

if TYPE_CHECKING:
    from .._proxy.upstream import Origin
    from .proxy_command import Proxy

BOOTSTRAP = Path(__file__).resolve().parent.parent / "_bootstrap"

# Interpreters whose first file argument names the program, as ``python script.py`` does.
_SCRIPT_RUNNERS = ("node", "nodejs", "deno", "bun", "ruby", "perl", "php", "tsx", "ts-node")


def default_cassette(command: list[str]) -> Path:
    """``cassettes/<script>.msgpack`` for ``python script.py`` and ``node agent.mjs``, else
    the program's name."""
    name = Path(command[0]).name
    if name.startswith("python") and len(command) > 1:
        for argument in command[1:]:
            if argument == "-m" or not argument.startswith("-"):
                index = command.index(argument)
                if argument == "-m" and index + 1 < len(command):
                    name = command[index + 1].rsplit(".", 1)[-1]
                else:
                    name = Path(argument).stem
                break
    elif name in _SCRIPT_RUNNERS:
        for argument in command[1:]:
            if not argument.startswith("-") and Path(argument).suffix:
                name = Path(argument).stem
                break
    return Path("cassettes") / f"{name or 'run'}.msgpack"


def is_python(command: list[str]) -> bool:
    """Whether the command is a Python interpreter (recorded in-process, no proxy needed)."""
    first = command[0]
    return Path(first).name.startswith("python") or first == sys.executable


def _python(command: list[str]) -> list[str]:
    """A bare ``python``/``python3`` means the interpreter agenttape runs in: the one that
    can import it."""
    first = command[0]
    if first in ("python", "python3", f"python{sys.version_info[0]}.{sys.version_info[1]}"):
        return [sys.executable, *command[1:]]
    return command


PROXY_LABEL = "proxy"


def _merge(fragments: Path) -> tuple[dict[str, Any] | None, list[Interaction], int, int]:
    """Every fragment's interactions, interleaved by start time, each process's own order
    kept; with the number of Python processes that recorded and of interactions the proxy
    recorded."""
    files = sorted(fragments.glob("*.msgpack"))
    header: dict[str, Any] | None = None
    runs = []
    processes = proxied = 0
    for file in files:
        file_header, interactions = read(file)
        header = header if header is not None else file_header
        if f"-{PROXY_LABEL}-" in file.name:
            proxied += len(interactions)
        else:
            processes += 1
        runs.append(interactions)
    merged = list(heapq.merge(*runs, key=lambda interaction: interaction.started_at))
    return header, merged, processes, proxied


def _sources(processes: int, proxied: int) -> str:
    """Where recorded interactions came from, for the report."""
    parts = []
    if processes:
        parts.append(f"from {counted(processes, 'process', 'processes')}")
    if proxied:
        parts.append(f"{proxied} through the proxy" if processes else "through the proxy")
    return " and ".join(parts)


@dataclass
class RunOptions:
    """What ``agenttape run`` may add: where live traffic for an origin goes instead while
    recording (a local stand-in), and the faults to inject (``--fault``): Python processes
    get them in ``AGENTTAPE_FAULTS``, the proxy for every other program directly. Each
    process counts ``nth`` and ``times`` over the requests it makes itself."""

    routes: dict[Origin, Origin] = field(default_factory=dict)
    faults: list[Fault] = field(default_factory=list)


def run(
    command: list[str], cassette: Path, mode: str, report: Any, options: RunOptions | None = None
) -> int:
    """Run ``command`` under ``cassette``; returns the command's exit status (1 when it
    succeeded but a request through the proxy had no recorded interaction, or a TLS
    handshake with the proxy failed)."""
    options = options or RunOptions()
    cassette = cassette.resolve()
    each, needs_proxy = _checked(command, cassette, mode)
    if each == "replay":
        # Only the play log lives here: replay works from a read-only checkout too.
        fragments = Path(tempfile.mkdtemp(prefix="agenttape-run-"))
    else:
        cassette.parent.mkdir(parents=True, exist_ok=True)
        fragments = Path(tempfile.mkdtemp(prefix=f".{cassette.name}.run-", dir=cassette.parent))
    proxy: Proxy | None = None
    try:
        try:
            proxy = _proxy_if_any(
                functools.partial(
                    _start_proxy, command, cassette, each, fragments, mode, options, report
                ),
                report,
                needs_proxy,
            )
            status, signalled = _run_child(
                command, cassette, mode, each, fragments, proxy, options.faults
            )
        finally:
            if proxy is not None:
                proxy.close()
        if each != "replay":
            distrusted = bool(proxy and proxy.distrusted)
            _save(
                cassette, each, fragments, report, handshakes_failed=distrusted, signalled=signalled
            )
    finally:
        shutil.rmtree(fragments, ignore_errors=True)
    return status if proxy is None else _proxy_status(proxy, status, report)


def _checked(command: list[str], cassette: Path, mode: str) -> tuple[str, bool]:
    """What each process does (``process_mode``) and whether the command needs the proxy;
    AgentTapeError, before anything runs, when the run cannot be what was asked."""
    from . import proxy_command

    if cassette.exists():
        read(cassette)  # a damaged cassette stops the run before anything touches it
    each = process_mode(mode, cassette)
    if each == "replay" and not cassette.exists():
        raise AgentTapeError(
            f"cassette {cassette} does not exist and mode is {mode!r} (replay only); "
            "record it with --mode once or --mode all"
        )
    needs_proxy = not is_python(command)
    if needs_proxy and not proxy_command.available():
        raise AgentTapeError(
            f"{command[0]} is not a Python program: agenttape run records it through the "
            "recording proxy, which needs the 'proxy' extra: "
            "pip install 'agenttape-recorder[proxy]'"
        )
    return each, needs_proxy


def _proxy_if_any(start: Callable[[], Proxy], report: Any, needs_proxy: bool) -> Proxy | None:
    """The recording proxy, started when installed; a Python program does without it when it
    cannot start (it records in-process; only programs it starts miss out)."""
    from . import proxy_command

    if not proxy_command.available():
        return None
    try:
        return start()
    except AgentTapeError as exc:
        if needs_proxy:
            raise
        report(
            f"note: the recording proxy did not start ({exc}); only Python processes are recorded"
        )
        return None


def _proxy_status(proxy: Proxy, status: int, report: Any) -> int:
    """The run's status, 1 rather than 0 when the proxy met a request it had no recording
    for or a client that distrusted it (said through ``report``)."""
    from . import proxy_command

    if proxy.distrusted:
        # Also while recording: what those connections would have sent is not recorded.
        report(f"error: {proxy_command.describe_distrust(proxy)}")
    if proxy.misses:
        report(f"error: {proxy_command.describe_misses(proxy.misses)}")
    if proxy.distrusted or proxy.misses:
        return status or 1
    return status


def _start_proxy(
    command: list[str],
    cassette: Path,
    each: str,
    fragments: Path,
    mode: str,
    options: RunOptions,
    report: Any,
) -> Proxy:
    from .proxy_command import Proxy

    # A Python command's requests never pass the proxy: given the faults too, it would
    # report each of them as never fired.
    faults = () if is_python(command) else tuple(options.faults)
    proxy_cassette = open_cassette(cassette, each, fragments, mode, PROXY_LABEL, faults)
    try:
        return Proxy(
            proxy_cassette, routes=options.routes, log=lambda line: report(f"proxy: {line}")
        )
    except BaseException:
        proxy_cassette.stop()
        raise


def _save(
    cassette: Path,
    each: str,
    fragments: Path,
    report: Any,
    *,
    handshakes_failed: bool,
    signalled: str | None,
) -> None:
    """Merges what every process and the proxy recorded into the cassette; a run stopped
    by ``signalled`` (SIGINT, SIGTERM) marks it interrupted, as an exception marks a
    cassette left by one."""
    header, recorded, processes, proxied = _merge(fragments)
    if each == "new_episodes":
        header, existing = read(cassette)
        if recorded:
            _mark(header, signalled, len(existing) + len(recorded))
            write_atomic(cassette, codec.encode_pieces(header, existing + recorded))
        report(f"added {counted(len(recorded), 'interaction')} to {cassette}")
    elif not recorded:
        kept = "left as it was" if cassette.exists() else "not written"
        why = (
            "the command's TLS handshakes with the proxy failed (below)"
            if handshakes_failed
            else "the command made no HTTP request (did it fail before sending one, for a "
            "missing API key say?)"
        )
        report(f"nothing was recorded: {why}; {cassette} was {kept}, so the next run records again")
    else:
        header = header or meta.new_header()
        _mark(header, signalled, len(recorded))
        write_atomic(cassette, codec.encode_pieces(header, recorded))
        report(
            f"recorded {counted(len(recorded), 'interaction')} "
            f"{_sources(processes, proxied)} to {cassette}"
        )
    if signalled is not None and recorded:
        report(
            f"the run was stopped by {signalled}: {cassette} is marked interrupted; record "
            "it again to the end"
        )


def _mark(header: dict[str, Any], signalled: str | None, after: int) -> None:
    """``metadata["interrupted"]`` for a recording a signal cut short, as ``Cassette.stop``
    writes it for one an exception cut short."""
    if signalled is None:
        header.pop("interrupted", None)
    else:
        header["interrupted"] = {"after": after, "by": signalled}


def faults_environment(existing: str | None, faults: list[Fault]) -> str:
    """``AGENTTAPE_FAULTS`` for the command: the faults the user's environment gave, then
    ``faults``."""
    try:
        given = faults_from_environment(existing)
    except ValueError as exc:
        raise AgentTapeError(str(exc)) from None
    return json.dumps([fault_to_json(item) for item in (*given, *faults)])


def _run_child(
    command: list[str],
    cassette: Path,
    mode: str,
    each: str,
    fragments: Path,
    proxy: Proxy | None,
    faults: list[Fault],
) -> tuple[int, str | None]:
    """Runs the command; returns its exit status and the signal that interrupted the run,
    if any."""
    # Built once the proxy's cassette is open: a replay gives the child placeholder keys.
    environment = dict(os.environ)
    environment.update(sdk_keys.for_children())
    environment.pop(MODE_ENVIRONMENT_VARIABLE, None)
    python_path = environment.get("PYTHONPATH")
    environment["PYTHONPATH"] = os.pathsep.join(filter(None, [str(BOOTSTRAP), python_path]))
    environment[CASSETTE_VARIABLE] = str(cassette)
    environment[MODE_VARIABLE] = each
    environment[REQUESTED_MODE_VARIABLE] = mode
    environment[FRAGMENTS_VARIABLE] = str(fragments)
    if faults:
        environment[FAULTS_ENVIRONMENT_VARIABLE] = faults_environment(
            environment.get(FAULTS_ENVIRONMENT_VARIABLE), faults
        )
    if proxy is not None:
        from .proxy_command import NO_PROXY_VARIABLES

        environment.update(proxy.environment(fragments, environment))
        for name in NO_PROXY_VARIABLES:  # everything the program sends is recorded
            environment.pop(name, None)
    with _forwarding() as forwarder:
        try:
            child = subprocess.Popen(_python(command), env=environment)
        except FileNotFoundError:
            raise AgentTapeError(f"command not found: {command[0]}") from None
        except PermissionError:
            raise AgentTapeError(f"command is not executable: {command[0]}") from None
        forwarder.started(child)
        status = child.wait()
    if status < 0:
        status = 128 - status
    return status, forwarder.received[0].name if forwarder.received else None


@dataclass(slots=True)
class _Forwarder:
    """Ctrl-C (SIGINT) and SIGTERM sent to ``agenttape run`` go to the command too, which
    stops and saves what it recorded; ``received`` names them for the cassette's mark. A
    Ctrl-C typed at the terminal already reached the command (it shares the terminal's
    process group) and is not sent twice. A second signal stops the command for good. One
    that comes while the command is starting is sent as soon as it has started: it never
    ends ``agenttape run`` alone, leaving the command running without it."""

    child: subprocess.Popen[bytes] | None = None
    received: list[signal.Signals] = field(default_factory=list)

    def __call__(self, number: int, frame: Any) -> None:
        if self.received and self.child is not None:
            self.child.kill()
        received = signal.Signals(number)
        self.received.append(received)
        if self.child is not None:
            self._send(self.child, received)

    def started(self, child: subprocess.Popen[bytes]) -> None:
        self.child = child
        if self.received:
            self._send(child, self.received[0])

    @staticmethod
    def _send(child: subprocess.Popen[bytes], received: signal.Signals) -> None:
        if received != signal.SIGINT or not _typed_at_terminal():
            with contextlib.suppress(ProcessLookupError):
                child.send_signal(received)


@contextlib.contextmanager
def _forwarding() -> Iterator[_Forwarder]:
    """Forwards the signals from before the command starts until it has ended (from the
    main thread only, where Python handles signals)."""
    forwarder = _Forwarder()
    if threading.current_thread() is not threading.main_thread():
        yield forwarder
        return
    previous = {number: signal.signal(number, forwarder) for number in _FORWARDED}
    try:
        yield forwarder
    finally:
        for number, handler in previous.items():
            signal.signal(number, handler)


_FORWARDED = (signal.SIGINT, signal.SIGTERM)


def _typed_at_terminal() -> bool:
    """Whether this process's group is in the foreground of its terminal: a Ctrl-C typed
    there reached every process of the group, the command included."""
    if not hasattr(os, "tcgetpgrp"):
        return False
    for stream in (sys.stdin, sys.stdout, sys.stderr):
        try:
            descriptor = stream.fileno()
            if os.isatty(descriptor):
                return os.tcgetpgrp(descriptor) == os.getpgrp()
        except (AttributeError, OSError, ValueError):
            continue
    return False
