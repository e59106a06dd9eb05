"""Capture in production: one replayable cassette per agent run, written behind the request path.

A run is a passthrough cassette: adapters find it through the runtime like any cassette, and
its ``begin`` always answers with a Recording, so every stream still reaches the caller chunk by
chunk as it arrives. The run lives in a context variable only (never process-wide), so runs in
parallel threads and tasks each see their own exchanges. When a run ends, the recorder decides
whether to keep it and hands it to one background writer through a queue bounded in bytes; a
full queue or a failing store loses that run (logged and counted), never the agent's request.
"""

from __future__ import annotations

import atexit
import contextvars
import datetime as _dt
import functools
import logging
import os
import random
import re
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any, ParamSpec, TypeVar
from urllib.parse import urlsplit

from . import _format, _runtime
from ._cassette import Cassette, Recording
from ._errors import AgentTapeError
from ._models import Interaction, Request
from ._redaction import Redactor
from ._secrets import scrub_text
from ._store import SUFFIX, Store, open_store

logger = logging.getLogger("agenttape.recorder")

KEEP = ("errors", "all", "sampled")
RUN_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")
# Bytes counted per exchange and per header on top of the bodies, for the objects holding them.
EXCHANGE_OVERHEAD = 512
HEADER_OVERHEAD = 96
# How long interpreter exit waits for the writer before giving up on queued runs.
EXIT_TIMEOUT = 10.0
# A loss is logged at most once per this many seconds per kind, with the count in between.
LOSS_LOG_INTERVAL = 10.0
MAX_REASONS = 5

# Run ids come from a generator of our own, seeded by the system once (and again in a forked
# child): os.urandom per run would release the GIL on every request a busy service handles,
# and the process-wide random module repeats after any random.seed() in user code.
_run_ids = random.Random()

P = ParamSpec("P")
R = TypeVar("R")
F = TypeVar("F", bound=Callable[..., Any])


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
        if run is None or run._overflow:
            return
        run._spend(len(data))
        Recording.chunk(self, data)

    def finish(self, truncated: bool = False) -> None:
        if self.finished:
            return
        Recording.finish(self, truncated)
        self._run = None  # as the cassette in Recording.finish


