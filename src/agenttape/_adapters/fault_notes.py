"""The note (PEP 678) on a status error an injected fault caused, where the SDK builds it.

A fault that answers with an error status (``rate_limit``, ``overloaded``, ``server_error``,
``status``) hands the client a response; the exception comes later, made by the SDK (or by
``raise_for_status``) from that response, out of agenttape's sight. The injected answer
carries ``FAULT_HEADER``, so each library's status exception, once its own constructor has
run, looks at the response headers it was given and, when they hold the header, adds the
note. Only exceptions are touched: nothing runs for a call that does not fail.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from types import ModuleType
from typing import Any

from .._core.blame import passed_through
from .._core.tracebacks import note_injected
from . import LIBRARIES, HeadersAt, ledger

__tracebackhide__ = passed_through

HeadersOf = Callable[[Any], object]


def _response_headers(error: Any) -> object:
    return getattr(getattr(error, "response", None), "headers", None)


def _own_headers(error: Any) -> object:
    return getattr(error, "headers", None)


def _botocore_headers(error: Any) -> object:
    response = getattr(error, "response", None)
    metadata = response.get("ResponseMetadata") if isinstance(response, dict) else None
    return metadata.get("HTTPHeaders") if isinstance(metadata, dict) else None


HEADERS_OF: dict[HeadersAt, HeadersOf] = {
    "response": _response_headers,
    "own": _own_headers,
    "botocore": _botocore_headers,
}


def install(module: ModuleType) -> list[ledger.Patch]:
    """Patches the status exception's ``__init__`` in a module whose ``Library`` names one
    (``status_error``)."""
    record = LIBRARIES[module.__name__]
    assert record.status_error is not None
    noting = _noting(HEADERS_OF[record.headers_at])
    return [ledger.wrap(getattr(module, record.status_error), "__init__", noting)]


def _noting(headers_of: HeadersOf) -> Callable[[Any], Any]:
    def make(original: Any) -> Any:
        @functools.wraps(original)
        def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
            original(self, *args, **kwargs)
            note_injected(self, headers_of(self))

        return __init__

    return make
