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

from .._core import runtime
from .run import Run

_original_submit: Any = ThreadPoolExecutor.submit
_original_start = threading.Thread.start


def _in_a_run() -> bool:
    tape = runtime.current()
    return type(tape) is Run and tape.is_active


def _submit(self: ThreadPoolExecutor, fn: Any, /, *args: Any, **kwargs: Any) -> Future[Any]:
    if not _in_a_run():
        result: Future[Any] = _original_submit(self, fn, *args, **kwargs)
        return result
    task_context = contextvars.copy_context()
    # Submitted from an empty context: a worker thread the pool starts now carries no run.
    return contextvars.Context().run(_original_submit, self, task_context.run, fn, *args, **kwargs)


def _start(self: threading.Thread) -> None:
    if _in_a_run():
        self.run = functools.partial(contextvars.copy_context().run, self.run)  # type: ignore[method-assign]
    _original_start(self)


def follow_threads() -> None:
    """Patches the pool and the thread class (idempotent)."""
    ThreadPoolExecutor.submit = _submit  # type: ignore[assignment]
    threading.Thread.start = _start  # type: ignore[method-assign]


def stop_following_threads() -> None:
    """Restores them, unless something else has patched them since."""
    if ThreadPoolExecutor.submit is _submit:
        ThreadPoolExecutor.submit = _original_submit  # type: ignore[method-assign]
    if threading.Thread.start is _start:
        threading.Thread.start = _original_start  # type: ignore[method-assign]
