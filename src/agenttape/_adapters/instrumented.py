"""httpx's transports as others wrap them: an exchange made at the innermost network call.

OpenTelemetry's httpx instrumentation wraps ``HTTPTransport.handle_request`` (on the class, or
on one client's transport), Logfire uses it, pytest-httpx replaces it with its mock, vcrpy
patches it: all of them sit below the transport agenttape's httpx adapter stands in front of.
A replay answered above them would skip them all (no client span; a mocked route taken for
traffic). So where the transport's request method is not the library's own function, the
request goes through that method, and agenttape's exchange — replay or record — is made where
the library would reach the network: the connection pool's request method of httpcore (or
httpcore2), armed for this one call through a context variable. A wrapper that answers by
itself (a mock) never reaches the pool: then nothing is replayed or recorded.

Patches ``ConnectionPool.handle_request`` and ``AsyncConnectionPool.handle_async_request``;
with nothing armed (no cassette, or no wrapper in the way) they call the original at once.
"""

from __future__ import annotations

from collections.abc import Callable
from contextvars import ContextVar
from types import FunctionType, ModuleType
from typing import Any

from .._core.blame import passed_through
from . import ledger

__tracebackhide__ = passed_through

Innermost = Callable[[ModuleType, Callable[[], Any]], Any]
"""The exchange armed for the innermost call: given httpcore's module and the live call (the
pool's own request method on this request), it answers as the pool would."""

_armed: ContextVar[Innermost | None] = ContextVar("agenttape_innermost", default=None)
_plain: dict[tuple[type, str], Any] = {}
"""Per transport class and method name, the library's own function last seen there."""
_patched: dict[str, dict[type, Any]] = {}
"""Per method name (the pools' and the transports' are the same), each pool class patched and
the replacement put there."""


def install(core: ModuleType) -> list[ledger.Patch]:
    """Patches the connection pools of ``core``, httpcore or httpcore2."""
    return [
        ledger.wrap(
            core.ConnectionPool,
            "handle_request",
            lambda original: _remembered(
                core.ConnectionPool, "handle_request", _make_pool_request(original, core)
            ),
        ),
        ledger.wrap(
            core.AsyncConnectionPool,
            "handle_async_request",
            lambda original: _remembered(
                core.AsyncConnectionPool,
                "handle_async_request",
                _make_async_pool_request(original, core),
            ),
        ),
    ]


def _remembered(pool_class: type, name: str, replacement: Any) -> Any:
    """Notes ``replacement`` as ours on ``pool_class``, so a mock put over it is seen."""
    _patched.setdefault(name, {})[pool_class] = replacement
    return replacement


def _make_pool_request(original: Any, core: ModuleType) -> Any:
    def handle_request(self: Any, request: Any) -> Any:
        innermost = _armed.get()
        if innermost is None:
            return original(self, request)
        token = _armed.set(None)  # what the exchange calls live is live
        try:
            return innermost(core, lambda: original(self, request))
        finally:
            _armed.reset(token)

    return handle_request


def _make_async_pool_request(original: Any, core: ModuleType) -> Any:
    async def handle_async_request(self: Any, request: Any) -> Any:
        innermost = _armed.get()
        if innermost is None:
            return await original(self, request)
        token = _armed.set(None)
        try:
            return await innermost(core, lambda: original(self, request))
        finally:
            _armed.reset(token)

    return handle_async_request


def wrapped(transport: Any, name: str, library_class: type) -> bool:
    """Whether a request to ``transport`` (an instance of the library's ``library_class``)
    must go through its ``name`` method: something other than the library's own function
    stands there (a wrapper on the class or on this instance, a subclass's override), or
    something wraps the connection pools above agenttape (respx's mock)."""
    if name in vars(transport):
        return True
    cls = type(transport)
    handler = getattr(cls, name)
    if handler is not _plain.get((cls, name)):
        if not _own(handler, library_class, name):
            return True
        _plain[(cls, name)] = handler
    for pool_class, ours in _patched.get(name, {}).items():  # a loop: no generator per request
        # Ours stands on the class itself: what the class answers is what it holds.
        if getattr(pool_class, name, None) is not ours:
            return True
    return False


def _own(handler: Any, library_class: type, name: str) -> bool:
    """``handler`` is the function the library defines (not a wrapper, not a mock)."""
    return (
        isinstance(handler, FunctionType)
        and not hasattr(handler, "__wrapped__")
        and handler.__qualname__ == f"{library_class.__qualname__}.{name}"
        and handler.__module__.partition(".")[0] == library_class.__module__.partition(".")[0]
    )


def through(call: Callable[[Any], Any], request: Any, innermost: Innermost) -> Any:
    """``call(request)``, the transport's method with whatever wraps it, the pool's request
    answered by ``innermost``."""
    token = _armed.set(innermost)
    try:
        return call(request)
    finally:
        _armed.reset(token)


async def through_async(call: Callable[[Any], Any], request: Any, innermost: Innermost) -> Any:
    token = _armed.set(innermost)
    try:
        return await call(request)
    finally:
        _armed.reset(token)
