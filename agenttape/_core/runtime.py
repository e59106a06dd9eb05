"""Which cassette a request belongs to, from any thread or task.

The thread or task that opened a cassette finds it through a context variable, so nested
blocks resolve to the innermost one; every other thread (a ThreadPoolExecutor worker has no
copy of the opener's context) falls back to the most recently opened cassette still active.
A recorder's run is not process-wide: only its own context and contexts copied from it (tasks
it starts, ``asyncio.to_thread``, ``contextvars.copy_context().run``, and the threads and pool
tasks it starts while a Recorder is open) see it, so concurrent runs never mix.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import threading
from collections.abc import Callable
from contextvars import ContextVar, Token
from types import TracebackType
from typing import TypeVar, cast

from .tape import Tape

_current: ContextVar[Tape | None] = ContextVar("agenttape_current", default=None)
_inside_adapter: ContextVar[bool] = ContextVar("agenttape_inside_adapter", default=False)
_active: list[Tape] = []
_lock = threading.Lock()
_installers: list[Callable[[], None]] = []
_listeners: list[Callable[[Tape | None], None]] = []
_B = TypeVar("_B", bound="Block")
_R = TypeVar("_R")


def on_activation(installer: Callable[[], None]) -> None:
    """Runs ``installer`` whenever a tape is activated: the adapters layer patches the
    libraries it finds imported, without the core importing it."""
    _installers.append(installer)


def on_change(listener: Callable[[Tape | None], None]) -> None:
    """Calls ``listener`` with the newest process-wide tape (None when none is left) each
    time one is activated or deactivated: what child processes inherit follows it."""
    _listeners.append(listener)


def _changed() -> None:
    newest = _active[-1] if _active else None
    for listener in _listeners:
        listener(newest)


def active() -> Tape | None:
    """The tape that serves a request made here, or None (then nothing is intercepted)."""
    if _inside_adapter.get():
        return None
    tape = _current.get()
    if tape is not None and tape.is_active:
        return tape
    return _active[-1] if _active else None


def current() -> Tape | None:
    """The tape this context opened or inherited (a run, or the innermost cassette), whether
    or not it is still active; None when there is none."""
    return _current.get()


def activate(tape: Tape, *, process_wide: bool = True) -> Token[Tape | None]:
    for installer in _installers:
        installer()
    if process_wide:
        with _lock:
            _active.append(tape)
            _changed()
    return _current.set(tape)


def deactivate(tape: Tape, token: Token[Tape | None]) -> None:
    # Runs are never process-wide: their exit checks without taking the lock.
    if tape in _active:
        with _lock:
            if tape in _active:
                _active.remove(tape)
                _changed()
    # Exited from another context than the one that entered (a generator-based fixture
    # finalised elsewhere): the variable is then left to that context.
    with contextlib.suppress(ValueError):
        _current.reset(token)


def enter_adapter() -> Token[bool]:
    """Marks the rest of this call as owned by an outer adapter, so inner layers
    (requests over urllib3, httpx over aiohttp) never record a second copy."""
    return _inside_adapter.set(True)


def exit_adapter(token: Token[bool]) -> None:
    _inside_adapter.reset(token)


class Activation:
    """What a tape keeps while it is active: ``is_active``, and the context token to leave by."""

    is_active: bool
    _token: Token[Tape | None] | None

    def _deactivate(self) -> bool:
        """Leaves the runtime; False (and nothing done) when this tape was not active."""
        if not self.is_active:
            return False
        self.is_active = False
        assert self._token is not None
        deactivate(cast("Tape", self), self._token)
        self._token = None
        return True


async def off_loop(function: Callable[..., _R], *args: object) -> _R:
    """``function(*args)`` in a worker thread when an asyncio event loop runs here, so what it
    reads or writes never blocks the loop; called in place under any other loop."""
    try:
        loop = asyncio.get_running_loop()
    except RuntimeError:
        return function(*args)
    return await loop.run_in_executor(None, functools.partial(function, *args))


class Block(Activation):
    """An activation that is a block, ``with`` or ``async with``: entering calls ``_open``,
    leaving calls ``_close`` with the exception that ended the block, if any. ``async with``
    first runs ``_prepare`` off the event loop, and leaves through ``_close_async``."""

    def _open(self) -> None:
        raise NotImplementedError

    def _close(self, exc: BaseException | None) -> None:
        raise NotImplementedError

    def _prepare(self) -> None:
        """What opening does that may block (reading files): done before ``_open``, in a
        worker thread, by ``async with``."""

    async def _close_async(self, exc: BaseException | None) -> None:
        self._close(exc)

    def __enter__(self: _B) -> _B:
        self._open()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self._close(exc)

    async def __aenter__(self: _B) -> _B:
        await off_loop(self._prepare)
        return self.__enter__()

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        await self._close_async(exc)
