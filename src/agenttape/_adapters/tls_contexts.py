"""One TLS context for the httpx and httpx2 transports made while a tape replays.

Each ``HTTPTransport`` builds a TLS context and loads the CA bundle into it: about 45 ms, most
of what a test that makes an SDK client per test costs, and never used by a client whose
requests are all replayed. While a tape that records nothing is active, a transport built
with the default verification (``verify=True``, no ``cert``) gets the context an earlier one
got with the same arguments and the same ``SSL_CERT_FILE``, ``SSL_CERT_DIR`` and
``SSLKEYLOGFILE``: the first is built by the library's own ``create_ssl_context``, so an error
it raises is raised where it always was (and is raised again next time: a failure is not
kept). The transport keeps its class and its ``__init__``; with no tape active, or one that
records, the library's function runs as it is, and nothing here reads the environment.

The one difference: those transports share one ``ssl.SSLContext`` object, as httpx's own
advice to pass one ``verify=<context>`` to many clients has them do.
"""

from __future__ import annotations

import functools
import os
import sys
import threading
from collections.abc import Callable
from types import ModuleType
from typing import Any

from .._core import runtime
from .._core.blame import passed_through
from . import ledger

__tracebackhide__ = passed_through

_VARIABLES = ("SSL_CERT_FILE", "SSL_CERT_DIR", "SSLKEYLOGFILE")

_lock = threading.Lock()
_contexts: dict[tuple[Any, ...], Any] = {}


def patch(hx: ModuleType) -> ledger.Patch:
    """Wraps ``create_ssl_context`` where the library's transports call it: the module
    their ``__init__`` is defined in (the classes say ``httpx``, the package)."""
    return ledger.wrap(
        sys.modules[hx.HTTPTransport.__init__.__module__], "create_ssl_context", _reusing
    )


def _replaying() -> bool:
    tape = runtime.active()
    return tape is not None and not tape.is_recording


def _reusing(original: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(original)
    def create_ssl_context(*args: Any, **kwargs: Any) -> Any:
        if args or not _replaying():
            return original(*args, **kwargs)
        if kwargs.get("verify", True) is not True or kwargs.get("cert") is not None:
            return original(*args, **kwargs)
        key = (
            original,
            tuple(sorted(kwargs.items())),
            tuple(os.environ.get(name) for name in _VARIABLES),
        )
        context = _contexts.get(key)
        if context is None:
            context = original(**kwargs)
            with _lock:
                context = _contexts.setdefault(key, context)
        return context

    return create_ssl_context
