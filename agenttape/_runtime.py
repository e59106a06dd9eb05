"""Which cassette a request belongs to, from any thread or task.

The thread or task that opened a cassette finds it through a context variable, so nested
blocks resolve to the innermost one; every other thread (a ThreadPoolExecutor worker has no
copy of the opener's context) falls back to the most recently opened cassette still active.
A recorder's run is not process-wide: only its own context and contexts copied from it (tasks
it starts, ``asyncio.to_thread``, ``contextvars.copy_context().run``) see it, so concurrent
runs never mix.
"""

from __future__ import annotations

import contextlib
import threading
from contextvars import ContextVar, Token
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ._cassette import Cassette

_current: ContextVar[Cassette | None] = ContextVar("agenttape_current", default=None)
_inside_adapter: ContextVar[bool] = ContextVar("agenttape_inside_adapter", default=False)
_active: list[Cassette] = []
_lock = threading.Lock()


def active() -> Cassette | None:
    """The cassette that serves a request made here, or None (then nothing is intercepted)."""
    if _inside_adapter.get():
        return None
    cassette = _current.get()
    if cassette is not None and cassette.is_active:
        return cassette
    return _active[-1] if _active else None


def activate(cassette: Cassette, *, process_wide: bool = True) -> Token[Cassette | None]:
    from ._adapters import install_adapters

    install_adapters()
    if process_wide:
        with _lock:
            _active.append(cassette)
    return _current.set(cassette)


def deactivate(cassette: Cassette, token: Token[Cassette | None]) -> None:
    # Runs are never process-wide: their exit checks without taking the lock.
    if cassette in _active:
        with _lock:
            if cassette in _active:
                _active.remove(cassette)
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
