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

import sys
from collections.abc import Callable
from types import ModuleType
from typing import Any

from .._core import runtime
from .._core.models import Interaction
from .._core.tape import Recording
from . import urllib3 as urllib3_adapter

_PATCHED = "__agenttape_original__"

# What ``send`` overrides may change; an adapter class overriding any of them is left to it.
_SEND_STEPS = ("get_connection_with_tls_context", "cert_verify", "request_url", "add_headers")

# adapter -> (origin, verify, cert) -> its pool
_POOLS = urllib3_adapter.PoolsSeen()


def install(adapters: ModuleType) -> None:
    base = adapters.HTTPAdapter
    if _PATCHED in vars(base):
        return
    original = base.send
    setattr(base, _PATCHED, original)
    # requests has imported urllib3 by the time its adapters module exists.
    base.send = _make_send(original, base, adapters.TimeoutSauce, sys.modules["urllib3"])


def _make_send(
    original: Callable[..., Any], base: type, timeout_class: type, urllib3: ModuleType
) -> Callable[..., Any]:
    plain: dict[type, bool] = {}

    def send(
        self: Any,
        request: Any,
        stream: bool = False,
        timeout: Any = None,
        verify: Any = True,
        cert: Any = None,
        proxies: Any = None,
    ) -> Any:
        tape = runtime.active()
        cls = type(self)
        if cls not in plain:
            plain[cls] = all(getattr(cls, name) is getattr(base, name) for name in _SEND_STEPS)
        if tape is None or proxies or not plain[cls] or urllib3_adapter.handing_down():
            return original(self, request, stream, timeout, verify, cert, proxies)
        place = urllib3_adapter.origin_and_target(request.url)
        if place is None:
            return original(self, request, stream, timeout, verify, cert, proxies)
        origin, target = place
        pool = _POOLS.find(self, self.poolmanager, (origin, verify, cert))
        if pool is None:
            response = original(self, request, stream, timeout, verify, cert, proxies)
            _POOLS.learn(self, self.poolmanager, (origin, verify, cert), response.raw)
            return response
        if isinstance(timeout, tuple):
            if len(timeout) != 2:
                return original(self, request, stream, timeout, verify, cert, proxies)
            resolved = timeout_class(connect=timeout[0], read=timeout[1])
        elif isinstance(timeout, timeout_class):
            resolved = timeout
        else:
            resolved = timeout_class(connect=timeout, read=timeout)
        body = request.body
        arguments = {
            "method": request.method,
            "url": target,
            "body": body,
            "headers": request.headers,
            "redirect": False,
            "assert_same_host": False,
            "preload_content": False,
            "decode_content": False,
            "retries": self.max_retries,
            "timeout": resolved,
            "chunked": not (body is None or "Content-Length" in request.headers),
        }
        known = urllib3_adapter.known_head(urllib3, pool, arguments)
        if known is None:
            return original(self, request, stream, timeout, verify, cert, proxies)

        def hand_down(plan: Interaction | Recording) -> Any:
            return urllib3_adapter.handed_down(
                tape, plan, lambda: original(self, request, stream, timeout, verify, cert, proxies)
            )

        return urllib3_adapter.known_exchange(
            urllib3,
            tape,
            known,
            arguments,
            answer=lambda response: self.build_response(request, response),
            hand_down=hand_down,
        )

    return send
