"""Which cassette a request belongs to, from any thread or task.

The thread or task that opened a cassette finds it through a context variable, so nested
blocks resolve to the innermost one; every other thread (a ThreadPoolExecutor worker has no
copy of the opener's context) falls back to the most recently opened cassette still active.
A recorder's run is not process-wide: only its own context and contexts copied from it (tasks
it starts, ``asyncio.to_thread``, ``contextvars.copy_context().run``, and the threads and pool
tasks it starts while a Recorder is open) see it, so concurrent runs never mix.
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
import sys
import threading
import warnings
from collections.abc import Callable
from contextvars import ContextVar, Token
from types import TracebackType
from typing import TYPE_CHECKING, Any, ClassVar, TypeVar, cast

from . import blame

if TYPE_CHECKING:
    from .tape import Tape

_current: ContextVar[Tape | None] = ContextVar("agenttape_current", default=None)
_inside_adapter: ContextVar[bool] = ContextVar("agenttape_inside_adapter", default=False)
_newest: Tape | None = None
"""The newest process-wide tape still active: what a request reads, one global read (no
lock, no list that may empty between a check and an index)."""
_active: list[Tape] = []  # changed under _lock only, with _newest
_lock = threading.Lock()
_installers: list[Callable[[], None]] = []
_listeners: list[Callable[[Tape | None], None]] = []
_B = TypeVar("_B", bound="Block")


def on_activation(installer: Callable[[], None]) -> None:
    """Runs ``installer`` whenever a tape is activated: the adapters layer patches the
    libraries it finds imported, without the core importing it."""
    _installers.append(installer)


def on_change(listener: Callable[[Tape | None], None]) -> None:
    """Calls ``listener`` with the newest process-wide tape (None when none is left) each
    time one is activated or deactivated: what child processes inherit follows it."""
    _listeners.append(listener)


def _changed() -> None:
    global _newest
    newest = _newest = _active[-1] if _active else None
    for listener in _listeners:
        listener(newest)


def active() -> Tape | None:
    """The tape that serves a request made here, or None (then nothing is intercepted)."""
    if _inside_adapter.get():
        return None
    tape = _current.get()
    if tape is not None and tape.is_active:
        return tape
    return _newest


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


class Block(Activation):
    """An activation that is a block, ``with`` or ``async with``: entering calls ``_load``
    then ``_open``, leaving calls ``_close`` then ``_store``, with the exception that ended
    the block, if any. ``_load`` and ``_store`` are what touches the disk (reading the
    cassette, saving it): under ``async with`` they run in a worker thread, so the event
    loop never waits for the disk, while ``_open`` and ``_close`` (the activation, in the
    task's own context) run in the loop."""

    # Whether _load or _store do anything: a block whose do not enters and leaves with no
    # hop to a worker thread.
    touches_disk: ClassVar[bool] = False

    def _load(self) -> None:
        """Reads what entering needs; nothing by default."""

    def _open(self) -> None:
        raise NotImplementedError

    def _close(self, exc: BaseException | None) -> None:
        raise NotImplementedError

    def _store(self, exc: BaseException | None) -> None:
        """Writes what leaving keeps; nothing by default."""

    def __enter__(self: _B) -> _B:
        self._load()
        self._open()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self._close(exc)
        self._store(exc)

    async def __aenter__(self: _B) -> _B:
        if self.touches_disk:
            await off_loop(self._load)
        else:
            self._load()
        self._open()
        return self

    async def __aexit__(self, *exc_info: Any) -> None:
        """Leaves as ``__exit__`` does (the same three arguments), the disk work off the loop."""
        exc: BaseException | None = exc_info[1]
        self._close(exc)
        if self.touches_disk:
            await off_loop(self._store, exc)
        else:
            self._store(exc)


async def off_loop(function: Callable[..., Any], *args: Any) -> Any:
    """``function(*args)`` in the running asyncio loop's default executor, in a copy of this
    context (as ``asyncio.to_thread``, which anyio's asyncio backend runs too); called here
    under another event loop library. Its warnings are caught where it runs and issued again
    here, in the loop's thread, at the line of the caller's caller (the user's ``async with``)
    as they would be without the hop, not in the worker thread's frames."""
    asyncio = sys.modules.get("asyncio")
    try:
        loop = asyncio.get_running_loop() if asyncio is not None else None
    except RuntimeError:
        loop = None
    caught: list[warnings.WarningMessage] = []
    try:
        if loop is None:
            return _catching(caught, function, *args)
        context = contextvars.copy_context()
        call = functools.partial(context.run, _catching, caught, function, *args)
        return await loop.run_in_executor(None, call)
    finally:
        for warning in caught:
            blame.warn(warning.message, warning.category, source=warning.source)


_catching_lock = threading.Lock()


def _catching(
    caught: list[warnings.WarningMessage], function: Callable[..., Any], *args: Any
) -> Any:
    """``function(*args)``, its warnings appended to ``caught`` instead of shown: all of them,
    as the filters decide again where they are issued once more. (``catch_warnings`` swaps
    process-wide state: a warning another thread issues meanwhile is caught too, and issued
    again with these; two at once would put back each other's, hence the lock.)"""
    with _catching_lock, warnings.catch_warnings(record=True) as log:
        warnings.simplefilter("always")
        try:
            return function(*args)
        finally:
            caught.extend(log)
