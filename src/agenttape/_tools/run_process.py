"""Each Python process of ``agenttape run``: the cassette it opens before user code runs.

The bootstrap's ``sitecustomize`` calls ``start_in_process`` in every Python process the run
starts, as the environment variables below say: recording, each process writes only what it
recorded to a fragment of its own (the parent merges them, ``run_command``); replaying, the
processes share one play log, so a request two of them make gets the recorded responses in
order, each once.
"""

from __future__ import annotations

import atexit
import functools
import json
import os
import signal
import sys
import threading
import time
import uuid
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

from .._core import tracebacks
from .._core.cassette import Cassette
from .._core.errors import AgentTapeError
from .._core.faults import Fault
from .._core.files import write_atomic
from .._core.wire import codec
from .proxy_command import USER_PROXIES_VARIABLE

CASSETTE_VARIABLE = "AGENTTAPE_RUN_CASSETTE"
MODE_VARIABLE = "AGENTTAPE_RUN_MODE"
FRAGMENTS_VARIABLE = "AGENTTAPE_RUN_FRAGMENTS"
REQUESTED_MODE_VARIABLE = "AGENTTAPE_RUN_REQUESTED_MODE"

# What each process does, decided once by the parent: "replay" (read only), "record"
# (everything to a fragment) or "new_episodes" (replay, misses to a fragment).
PROCESS_MODES = ("replay", "record", "new_episodes")


class Fragment:
    """Where one process of the run saves what it recorded: a fragment file of its own,
    holding only the interactions recorded after ``opened`` (the parent merges them)."""

    def __init__(self, folder: Path, label: str = "") -> None:
        self.folder = folder
        self.label = label
        self.first_new = 0
        self.path = self._name()

    def _name(self) -> Path:
        label = f"-{self.label}" if self.label else ""
        return (
            self.folder
            / f"{time.time_ns():020d}-{os.getpid()}{label}-{uuid.uuid4().hex[:8]}.msgpack"
        )

    def opened(self, cassette: Cassette) -> None:
        self.first_new = len(cassette.interactions)

    def forked(self, cassette: Cassette) -> None:
        """In a forked child: what the parent recorded is the parent's to save. A
        multiprocessing child leaves through ``os._exit``, past atexit, so it saves from
        multiprocessing's own exit hook."""
        self.first_new = len(cassette.interactions)
        self.path = self._name()
        util = sys.modules.get("multiprocessing.util")
        if util is not None:
            util.register_after_fork(cassette, _save_at_multiprocessing_exit)

    def save(self, cassette: Cassette) -> None:
        recorded = cassette.interactions[self.first_new :]
        if recorded:
            write_atomic(self.path, codec.encode_pieces(cassette.metadata, recorded))


class PlayLog:
    """The run's play log: every replaying process appends the positions it played, so
    identical requests made by different processes are served in recorded order, each
    recorded response once, as within one process."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def claim(self, play_counts: list[int], choose: Callable[[], int | None]) -> int | None:
        try:
            import fcntl
        except ImportError:
            return choose()
        with open(self.path, "a+") as handle:
            fcntl.flock(handle, fcntl.LOCK_EX)
            try:
                handle.seek(0)
                for word in handle.read().split():
                    played = int(word)
                    if played < len(play_counts) and not play_counts[played]:
                        play_counts[played] = 1
                position = choose()
                if position is not None:
                    handle.write(f"{position}\n")
                    handle.flush()
                return position
            finally:
                fcntl.flock(handle, fcntl.LOCK_UN)


REPLAY_HINT = (
    "To re-record: agenttape run --mode all -- COMMAND, or --mode new_episodes to add "
    "only the missing requests."
)


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
        fragment = Fragment(fragments, label)
        if process_mode == "record":
            # Opened on a fresh fragment name: nothing on disk is read or overwritten.
            recorder = Cassette(fragment.path, mode="all", faults=faults)
        else:
            recorder = Cassette(path, mode="new_episodes", faults=faults)
        recorder.keeping = fragment
        recorder.start()
        fragment.opened(recorder)
        return recorder
    cassette = Cassette(path, mode="none", faults=faults)
    cassette.shared_plays = PlayLog(fragments / "played")
    cassette.mode_label = f"{requested!r}, through agenttape run"
    cassette.rerecord_hint = REPLAY_HINT
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
    fragment = cassette.keeping
    if isinstance(fragment, Fragment) and hasattr(os, "register_at_fork"):
        # not on Windows: nothing forks
        os.register_at_fork(after_in_child=functools.partial(fragment.forked, cassette))
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
