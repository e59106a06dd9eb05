"""HTTP clients whose sockets live in C or Rust, where neither the network guard nor the audit
of unaccounted connections (both on Python's ``socket``) can see them.

One of them imported with no adapter in place (a client agenttape has none for, or a version
whose entry points its adapter does not know) is never bypassed in silence: when a cassette
activates it is named, once, with its version; and its request methods are guarded, so that
while a cassette that blocks the network is active a call raises ``NetworkBlockedError``
instead of reaching the network unseen.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from types import ModuleType
from typing import Any

from .._core import runtime
from .._core.blame import passed_through
from .._core.errors import NetworkBlockedError
from . import ledger

__tracebackhide__ = passed_through

NATIVE: dict[str, str] = {
    "curl_cffi": "curl_cffi",
    "pycurl": "pycurl",
    "primp": "primp",
    "rnet": "rnet",
    "tls_client": "tls-client",
    "pyreqwest": "pyreqwest",
}
"""Top-level module -> distribution, of the clients that open connections in native code."""

VERBS = frozenset(
    ("request", "get", "post", "put", "patch", "delete", "head", "options", "perform", "send")
)
"""The names a client's request methods and functions go by."""

CLIENTS = ("client", "session", "curl")
"""What the name of a class that makes requests holds (a ``Headers`` class has a ``get``
too, which must go on working)."""


def patches(module: ModuleType) -> list[ledger.Patch]:
    """Guards on the request functions of ``module`` and the request methods of its classes
    (those Python lets be replaced)."""
    found: list[ledger.Patch] = []
    for name, value in sorted(vars(module).items()):
        if name.startswith("_"):
            continue
        if isinstance(value, type) and any(word in name.lower() for word in CLIENTS):
            for verb in sorted(VERBS):
                method = vars(value).get(verb)
                if callable(method) and _settable(value, verb):
                    found.append(ledger.wrap(value, verb, _guarded))
        elif name in VERBS and callable(value):
            found.append(ledger.wrap(module, name, _guarded))
    return found


def _settable(cls: type, name: str) -> bool:
    """Whether ``cls.name`` can be replaced (a class defined in C may refuse)."""
    original = vars(cls)[name]
    try:
        setattr(cls, name, original)
    except (TypeError, AttributeError):
        return False
    return True


def _guarded(original: Callable[..., Any]) -> Callable[..., Any]:
    library = str(getattr(original, "__qualname__", getattr(original, "__name__", "?")))
    if inspect.iscoroutinefunction(original):

        @functools.wraps(original)
        async def guarded_async(*args: Any, **kwargs: Any) -> Any:
            check(library)
            return await original(*args, **kwargs)

        return guarded_async

    @functools.wraps(original)
    def guarded(*args: Any, **kwargs: Any) -> Any:
        check(library)
        return original(*args, **kwargs)

    return guarded


def check(call: str) -> None:
    """Raises ``NetworkBlockedError`` for ``call`` while a cassette that blocks the network
    is active: it would reach the network unseen."""
    tape = runtime.active()
    if tape is None or not tape.block_network or "*" in tape.allowed_hosts:
        return
    raise NetworkBlockedError(
        f"agenttape blocked {call}: cassette {tape.path} (mode {tape.mode!r}) blocks the "
        "network, and this client opens its connections in native code that agenttape does "
        "not intercept in this version (see the warning it gave). Pass block_network=False "
        "to let it through unrecorded.",
        cassette_path=str(tape.path),
    )
