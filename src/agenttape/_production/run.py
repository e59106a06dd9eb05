"""One agent run in production: a tape that always records, never replays.

Adapters find a run through the runtime like any cassette, and its ``begin`` always answers
with a Recording, so every stream still reaches the caller chunk by chunk as it arrives. The
run lives in a context variable only (never process-wide), so runs in parallel threads and
tasks each see their own exchanges.
"""

from __future__ import annotations

import contextvars
import datetime as _dt
import functools
import logging
import re
import threading
import time
from collections.abc import Callable
from contextvars import Token
from pathlib import Path
from typing import Any, ParamSpec, TypeVar
from urllib.parse import urlsplit

from .._core import runtime
from .._core.errors import AgentTapeError, UnmatchedInteractionError
from .._core.models import Frame, Headers, Interaction, Request
from .._core.options import Mode
from .._core.redaction import Redactor
from .._core.tape import Recording, Tape
from .._core.wire import codec
from .store import SUFFIX

logger = logging.getLogger("agenttape.recorder")

RUN_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")
# Bytes counted per exchange and per header on top of the bodies, for the objects holding them.
EXCHANGE_OVERHEAD = 512
HEADER_OVERHEAD = 96
FRAME_OVERHEAD = 64
MAX_REASONS = 5
# A cold case's reason starts so (``run.flag(..., cold=True)``, ``agenttape runs mark --cold``).
COLD = "cold: "

P = ParamSpec("P")
R = TypeVar("R")


def _where(request: Request) -> str:
    """Method, host and path: user info and query may carry secrets and stay out of reasons."""
    try:
        parts = urlsplit(request.url)
    except ValueError:
        return f"{request.method} (an unparseable URL)"
    return f"{request.method} {parts.scheme}://{parts.netloc.rpartition('@')[2]}{parts.path}"


class _RunRecording(Recording):
    """Counts every chunk against the run's byte budget and stops holding bytes past it."""

    __slots__ = ("_run",)

    def __init__(self, run: Run, request: Request, boundary: str) -> None:
        super().__init__(run, request, boundary)
        self._run: Run | None = run

    def chunk(self, data: bytes) -> None:
        run = self._run
        if run is None or run.overflowed:
            return
        run.spend(len(data))
        Recording.chunk(self, data)

    def frame(self, frame: Frame) -> bool:
        """A WebSocket frame past the run's budget is not kept, nor any after it: the
        session keeps the frames before it and is marked cut."""
        run = self._run
        if run is None or run.overflowed:
            return False
        run.spend(len(frame.payload) + FRAME_OVERHEAD)
        if run.overflowed:
            kept = len(self.interaction.frames or ())
            logger.warning(
                "agenttape recorder: run %s outgrew max_bytes_per_run in a WebSocket session "
                "to %s: its first %d frames are kept, the rest left out, and it is marked cut",
                run.run_id,
                _where(self.interaction.request),
                kept,
            )
            return False
        return Recording.frame(self, frame)

    def finish(self, truncated: bool = False) -> None:
        if self.finished:
            return
        Recording.finish(self, truncated)
        self._run = None  # as the tape in Recording.finish


