"""Writing kept runs behind the request path: one daemon thread, a queue bounded in bytes.

A full queue or a failing store loses that run (logged and counted), never the agent's
request. The same thread adds each written run's row to the run index, in batches.
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import itertools
import logging
import secrets
import threading
import time
from collections import deque
from dataclasses import dataclass
from typing import Any

from .._core import runtime
from .._core.models import Interaction
from .._core.redaction import Redactor
from .._core.secrets import scrub_tags
from .._core.text import counted
from .._core.wire import codec
from .index import batch, pending
from .index.rows import EXTRA, INDEX, describe
from .store import Store, StoredFile

logger = logging.getLogger("agenttape.recorder")

# A loss is logged at most once per this many seconds per kind, with the count in between.
LOSS_LOG_INTERVAL = 10.0
# Woken for one run, the writer waits this long for more and then writes all that wait (up
# to DRAIN): fewer wake-ups, each taking the GIL from a busy service once rather than per run.
LINGER = 0.05
DRAIN = 64
# Retention deletes a bounded share of old runs at most this often (seconds).
RETENTION_EVERY = 60.0


@dataclass(slots=True)
class Job:
    run_id: str
    name: str
    started: _dt.datetime
    tags: dict[str, Any]
    summary: dict[str, Any]
    interactions: list[Interaction]
    size: int


class LossLog:
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
            message += f" ({counted(quiet, 'more run')} lost the same way since the last report)"
        logger.warning("agenttape recorder: %s", message)


class Writer:
    """One daemon thread writing finished runs; its queue is bounded in bytes (past the limit
    a run is refused, never waited for)."""

    def __init__(
        self,
        store: Store,
        redactor: Redactor,
        limit: int,
        losses: LossLog,
        retention: _dt.timedelta | None = None,
    ) -> None:
        self._store = store
        self._retention = retention
        self._retained_at: float | None = None
        self._redactor = redactor
        self._limit = limit
        self._losses = losses
        self._cond = threading.Condition()
        self._jobs: deque[Job] = deque()
        self._queued_bytes = 0
        self._closed = False
        self._thread: threading.Thread | None = None
        self._base: dict[str, Any] | None = None
        # The run index's rows not written yet (None: pyarrow is not installed); flushes
        # asked for and done, so a flush waits for the batch its runs are in.
        self._batch = batch.Batch() if batch.can_write() else None
        # On an object store, the files naming runs whose rows wait in the batch (see
        # pending.PENDING), deleted once the batch is written.
        self._names_in_flight = self._batch is not None and not store.lists_cheaply
        self._writer_id = secrets.token_hex(8)
        self._published: list[str] = []
        self._flushes_asked = 0
        self._flushes_done = 0
        self._stopped = False
        self._idle = False
        self.dropped = 0
        self.failed = 0
        self.written = 0
        self.bytes_written = 0

    @property
    def queued_bytes(self) -> int:
        return self._queued_bytes

    def submit(self, job: Job) -> bool:
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
                if self._idle:
                    self._cond.notify()
                return True
            self.dropped += 1
        self._losses.warn("dropped", f"run {job.run_id} not kept: {refused}")
        return False

    def flush(self, timeout: float | None) -> bool:
        with self._cond:
            if self._thread is None:
                return True
            self._flushes_asked += 1
            asked = self._flushes_asked
            self._cond.notify_all()
            return self._cond.wait_for(
                lambda: not self._jobs and (self._flushes_done >= asked or self._stopped),
                timeout,
            )

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
        runtime.enter_adapter()
        if self._batch is None:
            self._check_unindexed()
        while True:
            with self._cond:
                while not self._jobs and not self._index_due():
                    if self._closed:
                        self._stopped = True
                        self._cond.notify_all()
                        return
                    self._idle = True
                    self._cond.wait(None if self._batch is None else self._batch.wait())
                    self._idle = False
                    if self._jobs and len(self._jobs) < DRAIN and not self._hurried():
                        self._cond.wait(LINGER)
                index_now = self._index_due()
                drained = not self._jobs
                asked = self._flushes_asked
                jobs = [] if index_now else list(itertools.islice(self._jobs, DRAIN))
            if not jobs:
                self._write_index()
                self._apply_retention()
                if drained:
                    with self._cond:
                        self._flushes_done = asked
                        self._cond.notify_all()
                continue
            sizes = self._write(jobs)
            with self._cond:
                for job, written in zip(jobs, sizes, strict=True):
                    self._jobs.popleft()
                    self._queued_bytes -= job.size
                    if written is None:
                        self.failed += 1
                    else:
                        self.written += 1
                        self.bytes_written += written
                self._cond.notify_all()

    def _hurried(self) -> bool:
        """A flush or close waits: no lingering."""
        return self._closed or self._flushes_done < self._flushes_asked

    def _check_unindexed(self) -> None:
        """Runs this process cannot index in a store others index: say so, once."""
        try:
            indexed = INDEX in self._store.listing()[0]
        except Exception:  # the writes will say what is wrong with the store
            return
        if indexed:
            logger.warning(
                "agenttape recorder: %s has a run index, but this process cannot add its runs "
                "to it (pyarrow is missing): %s; meanwhile 'agenttape index rebuild %s' adds them",
                self._store.url,
                EXTRA,
                self._store.url,
            )

    def _index_due(self) -> bool:
        """The batch is old or big enough (written between runs); or, with no run waiting, a
        flush asks for it or the writer is closing."""
        waiting = self._batch
        if waiting is not None and waiting.due():
            return True
        if self._jobs:
            return False
        return self._flushes_done < self._flushes_asked or (
            self._closed and waiting is not None and len(waiting) > 0
        )

    def _write_index(self) -> None:
        """Write the batch; rows that fail wait for the next one (not past close)."""
        waiting = self._batch
        if waiting is None or not len(waiting):
            return
        rows = waiting.take()
        published, self._published = self._published, []
        try:
            batch.write_rows(self._store, rows)
        except batch.IndexWriteError as exc:
            self._published = published + self._published
            if self._closed:
                self._losses.warn("index", batch.lost_rows_message(self._store, len(exc.rows), exc))
                return
            self._losses.warn("index", batch.waiting_rows_message(self._store, len(exc.rows), exc))
            dropped = waiting.keep(exc.rows)
            if dropped:
                self._losses.warn("index lost", batch.lost_rows_message(self._store, dropped, exc))
        except Exception as exc:  # the rows cannot be encoded: another try would fail again
            # The files naming these runs stay: readers still find them.
            self._losses.warn("index", batch.lost_rows_message(self._store, len(rows), exc))
        else:
            for name in published:
                with contextlib.suppress(Exception):
                    self._store.delete(name)

    def _apply_retention(self) -> None:
        """Delete runs past the retention: a bounded share each time the index is written
        (at most once a minute), never failing the writer."""
        if self._retention is None or (
            self._retained_at is not None and time.monotonic() - self._retained_at < RETENTION_EVERY
        ):
            return
        self._retained_at = time.monotonic()
        from .erasure import apply_retention

        try:
            apply_retention(self._store, self._retention)
        except Exception as exc:
            self._losses.warn("retention", f"runs past the retention not deleted yet: {exc}")

    def _write(self, jobs: list[Job]) -> list[int | None]:
        """Store each run (named as in flight first, where that is how readers find it);
        the size written, or None after logging the loss."""
        encoded = [self._encode(job) for job in jobs]
        runs = [
            StoredFile(job.name, len(done[1]))
            for job, done in zip(jobs, encoded, strict=True)
            if done is not None
        ]
        unnamed = self._publish(runs) if self._names_in_flight and runs else None
        sizes = [
            None if done is None else self._store_run(job, *done)
            for job, done in zip(jobs, encoded, strict=True)
        ]
        written = sum(size is not None for size in sizes)
        if unnamed is not None and written:  # a store refusing everything is reported above
            self._losses.warn(
                "pending",
                f"could not name {counted(written, 'run')} in flight at {self._store.url}/"
                f"{pending.PENDING} ({unnamed}): 'agenttape runs' lists them once their "
                "batch of the run index is written",
            )
        return sizes

    def _publish(self, runs: list[StoredFile]) -> Exception | None:
        """Names ``runs`` as in flight; the store's error when it refused."""
        name = pending.pending_name(self._writer_id)
        try:
            self._store.write(name, pending.encode_pending(runs))
        except Exception as exc:
            return exc
        self._published.append(name)
        return None

    def _encode(self, job: Job) -> tuple[dict[str, Any], bytes] | None:
        """The run's header and cassette bytes, or None after logging the loss."""
        try:
            if self._base is None:
                from .._core.meta import new_header

                self._base = new_header()
            header = {
                **self._base,
                "run_id": job.run_id,
                "created_at": job.started,
                "tags": scrub_tags(job.tags),
                "run": job.summary,
            }
            # Response headers were redacted as they arrived; requests are redacted here.
            redactor = self._redactor
            for interaction in job.interactions:
                interaction.request = redactor.request(interaction.request)
                for frame in interaction.frames or ():
                    if frame.direction == "client":
                        frame.payload = redactor.frame(frame.payload)
            return header, codec.encode(header, job.interactions)
        except Exception as exc:
            self._losses.warn("failed", f"run {job.run_id} lost: encoding it failed: {exc}")
            return None

    def _store_run(self, job: Job, header: dict[str, Any], data: bytes) -> int | None:
        try:
            self._store.write(job.name, data)
        except Exception as exc:
            self._losses.warn(
                "failed",
                f"run {job.run_id} lost: writing {job.name} to {self._store.url} failed: {exc}",
            )
            return None
        if self._batch is not None:
            try:
                self._batch.add(describe(header, job.name, len(data), job.interactions))
            except Exception as exc:  # the run is written; only its row is missing
                self._losses.warn("index", batch.lost_rows_message(self._store, 1, exc))
        return len(data)
