"""httpx's and httpx2's default transports, made while a tape replays, built on first use.

Building one loads the CA bundle into a new TLS context: about 45 ms, most of what a test
that makes an SDK client per test costs, and never needed by a client whose requests are all
replayed. The transport stays the library's own class (a subclass of it); the library's own
``__init__`` runs with the same arguments the first time the transport is used for anything
but being closed. Only transports whose construction cannot fail are held back (default
``verify``, no ``cert``, no ``proxy``, no ``http2``, no missing CA bundle named by the environment):
an error the library raises on construction is still raised there.
"""

from __future__ import annotations

import os
import threading
from types import ModuleType
from typing import Any

from .._core import runtime
from . import ledger

_OWN_ATTRIBUTES = frozenset({"_held_arguments", "_building"})


def install(hx: ModuleType) -> list[ledger.Patch]:
    """Holds back ``hx.HTTPTransport`` and ``hx.AsyncHTTPTransport``; a class that defines its
    own ``__new__`` (internals not known here) is left as it is."""
    return [
        ledger.override_new(transport_class, _deferring(mixin))
        for transport_class, mixin in (
            (hx.HTTPTransport, _Deferred),
            (hx.AsyncHTTPTransport, _AsyncDeferred),
        )
        if "__new__" not in vars(transport_class) or ledger.installed(transport_class, "__new__")
    ]


def _can_wait(arguments: dict[str, Any]) -> bool:
    """Construction with these arguments raises nothing the caller could see later instead."""
    return (
        arguments.get("verify", True) is True
        and arguments.get("cert") is None
        and arguments.get("proxy") is None
        and not arguments.get("http2", False)
        and not (arguments.get("trust_env", True) and _missing_ca_file())
    )


def _missing_ca_file() -> bool:
    """``SSL_CERT_FILE``, which the library reads on construction when it trusts the
    environment, names no file (a missing ``SSL_CERT_DIR`` raises nothing)."""
    named = os.environ.get("SSL_CERT_FILE")
    return named is not None and named != "" and not os.path.isfile(named)


def _replaying() -> bool:
    """A tape is active and records nothing: a recording's first exchange is not made to
    wait for the CA bundle, which would be kept in its timing."""
    tape = runtime.active()
    return tape is not None and not tape.is_recording


def _deferring(mixin: type) -> Any:
    """Makes the ``__new__`` of a transport class, with its held-back subclass."""
    return lambda cls: _make_new(cls, type(cls.__name__, (mixin, cls), {}))


def _make_new(transport_class: type, deferred: type) -> Any:
    def __new__(cls: type, *args: Any, **kwargs: Any) -> Any:
        if cls is transport_class and not args and _can_wait(kwargs) and _replaying():
            return object.__new__(deferred)
        return object.__new__(cls)

    return __new__


class _Held:
    """The library's ``__init__`` held back: an attribute the instance lacks is read only
    after it ran."""

    _held_arguments: dict[str, Any] | None

    def __init__(self, **arguments: Any) -> None:
        self._held_arguments = arguments
        self._building = threading.Lock()

    def __getattr__(self, name: str) -> Any:
        if name in _OWN_ATTRIBUTES:  # an instance made without __init__ (copy, pickle)
            raise AttributeError(name)
        self._build()
        return object.__getattribute__(self, name)

    @property
    def _built(self) -> bool:
        return self._held_arguments is None

    def _build(self) -> None:
        with self._building:
            arguments = self._held_arguments
            if arguments is not None:
                super().__init__(**arguments)
                self._held_arguments = None


class _Deferred(_Held):
    def close(self) -> None:
        if self._built:
            super().close()  # type: ignore[misc]

    def __enter__(self) -> Any:
        return super().__enter__() if self._built else self  # type: ignore[misc]

    def __exit__(self, *exc_info: object) -> None:
        if self._built:
            super().__exit__(*exc_info)  # type: ignore[misc]


class _AsyncDeferred(_Held):
    async def aclose(self) -> None:
        if self._built:
            await super().aclose()  # type: ignore[misc]

    async def __aenter__(self) -> Any:
        return await super().__aenter__() if self._built else self  # type: ignore[misc]

    async def __aexit__(self, *exc_info: object) -> None:
        if self._built:
            await super().__aexit__(*exc_info)  # type: ignore[misc]