class Run(Cassette):
    """One agent run: every exchange made in its context goes into its own cassette.

    Open it with ``with recorder.run(**tags) as run`` (or ``async with``). Tasks started inside
    the block and ``asyncio.to_thread`` inherit it; a worker thread of a pool joins it through
    ``run.bind(function)`` (or ``contextvars.copy_context().run``).
    """

    def __init__(self, recorder: Recorder, run_id: str, tags: dict[str, Any]) -> None:
        # A run never replays: it matches on nothing (which also makes it cheap to build) and
        # leaves every wait and connection of the agent as it is.
        super().__init__(
            run_id + SUFFIX,
            mode="all",
            match_on=(),
            tags=tags,
            block_network=False,
            fast_retries=False,
        )
        self.redactor = recorder._redactor
        self.recorder = recorder
        self.run_id = run_id
        self.flags: list[str] = []
        self.status: str | None = None
        self.kept: bool | None = None
        self.started: _dt.datetime | None = None
        self.duration: float | None = None
        self._t0 = 0.0
        self._budget = recorder.max_bytes_per_run
        self._used = 0
        self._overflow = False
        self._closed = False
        self._deferred = False
        self._complete: set[int] = set()
        self._dropped = 0
        self._errors: list[str] = []
        self._error_count = 0
        self._raised: str | None = None

    def __repr__(self) -> str:
        return f"<Run {self.run_id!r} tags={self.tags!r} status={self.status!r}>"

    def flag(self, reason: str = "flagged") -> None:
        """Mark this run worth keeping (``keep="errors"`` keeps flagged runs), with why."""
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

    # -- activation --------------------------------------------------------------------

    def __enter__(self) -> Run:
        self._start()
        return self

    async def __aenter__(self) -> Run:
        return self.__enter__()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        if exc is not None:
            message = str(exc)
            self._raised = (f"{type(exc).__name__}: {message}" if message else type(exc).__name__)[
                :300
            ]
        self._stop(failed=exc is not None)

    def __call__(self, function: F) -> F:
        raise TypeError(
            "a run is opened with `with recorder.run(...)`; it does not decorate functions"
        )

    def _start(self) -> None:
        if self.started is not None:
            raise AgentTapeError(
                f"run {self.run_id} was already entered; start another with recorder.run()"
            )
        self.started = _dt.datetime.now(_dt.timezone.utc)
        self._t0 = time.perf_counter()
        outer = _runtime.active()
        if outer is not None and not isinstance(outer, Run):
            # A cassette already serves this code (a test replaying a recorded run): it stays
            # in charge, and this run records nothing.
            self._deferred = True
            return
        try:
            self._token = _runtime.activate(self, process_wide=False)
        except Exception:
            # A recorder must never break the service: this run just records nothing.
            logger.exception("agenttape recorder: run %s could not start recording", self.run_id)
            self._deferred = True
            return
        self._recording = True
        self.is_active = True

    def _stop(self, failed: bool) -> None:
        self.duration = time.perf_counter() - self._t0
        if self._deferred:
            self.kept = False
            return
        if not self.is_active:
            return
        self.is_active = False
        assert self._token is not None
        _runtime.deactivate(self, self._token)
        self._token = None
        with self._lock:
            self._closed = True
            pending = list(self._pending)
        for recording in pending:
            recording.finish(truncated=True)
        if self._overflow:
            complete = self._complete
            whole = [i for i in self.interactions if id(i) in complete]
            self._dropped += len(self.interactions) - len(whole)
            self.interactions = whole
        try:
            self.recorder._finish(self)
        except Exception:
            self.kept = False
            logger.exception("agenttape recorder: run %s could not be kept", self.run_id)

    # -- recording (always) ------------------------------------------------------------

    def _spend(self, size: int) -> None:
        # Unlocked on purpose: the budget bounds memory, a few bytes of slack do not matter.
        self._used += size
        if self._used > self._budget:
            self._overflow = True

    def begin(self, request: Request, boundary: str = "http") -> Recording:
        """Always record, HTTP and function boundaries alike; requests are redacted on the
        writer thread, off the request path."""
        self._spend(len(request.body) + HEADER_OVERHEAD * len(request.headers) + EXCHANGE_OVERHEAD)
        return _RunRecording(self, request, boundary)

    def _record(self, recording: Recording) -> None:
        interaction = recording.interaction
        response = interaction.response
        with self._lock:
            if response is None or response.status >= 400:
                self._note_error(interaction)
            if self._closed or self._overflow:
                self._dropped += 1
                return
            if response is not None:
                self._spend(HEADER_OVERHEAD * len(response.headers))
            self.interactions.append(interaction)
            self._pending.add(recording)

    def _sealed(self, recording: Recording) -> None:
        with self._lock:
            if recording in self._pending:
                self._pending.discard(recording)
                if not self._overflow:
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

    def _outcome(self) -> tuple[str, list[str]]:
        """The run's status and the reasons for it, most serious first."""
        if self._raised is None and not self.flags and not self._error_count:
            return "ok", []
        reasons = []
        if self._raised is not None:
            reasons.append(f"raised {self._raised}")
        reasons.extend(f"flagged: {flag}" for flag in self.flags)
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


@dataclass(slots=True, frozen=True)
class RecorderStats:
    """Counters since the recorder started; ``lost`` runs were kept but never reached the store."""

    runs: int
    kept: int
    written: int
    dropped: int
    failed: int
    bytes_written: int
    queued_bytes: int

    @property
    def lost(self) -> int:
        return self.dropped + self.failed


@dataclass(slots=True)
class _Job:
    run_id: str
    name: str
    started: _dt.datetime
    tags: dict[str, Any]
    summary: dict[str, Any]
    interactions: list[Interaction]
    size: int


