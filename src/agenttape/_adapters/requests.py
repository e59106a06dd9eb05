"""requests: a request whose head urllib3's adapter already knows for the connection pool
``HTTPAdapter.send`` would use is served right there, so a replayed response skips the pool
lookup, the proxy scan and ``urlopen``'s own steps; ``build_response`` makes the requests
response from urllib3's, as live. Any other response, and every recording, is handed down
through ``send`` as live to urllib3, where it is served (see the urllib3 adapter); any other
request goes through ``send`` untouched.

The pool is the one ``send`` found for the same origin, TLS options and pool manager on an
earlier request, still held by the manager under the same key; one the manager has let go
since is looked up again."""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable
from types import ModuleType
from typing import Any

from .._core import runtime
from .._core.blame import passed_through
from .._core.tracebacks import noting
from . import ledger
from .urllib3 import send as urllib3_adapter
from .urllib3.exchange import handing_down

__tracebackhide__ = passed_through


def _make_send(
    original: Callable[..., Any],
    kept: urllib3_adapter.KeptSteps,
    *,
    timeout_class: type,
    headers_class: type,
) -> Callable[..., Any]:
    # send's default timeout=None, made once: urllib3 copies a timeout before it uses one.
    untimed = timeout_class(connect=None, read=None)

    def send(
        self: Any,
        request: Any,
        stream: bool = False,
        timeout: Any = None,
        verify: Any = True,
        cert: Any = None,
        proxies: Any = None,
    ) -> Any:
        def as_live() -> Any:
            return original(self, request, stream, timeout, verify, cert, proxies)

        tape = runtime.active()
        if tape is None or proxies or not kept(type(self)) or handing_down():
            return as_live()
        place = urllib3_adapter.origin_and_target(request.url)
        if place is None:
            return as_live()
        origin, target = place

        def arguments_for(pool: Any) -> dict[str, Any] | None:
            resolved = untimed if timeout is None else _resolved(timeout, timeout_class)
            if resolved is None:
                return None  # send's own error
            body = request.body
            return {
                "method": request.method,
                "url": target,
                "body": body,
                "headers": _plain(request.headers, headers_class),
                "redirect": False,
                "assert_same_host": False,
                "preload_content": False,
                "decode_content": False,
                "retries": self.max_retries,
                "timeout": resolved,
                "chunked": not (body is None or "Content-Length" in request.headers),
            }

        return urllib3_adapter.serve_at_send(
            tape,
            self,
            self.poolmanager,
            (origin, verify, cert),
            arguments_for,
            as_live,
            lambda response: self.build_response(request, response),
        )

    return send


def _resolved(timeout: Any, timeout_class: type) -> Any:
    """requests' ``timeout`` as urllib3 takes it; None for a tuple that send refuses."""
    if isinstance(timeout, tuple):
        if len(timeout) != 2:
            return None
        return timeout_class(connect=timeout[0], read=timeout[1])
    if isinstance(timeout, timeout_class):
        return timeout
    return timeout_class(connect=timeout, read=timeout)


def _plain(headers: Any, headers_class: type) -> Any:
    """requests' headers as a plain dict of the same pairs in the same order, for the fast
    path to read: the ``items()`` of its ``CaseInsensitiveDict`` (``headers_class``) runs
    Python code for each header, while the pairs it keeps (name as given, value) are read in
    one call. Any other mapping is handed on as it is."""
    store = getattr(headers, "_store", None)
    if type(headers) is not headers_class or type(store) is not OrderedDict:
        return headers
    return dict(store.values())


def install(module: ModuleType) -> list[ledger.Patch]:
    """``requests.adapters``: ``HTTPAdapter.send``. ``requests.sessions``: ``Session.send``,
    which reads a body that is not streamed after the adapter returned: the error it raises
    for a replayed body cut short (``ChunkedEncodingError``) is the one the caller catches,
    and carries the replay note."""
    if module.__name__ == "requests.sessions":
        return [ledger.wrap(module.Session, "send", noting)]
    return _install_send(module)


_install_send = urllib3_adapter.send_installer(
    "HTTPAdapter",
    # The adapter's steps ``send`` goes through; an adapter class overriding one is left to it.
    ("get_connection_with_tls_context", "cert_verify", "request_url", "add_headers"),
    _make_send,
    timeout_class="TimeoutSauce",
    headers_class="CaseInsensitiveDict",
)
