"""``agenttape run``: a program that never imports agenttape, and every process it starts,
recorded and replayed through one cassette.

How: the command runs with ``agenttape/_bootstrap`` first on PYTHONPATH; its
``sitecustomize`` opens a cassette in each Python process before user code runs, as the
environment variables below say. Every other program (Node, curl, Go, a JVM) reaches the
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

import atexit
import contextlib
import heapq
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid
import warnings
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .._adapters import sdk_keys
from .._core import codec, meta, tracebacks
from .._core.cassette import Cassette
from .._core.errors import AgentTapeError
from .._core.faults import (
    FAULTS_ENVIRONMENT_VARIABLE,
    Fault,
    fault_to_json,
    faults_from_environment,
)
from .._core.files import read, write_atomic
from .._core.matching import Matcher
from .._core.models import Interaction
from .._core.options import MODE_ENVIRONMENT_VARIABLE, Mode
from .._core.replay_queue import Key, ReplayQueue
from .._core.text import counted
from .proxy_command import USER_PROXIES_VARIABLE

if TYPE_CHECKING:
    from .._proxy.upstream import Origin
    from .proxy_command import Proxy

CASSETTE_VARIABLE = "AGENTTAPE_RUN_CASSETTE"
MODE_VARIABLE = "AGENTTAPE_RUN_MODE"
FRAGMENTS_VARIABLE = "AGENTTAPE_RUN_FRAGMENTS"
REQUESTED_MODE_VARIABLE = "AGENTTAPE_RUN_REQUESTED_MODE"
BOOTSTRAP = Path(__file__).resolve().parent.parent / "_bootstrap"

# What each process does, decided once by the parent: "replay" (read only), "record"
# (everything to a fragment) or "new_episodes" (replay, misses to a fragment).
PROCESS_MODES = ("replay", "record", "new_episodes")


class _FragmentCassette(Cassette):
    """A cassette that saves only what this process recorded, to its own fragment file."""

    def __init__(
        self,
        path: Path,
        fragments: Path,
        mode: Mode,
        label: str = "",
        faults: tuple[Fault, ...] = (),
    ) -> None:
        super().__init__(path, mode=mode, faults=faults)
        self.fragments = fragments
        self.label = label
        self.first_new = 0
        self.fragment = self._fragment_name()

    def _fragment_name(self) -> Path:
        label = f"-{self.label}" if self.label else ""
        return (
            self.fragments
            / f"{time.time_ns():020d}-{os.getpid()}{label}-{uuid.uuid4().hex[:8]}.msgpack"
        )

    def open(self) -> None:
        self.start()
        self.first_new = len(self.interactions)

    def forked(self) -> None:
        """In a forked child: what the parent recorded is the parent's to save. A
        multiprocessing child leaves through ``os._exit``, past atexit, so it saves from
        multiprocessing's own exit hook."""
        self.first_new = len(self.interactions)
        self.fragment = self._fragment_name()
        util = sys.modules.get("multiprocessing.util")
        if util is not None:
            util.register_after_fork(self, _save_at_multiprocessing_exit)

    def save(self) -> None:
        recorded = self.interactions[self.first_new :]
        if recorded:
            write_atomic(self.fragment, codec.encode_pieces(self.metadata, recorded))


class _SharedReplayCassette(Cassette):
    """Replay whose play counts every process of the run shares through a play log file, so
    identical requests made by different processes are served in recorded order, each
    recorded response once, as within one process."""

    rerecord_hint = (
        "To re-record: agenttape run --mode all -- COMMAND, or --mode new_episodes to add "
        "only the missing requests."
    )

    def __init__(
        self, path: Path, play_log: Path, requested_mode: str, faults: tuple[Fault, ...] = ()
    ) -> None:
        super().__init__(path, mode="none", faults=faults)
        self.play_log = play_log
        self.mode_label = f"{requested_mode!r}, through agenttape run"

    def start(self) -> None:
        super().start()
        shared = _PlayLogQueue(self.matcher, self.play_log)
        for interaction in self.interactions:
            shared.add(interaction, played=False)
        self.queue = shared


class _PlayLogQueue(ReplayQueue):
    """A replay queue whose plays are written to, and read from, a play log file."""

    __slots__ = ("play_log",)

    def __init__(self, matcher: Matcher, play_log: Path) -> None:
        super().__init__(matcher)
        self.play_log = play_log

    def take(self, key: Key) -> Interaction | None:
        try:
            import fcntl
        except ImportError:
            return super().take(key)
        with open(self.play_log, "a+") as handle:
            fcntl.flock(handle, fcntl.LOCK_EX)
            try:
                handle.seek(0)
                counts = self.play_counts
                for word in handle.read().split():
                    played = int(word)
                    if played < len(counts) and not counts[played]:
                        counts[played] = 1
                position = self.next_position(key)
                if position is None:
                    return None
                counts[position] += 1
                handle.write(f"{position}\n")
                handle.flush()
                return self.interactions[position]
            finally:
                fcntl.flock(handle, fcntl.LOCK_UN)


