"""Capture in production: one replayable cassette per agent run, written behind the request path.

When a run ends, the recorder decides whether to keep it and hands it to the writer; a kept
run is one plain cassette file named by its run id.
"""

from __future__ import annotations

import atexit
import os
import random
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, get_args

from .._core.redaction import Redactor
from .._core.secrets import scrub_note
from .durations import parse_duration
from .otel import annotate_current_span, require_api
from .run import EXCHANGE_OVERHEAD, RUN_ID, Run, logger
from .store import SUFFIX, open_store
from .threads import follow_threads, stop_following_threads
from .writer import Job, LossLog, Writer

Keep = Literal["errors", "all", "sampled"]
KEEP: tuple[Keep, ...] = get_args(Keep)
# How long interpreter exit waits for the writer before giving up on queued runs.
EXIT_TIMEOUT = 10.0

# Run ids come from a generator of our own, seeded by the system once (and again in a forked
# child): os.urandom per run would release the GIL on every request a busy service handles,
# and the process-wide random module repeats after any random.seed() in user code.
_run_ids = random.Random()


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
    lost: int


class Recorder:
    """Records agent runs in production and keeps the ones worth replaying.

    Args:
        store: a folder, or an fsspec URL (``s3://…``, ``gs://…``, ``memory://…``).
        keep: ``"errors"`` keeps a run that raised, saw a response >= 400 or a transport
            error, or was flagged; ``"all"`` keeps every run; ``"sampled"`` keeps those plus
            ``sample_rate`` of the healthy ones.
        sample_rate: the share of healthy runs ``"sampled"`` keeps.
        max_bytes_per_run: a run over it keeps its exchanges up to that size.
        max_queue_bytes: finished runs wait for the store in a queue of at most this size;
            past it a run is lost and counted (``stats``), never waited for.
        redact: more header names, query names, JSON paths and regexes to redact.
        storage_options: passed to fsspec.
        otel: add the run's id, status and place in the store to the OpenTelemetry span
            current when the run ends, so a trace leads to the run (needs opentelemetry-api).
        retention: how long runs stay (``"90d"``): whole days older are deleted from the
            store and its index (``agenttape runs delete --before``), a bounded share each
            time the writer writes the index.
    """

    def __init__(
        self,
        store: str | os.PathLike[str] = "runs",
        *,
        keep: Keep = "errors",
        sample_rate: float = 0.1,
        max_bytes_per_run: int = 16 * 1024 * 1024,
        max_queue_bytes: int = 64 * 1024 * 1024,
        redact: list[str] | tuple[str, ...] | None = None,
        storage_options: dict[str, Any] | None = None,
        otel: bool = False,
        retention: str | None = None,
    ) -> None:
        if keep not in KEEP:
            raise ValueError(f"keep must be one of {', '.join(KEEP)}; got {keep!r}")
        if not 0.0 <= sample_rate <= 1.0:
            raise ValueError(f"sample_rate must be between 0 and 1; got {sample_rate!r}")
        if max_bytes_per_run <= 0 or max_queue_bytes <= 0:
            raise ValueError("max_bytes_per_run and max_queue_bytes must be positive")
        self.retention = None if retention is None else parse_duration(retention)
        if otel:
            require_api()
        self.otel = otel
        self.keep = keep
        self.sample_rate = sample_rate
        self.max_bytes_per_run = max_bytes_per_run
        self.max_queue_bytes = max_queue_bytes
        self._store = open_store(store, storage_options)
        self.store = self._store.url
        self._redactor = Redactor.from_rules(redact)
        self._losses = LossLog()
        self._writer = Writer(
            self._store, self._redactor, max_queue_bytes, self._losses, self.retention
        )
        self._lock = threading.Lock()
        self._runs = 0
        self._kept = 0
        self.closed = False
        with _recorders_lock:
            _open_recorders.add(self)
            follow_threads()

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
        return Run(
            run_id,
            tags,
            redactor=self._redactor,
            budget=self.max_bytes_per_run,
            on_end=self._finish,
        )

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
            lost=writer.dropped + writer.failed,
        )

    def flush(self, timeout: float | None = None) -> bool:
        """Wait until every finished run is written (or lost); False if ``timeout`` ran out."""
        return self._writer.flush(timeout)

    def close(self, timeout: float | None = None) -> bool:
        """Flush and stop; runs finishing afterwards are not kept. False if ``timeout`` ran out."""
        self.closed = True
        with _recorders_lock:
            _open_recorders.discard(self)
            if not _open_recorders:
                stop_following_threads()
        return self._writer.close(timeout)

    def __enter__(self) -> Recorder:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _finish(self, run: Run) -> None:
        self._keep(run)
        if self.otel:
            annotate_current_span(run, self.store)

    def _keep(self, run: Run) -> None:
        status, reasons = run.outcome()
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
            "reasons": [scrub_note(reason) for reason in reasons],
            "flags": [scrub_note(flag) for flag in run.flags],
            "duration": run.duration,
            "interactions": len(run.interactions),
        }
        if run.cold:
            summary["cold"] = [scrub_note(run.flags[number]) for number in sorted(run.cold)]
        if run.dropped:
            summary["dropped"] = run.dropped
        job = Job(
            run_id=run.run_id,
            name=run.path.as_posix(),
            started=run.started,
            tags=run.tags,
            summary=summary,
            interactions=run.interactions,
            size=run.used_bytes + EXCHANGE_OVERHEAD,
        )
        run.kept = self._writer.submit(job)

    def _after_fork(self) -> None:
        """A forked worker (gunicorn, multiprocessing) gets its own writer thread and queue."""
        self._losses = LossLog()
        self._writer = Writer(
            self._store, self._redactor, self.max_queue_bytes, self._losses, self.retention
        )
        self._lock = threading.Lock()


_open_recorders: set[Recorder] = set()
_recorders_lock = threading.Lock()


def _close_at_exit() -> None:
    for recorder in list(_open_recorders):
        if not recorder.close(EXIT_TIMEOUT):
            logger.warning(
                "agenttape recorder: %d bytes of runs not written to %s at exit",
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
