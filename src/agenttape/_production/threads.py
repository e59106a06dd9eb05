"""Runs follow their work into threads, as they follow it into asyncio tasks.

A task submitted to a ``ThreadPoolExecutor`` (``submit``, ``map``, ``loop.run_in_executor``) or
a ``threading.Thread`` started inside a run runs in a copy of the run's context, so its
exchanges belong to the run without ``run.bind`` — what OpenTelemetry's threading
instrumentation does for spans. A pool's worker thread started by such a submit does not take
the run with it: only the task does, so a later task from elsewhere is never recorded into it.

The two methods are patched only while a Recorder is open. Outside a run each patched call
costs one context-variable read; nothing is copied.
"""

from __future__ import annotations

import contextvars
import functools
import threading
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

from .._adapters import ledger
from .._core import runtime
from .._core.blame import passed_through
from .run import Run

__tracebackhide__ = passed_through

LIBRARY = "threading"
"""The ledger's name for these patches."""


def _in_a_run() -> bool:
    tape = runtime.current()
    return type(tape) is Run and tape.is_active


def _make_submit(original: Any) -> Any:
    def submit(self: ThreadPoolExecutor, fn: Any, /, *args: Any, **kwargs: Any) -> Future[Any]:
        if not _in_a_run():
            result: Future[Any] = original(self, fn, *args, **kwargs)
            return result
        task_context = contextvars.copy_context()
        # Submitted from an empty context: a worker thread the pool starts now carries no run.
        return contextvars.Context().run(original, self, task_context.run, fn, *args, **kwargs)

    return submit


def _make_start(original: Any) -> Any:
    def start(self: threading.Thread) -> None:
        if _in_a_run():
            self.run = functools.partial(contextvars.copy_context().run, self.run)  # type: ignore[method-assign]
        original(self)

    return start


def patches() -> list[ledger.Patch]:
    """The pool's ``submit`` and the thread class's ``start``, wrapped."""
    return [
        ledger.wrap(ThreadPoolExecutor, "submit", _make_submit),
        ledger.wrap(threading.Thread, "start", _make_start),
    ]


def follow_threads() -> None:
    """Patches the pool and the thread class, wrapping what is there now (idempotent)."""
    ledger.apply(LIBRARY, patches())


def stop_following_threads() -> None:
    """Puts back what was there; a wrapper another library put on top of ours since (as
    OpenTelemetry's threading instrumentation does) is kept, and ours only passes through."""
    ledger.remove(LIBRARY)