class _LossLog:
    """Logs each kind of loss at most once per interval, with the count it kept quiet about."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._last: dict[str, float] = {}
        self._quiet: dict[str, int] = {}

    def warn(self, kind: str, message: str) -> None:
        now = time.monotonic()
        with self._lock:
            last = self._last.get(kind)
            if last is not None and now - last < LOSS_LOG_INTERVAL:
                self._quiet[kind] = self._quiet.get(kind, 0) + 1
                return
            self._last[kind] = now
            quiet = self._quiet.pop(kind, 0)
        if quiet:
            message += f" ({quiet} more run(s) lost the same way since the last report)"
        logger.warning("agenttape recorder: %s", message)


class _Writer:
    """One daemon thread writing finished runs; its queue is bounded in bytes (past the limit
    a run is refused, never waited for)."""

    def __init__(self, store: Store, redactor: Redactor, limit: int, losses: _LossLog) -> None:
        self._store = store
        self._redactor = redactor
        self._limit = limit
        self._losses = losses
        self._cond = threading.Condition()
        self._jobs: deque[_Job] = deque()
        self._queued_bytes = 0
        self._closed = False
        self._thread: threading.Thread | None = None
        self._base: dict[str, Any] | None = None
        self.dropped = 0
        self.failed = 0
        self.written = 0
        self.bytes_written = 0

    @property
    def queued_bytes(self) -> int:
        return self._queued_bytes

    def submit(self, job: _Job) -> bool:
        with self._cond:
            if self._closed:
                refused = "the recorder is closed"
            elif self._jobs and self._queued_bytes + job.size > self._limit:
                # An idle writer always takes the run, even one bigger than the whole queue.
                refused = (
                    f"the write queue is full ({self._queued_bytes} bytes waiting for the store)"
                )
            else:
                self._jobs.append(job)
                self._queued_bytes += job.size
                if self._thread is None:
                    self._thread = threading.Thread(
                        target=self._loop, name="agenttape-recorder", daemon=True
                    )
                    self._thread.start()
                self._cond.notify()
                return True
            self.dropped += 1
        self._losses.warn("dropped", f"run {job.run_id} not kept: {refused}")
        return False

    def flush(self, timeout: float | None) -> bool:
        with self._cond:
            return self._cond.wait_for(lambda: not self._jobs, timeout)

    def close(self, timeout: float | None) -> bool:
        """Stop taking runs; what is queued still gets written while the process lives."""
        flushed = self.flush(timeout)
        with self._cond:
            self._closed = True
            self._cond.notify_all()
            thread = self._thread
        if flushed and thread is not None:
            thread.join(timeout)
        return flushed

    def _loop(self) -> None:
        # The store's own traffic (s3, gcs over HTTP) is never recorded into any cassette.
        _runtime.enter_adapter()
        while True:
            with self._cond:
                while not self._jobs and not self._closed:
                    self._cond.wait()
                if not self._jobs:
                    return
                job = self._jobs[0]
            written = self._write(job)
            with self._cond:
                self._jobs.popleft()
                self._queued_bytes -= job.size
                if written is None:
                    self.failed += 1
                else:
                    self.written += 1
                    self.bytes_written += written
                self._cond.notify_all()

    def _write(self, job: _Job) -> int | None:
        """Encode and store one run; the size written, or None after logging the loss."""
        try:
            if self._base is None:
                from ._meta import new_header  # git and package metadata: once, off the hot path

                self._base = new_header()
            header = {
                **self._base,
                "run_id": job.run_id,
                "created_at": job.started,
                "tags": job.tags,
                "run": job.summary,
            }
            # Response headers were redacted as they arrived; requests are redacted here.
            redactor = self._redactor
            for interaction in job.interactions:
                interaction.request = redactor.request(interaction.request)
            data = _format.encode(header, job.interactions)
            self._store.write(job.name, data)
        except Exception as exc:
            self._losses.warn(
                "failed",
                f"run {job.run_id} lost: writing {job.name} to {self._store.url} failed: {exc}",
            )
            return None
        return len(data)


class Recorder:
    """Records agent runs in production and keeps the ones worth replaying.

    ``keep="errors"`` keeps a run that raised, saw a response >= 400 or a transport error, or
    was flagged; ``"all"`` keeps every run; ``"sampled"`` keeps those plus ``sample_rate`` of
    the healthy ones. ``store`` is a folder or an fsspec URL (``storage_options`` go to fsspec).
    A run over ``max_bytes_per_run`` keeps its exchanges up to that size; finished runs wait
    for the store in a queue of at most ``max_queue_bytes``; past it a run is lost and counted.
    """

    def __init__(
        self,
        store: str | os.PathLike[str] = "runs",
        *,
        keep: str = "errors",
        sample_rate: float = 0.1,
        max_bytes_per_run: int = 16 * 1024 * 1024,
        max_queue_bytes: int = 64 * 1024 * 1024,
        redact: list[str] | tuple[str, ...] | None = None,
        storage_options: dict[str, Any] | None = None,
    ) -> None:
        if keep not in KEEP:
            raise ValueError(f"keep must be one of {', '.join(KEEP)}; got {keep!r}")
        if not 0.0 <= sample_rate <= 1.0:
            raise ValueError(f"sample_rate must be between 0 and 1; got {sample_rate!r}")
        if max_bytes_per_run <= 0 or max_queue_bytes <= 0:
            raise ValueError("max_bytes_per_run and max_queue_bytes must be positive")
        self.keep = keep
        self.sample_rate = sample_rate
        self.max_bytes_per_run = max_bytes_per_run
        self.max_queue_bytes = max_queue_bytes
        self._store = open_store(store, storage_options)
        self.store = self._store.url
        self._redactor = Redactor.from_rules(redact)
        self._losses = _LossLog()
        self._writer = _Writer(self._store, self._redactor, max_queue_bytes, self._losses)
        self._lock = threading.Lock()
        self._runs = 0
        self._kept = 0
        self.closed = False
        _open_recorders.add(self)

    def __repr__(self) -> str:
        return f"<Recorder {self.store!r} keep={self.keep!r}>"

    def run(self, run_id: str | None = None, **tags: Any) -> Run:
        """A run to open with ``with`` or ``async with``; ``tags`` go into its cassette."""
        if run_id is None:
            run_id = f"{_run_ids.getrandbits(128):032x}"
        elif not isinstance(run_id, str) or not RUN_ID.fullmatch(run_id):
            raise ValueError(
                f"run_id {run_id!r} must be 1-128 letters, digits, '.', '_' or '-' "
                "(it names the run's file), starting with a letter or digit"
            )
        return Run(self, run_id, tags)

    @property
    def stats(self) -> RecorderStats:
        writer = self._writer
        return RecorderStats(
            runs=self._runs,
            kept=self._kept,
            written=writer.written,
            dropped=writer.dropped,
            failed=writer.failed,
            bytes_written=writer.bytes_written,
            queued_bytes=writer.queued_bytes,
        )

    def flush(self, timeout: float | None = None) -> bool:
        """Wait until every finished run is written (or lost); False if ``timeout`` ran out."""
        return self._writer.flush(timeout)

    def close(self, timeout: float | None = None) -> bool:
        """Flush and stop; runs finishing afterwards are not kept. False if ``timeout`` ran out."""
        self.closed = True
        _open_recorders.discard(self)
        return self._writer.close(timeout)

    def __enter__(self) -> Recorder:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _finish(self, run: Run) -> None:
        status, reasons = run._outcome()
        run.status = status
        keep = (
            self.keep == "all"
            or status != "ok"
            or (self.keep == "sampled" and random.random() < self.sample_rate)
        )
        with self._lock:
            self._runs += 1
            if keep:
                self._kept += 1
        if not keep:
            run.kept = False
            return
        assert run.started is not None and run.duration is not None
        run.path = Path(f"{run.started:%Y-%m-%d}", run.run_id + SUFFIX)
        summary: dict[str, Any] = {
            "status": status,
            "reasons": [scrub_text(reason) for reason in reasons],
            "flags": list(run.flags),
            "duration": run.duration,
            "interactions": len(run.interactions),
        }
        if run._dropped:
            summary["dropped"] = run._dropped
        job = _Job(
            run_id=run.run_id,
            name=run.path.as_posix(),
            started=run.started,
            tags=run.tags,
            summary=summary,
            interactions=run.interactions,
            size=run._used + EXCHANGE_OVERHEAD,
        )
        run.kept = self._writer.submit(job)

    def _after_fork(self) -> None:
        """A forked worker (gunicorn, multiprocessing) gets its own writer thread and queue."""
        self._losses = _LossLog()
        self._writer = _Writer(self._store, self._redactor, self.max_queue_bytes, self._losses)
        self._lock = threading.Lock()


_open_recorders: set[Recorder] = set()


def _close_at_exit() -> None:
    for recorder in list(_open_recorders):
        if not recorder.close(EXIT_TIMEOUT):
            logger.warning(
                "agenttape recorder: %d byte(s) of runs not written to %s at exit",
                recorder.stats.queued_bytes,
                recorder.store,
            )


def _after_fork_in_child() -> None:
    _run_ids.seed()
    for recorder in _open_recorders:
        recorder._after_fork()


atexit.register(_close_at_exit)
if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)