def open_cassette(
    path: Path,
    process_mode: str,
    fragments: Path,
    requested: str,
    label: str = "",
    faults: tuple[Fault, ...] = (),
) -> Cassette:
    """The cassette one process of the run serves, started: it records to a fragment of its
    own, or replays sharing the run's play log. ``faults`` are the proxy's
    (a Python process reads its own from ``AGENTTAPE_FAULTS``)."""
    if process_mode in ("record", "new_episodes"):
        if process_mode == "record":
            # Opened on a fresh fragment name: nothing on disk is read or overwritten.
            recorder = _FragmentCassette(fragments / "recording", fragments, "all", label, faults)
            recorder.path = recorder.fragment
        else:
            recorder = _FragmentCassette(path, fragments, "new_episodes", label, faults)
        recorder.open()
        return recorder
    cassette = _SharedReplayCassette(path, fragments / "played", requested, faults)
    cassette.start()
    return cassette


def start_in_process() -> None:
    """Called by the bootstrap: open the cassette for this process, close it at exit."""
    path = Path(os.environ[CASSETTE_VARIABLE])
    process_mode = os.environ.get(MODE_VARIABLE, "replay")
    fragments = Path(os.environ.get(FRAGMENTS_VARIABLE) or path.parent)
    requested = os.environ.get(REQUESTED_MODE_VARIABLE, "none")
    try:
        cassette = open_cassette(path, process_mode, fragments, requested)
    except AgentTapeError as exc:
        # Never run the program unprotected. SystemExit here would make the interpreter
        # report a fatal error in site, with a traceback, so leave at once instead.
        sys.stderr.write(f"agenttape run: error: {exc}\n")
        sys.stderr.flush()
        os._exit(2)
    tracebacks.install_hook()
    _save_on_sigterm()
    if isinstance(cassette, _FragmentCassette) and hasattr(os, "register_at_fork"):
        os.register_at_fork(after_in_child=cassette.forked)  # not on Windows: nothing forks
    user_proxies = os.environ.get(USER_PROXIES_VARIABLE)
    if user_proxies is not None:
        _keep_user_proxies(user_proxies)
    atexit.register(_close, cassette)


def _save_on_sigterm() -> None:
    """SIGTERM, which ``agenttape run`` passes on when it gets one, ends a Python process
    without running ``atexit``: what it recorded would be lost. Unless the program handles
    SIGTERM itself, it leaves as ``sys.exit(143)`` does instead (the status a shell reports
    for SIGTERM), running its ``finally`` blocks and saving what it recorded."""
    if threading.current_thread() is not threading.main_thread():
        return
    if signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL:
        return

    def leave(number: int, frame: Any) -> None:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)  # a second one ends it at once
        raise SystemExit(128 + number)

    signal.signal(signal.SIGTERM, leave)


def _keep_user_proxies(saved: str) -> None:
    """This process records in-process, so its HTTP libraries (httpx, requests, aiohttp,
    urllib) keep the proxy settings the user had, read through ``urllib.request``, instead of
    the run's recording proxy: nothing is recorded twice. The environment itself is left as
    the run set it, so a program this process starts (Node, curl) still goes through the
    proxy."""
    import urllib.request

    try:
        proxies = {str(k): str(v) for k, v in json.loads(saved).items()}
    except (ValueError, AttributeError):
        proxies = {}

    def getproxies() -> dict[str, str]:
        return dict(proxies)

    # ``proxy_bypass`` (NO_PROXY) reads ``getproxies_environment`` when it is called.
    urllib.request.getproxies = getproxies
    urllib.request.getproxies_environment = getproxies


def _save_at_multiprocessing_exit(cassette: Cassette) -> None:
    import multiprocessing.util

    multiprocessing.util.Finalize(None, _close, args=(cassette,), exitpriority=0)


def _close(cassette: Cassette) -> None:
    try:
        with warnings.catch_warnings():
            # The run says once, for all its processes, when nothing was recorded.
            warnings.filterwarnings("ignore", "nothing was recorded into ", UserWarning)
            cassette.__exit__(None, None, None)
    except AgentTapeError as exc:
        sys.stderr.write(f"agenttape run: error: {exc}\n")


def process_mode(mode: str, cassette: Path) -> str:
    """The per-process mode for a cassette mode, with the same rules as use_cassette."""
    if mode == "all" or (mode in ("once", "new_episodes") and not cassette.exists()):
        return "record"
    if mode == "new_episodes":
        return "new_episodes"
    return "replay"


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
    from . import proxy_command

    options = options or RunOptions()
    cassette = cassette.resolve()
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
    if each == "replay":
        # Only the play log lives here: replay works from a read-only checkout too.
        fragments = Path(tempfile.mkdtemp(prefix="agenttape-run-"))
    else:
        cassette.parent.mkdir(parents=True, exist_ok=True)
        fragments = Path(tempfile.mkdtemp(prefix=f".{cassette.name}.run-", dir=cassette.parent))
    proxy: Proxy | None = None
    try:
        try:
            if proxy_command.available():
                try:
                    proxy = _start_proxy(command, cassette, each, fragments, mode, options, report)
                except AgentTapeError as exc:
                    if needs_proxy:
                        raise
                    # A Python program records in-process; only programs it starts miss out.
                    report(
                        f"note: the recording proxy did not start ({exc}); only Python "
                        "processes are recorded"
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
    if proxy is not None:
        failed = bool(proxy.distrusted or proxy.misses)
        if proxy.distrusted:
            # Also while recording: what those connections would have sent is not recorded.
            report(f"error: {proxy_command.describe_distrust(proxy)}")
        if proxy.misses:
            report(f"error: {proxy_command.describe_misses(proxy.misses)}")
        if failed:
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