class Run(runtime.Block):
    """One agent run: every exchange made in its context goes into its own cassette.

    Open it with ``with recorder.run(**tags) as run`` (or ``async with``). Tasks started inside
    the block and ``asyncio.to_thread`` inherit it; a worker thread of a pool joins it through
    ``run.bind(function)`` (or ``contextvars.copy_context().run``).
    """

    # What a run is to the adapters: it records everything, waits as the agent waits and
    # lets every connection through.
    mode: Mode = "all"
    is_recording = True
    realtime = False
    fast_retries = False
    fills_keys = False
    block_network = False
    allowed_hosts: tuple[str, ...] = ()
    ignore_json_fields: tuple[str, ...] = ()

    def __init__(
        self,
        run_id: str,
        tags: dict[str, Any],
        *,
        redactor: Redactor,
        budget: int,
        on_end: Callable[[Run], None],
    ) -> None:
        codec.check_tags(tags)
        self.run_id = run_id
        self.tags = tags
        self.path = Path(run_id + SUFFIX)
        self.redactor = redactor
        self.interactions: list[Interaction] = []
        self.flags: list[str] = []
        # Which flags are cold cases (their positions in ``flags``).
        self.cold: set[int] = set()
        self.status: str | None = None
        self.kept: bool | None = None
        self.started: _dt.datetime | None = None
        self.duration: float | None = None
        self.is_active = False
        self.used_bytes = 0
        self.overflowed = False
        self.dropped = 0
        self._budget = budget
        self._on_end = on_end
        self._lock = threading.Lock()
        self._pending: set[Recording] = set()
        self._token: Token[Tape | None] | None = None
        self._t0 = 0.0
        self._closed = False
        self._deferred = False
        self._complete: set[int] = set()
        self._errors: list[str] = []
        self._error_count = 0
        self._raised: str | None = None

    def __repr__(self) -> str:
        return f"<Run {self.run_id!r} tags={self.tags!r} status={self.status!r}>"

    def flag(self, reason: str = "flagged", *, cold: bool = False) -> None:
        """Mark this run worth keeping (``keep="errors"`` keeps flagged runs), with why.
        ``cold``: a case that cannot be replayed (it happened once, or a capture is missing),
        counted apart by ``agenttape runs --errors --by``."""
        if cold:
            self.cold.add(len(self.flags))
        self.flags.append(str(reason))

    def bind(self, function: Callable[P, R]) -> Callable[P, R]:
        """``function`` for a worker thread of this run: ``pool.submit(run.bind(work), item)``.

        Call it inside the run's block; each call runs in a fresh copy of this context, so
        many workers may run it at once.
        """
        context = contextvars.copy_context()

        @functools.wraps(function)
        def bound(*args: P.args, **kwargs: P.kwargs) -> R:
            return context.copy().run(function, *args, **kwargs)

        return bound

    def __call__(self, function: Callable[..., Any]) -> Any:
        raise TypeError(
            "a run is opened with `with recorder.run(...)`; it does not decorate functions"
        )

    # -- activation --------------------------------------------------------------------

    def _open(self) -> None:
        self._start()

    def _close(self, exc: BaseException | None) -> None:
        if exc is not None:
            message = str(exc)
            self._raised = (f"{type(exc).__name__}: {message}" if message else type(exc).__name__)[
                :300
            ]
        self._stop()

    def _start(self) -> None:
        if self.started is not None:
            raise AgentTapeError(
                f"run {self.run_id} was already entered; start another with recorder.run()"
            )
        self.started = _dt.datetime.now(_dt.UTC)
        self._t0 = time.perf_counter()
        outer = runtime.active()
        if outer is not None and not isinstance(outer, Run):
            # A cassette already serves this code (a test replaying a recorded run): it stays
            # in charge, and this run records nothing.
            self._deferred = True
            return
        try:
            self._token = runtime.activate(self, process_wide=False)
        except Exception:
            # A recorder must never break the service: this run just records nothing.
            logger.exception("agenttape recorder: run %s could not start recording", self.run_id)
            self._deferred = True
            return
        self.is_active = True

    def _stop(self) -> None:
        self.duration = time.perf_counter() - self._t0
        if self._deferred:
            self.kept = False
            return
        if not self._deactivate():
            return
        with self._lock:
            self._closed = True
            pending = list(self._pending)
        for recording in pending:
            recording.finish(truncated=True)
        if self.overflowed:
            complete = self._complete
            whole = [i for i in self.interactions if id(i) in complete]
            self.dropped += len(self.interactions) - len(whole)
            self.interactions = whole
        try:
            self._on_end(self)
        except Exception:
            self.kept = False
            logger.exception("agenttape recorder: run %s could not be kept", self.run_id)

    # -- recording (always): the Tape ----------------------------------------------------

    def spend(self, size: int) -> None:
        """Counts ``size`` bytes against the run's budget; past it the run keeps only the
        exchanges already complete."""
        # Unlocked on purpose: the budget bounds memory, a few bytes of slack do not matter.
        self.used_bytes += size
        if self.used_bytes > self._budget:
            self.overflowed = True

    def begin(self, request: Request, boundary: str = "http") -> Recording:
        """Always record, HTTP and function boundaries alike; requests are redacted on the
        writer thread, off the request path."""
        self.spend(len(request.body) + HEADER_OVERHEAD * len(request.headers) + EXCHANGE_OVERHEAD)
        return _RunRecording(self, request, boundary)

    def candidates(self, request: Request, boundary: str = "http") -> None:
        """A run never replays: every request runs live."""
        return None

    def precedents(self, interaction: Interaction) -> None:
        """A run never replays."""
        return None

    def response_headers(self, headers: Headers) -> Headers:
        return self.redactor.response_headers(headers)

    def client_frame(self, payload: bytes) -> bytes:
        return payload  # redacted on the writer thread with the requests

    def missed(self, error: UnmatchedInteractionError) -> None:
        """A run never replays, so it never misses."""

    def responded(self, recording: Recording) -> None:
        interaction = recording.interaction
        response = interaction.response
        with self._lock:
            if response is None or response.status >= 400:
                self._note_error(interaction)
            if self._closed or self.overflowed:
                self.dropped += 1
                return
            if response is not None:
                self.spend(HEADER_OVERHEAD * len(response.headers))
            self.interactions.append(interaction)
            self._pending.add(recording)

    def sealed(self, recording: Recording) -> None:
        with self._lock:
            if recording in self._pending:
                self._pending.discard(recording)
                # A WebSocket session keeps the frames it held within the budget, and says
                # it was cut (see _RunRecording.frame).
                if not self.overflowed or recording.interaction.frames is not None:
                    self._complete.add(id(recording.interaction))

    def _note_error(self, interaction: Interaction) -> None:
        self._error_count += 1
        if len(self._errors) >= MAX_REASONS:
            return
        error = interaction.error
        if interaction.boundary != "http" and error is not None:
            # A function boundary that raised: its type is "module:QualName".
            self._errors.append(f"{interaction.boundary} raised {error.type.rpartition(':')[2]}")
            return
        where = _where(interaction.request)
        if interaction.response is not None:
            self._errors.append(f"HTTP {interaction.response.status} from {where}")
        elif error is not None:
            self._errors.append(f"{error.type} on {where}")

    def outcome(self) -> tuple[str, list[str]]:
        """The run's status and the reasons for it, most serious first."""
        if self._raised is None and not self.flags and not self._error_count:
            return "ok", []
        reasons = []
        if self._raised is not None:
            reasons.append(f"raised {self._raised}")
        reasons.extend(
            f"{COLD if number in self.cold else 'flagged: '}{flag}"
            for number, flag in enumerate(self.flags)
        )
        reasons.extend(self._errors)
        if self._error_count > len(self._errors):
            reasons.append(f"{self._error_count - len(self._errors)} more failed exchanges")
        if self._raised is not None:
            return "raised", reasons
        if self.flags:
            return "flagged", reasons
        if self._error_count:
            return "failed", reasons
        return "ok", reasons
