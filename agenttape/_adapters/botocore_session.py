"""botocore: a request whose head urllib3's adapter already knows for the connection pool
``URLLib3Session.send`` would use is served right there, so a replayed response skips the
proxy and pool lookups and ``urlopen``'s own steps; botocore's ``AWSResponse`` is made from
urllib3's response as ``send`` makes it. Any other response, and every recording, is handed
down through ``send`` as live to urllib3, where it is served (see the urllib3 adapter); any
other request, one through a proxy included, goes through ``send`` untouched."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from types import ModuleType
from typing import Any

from .._core import runtime
from .._core.models import Interaction
from .._core.tape import Recording
from . import urllib3 as urllib3_adapter

_PATCHED = "__agenttape_original__"

# What ``send`` uses of its session; a botocore without any of them is left to itself.
_SEND_STEPS = ("_get_request_timeout", "_chunked", "_setup_ssl_cert", "_get_connection_manager")

# session -> origin -> its pool
_POOLS = urllib3_adapter.PoolsSeen()


def install(httpsession: ModuleType) -> None:
    session_class = httpsession.URLLib3Session
    if _PATCHED in vars(session_class):
        return
    if not all(hasattr(session_class, name) for name in _SEND_STEPS):
        return
    original = session_class.send
    setattr(session_class, _PATCHED, original)
    # botocore has imported urllib3 by the time this module exists (its request classes may
    # still be importing: they are looked up when a request is sent, as ``send`` does).
    session_class.send = _make_send(
        original, session_class, httpsession.Retry, sys.modules["urllib3"]
    )


def _make_send(
    original: Callable[..., Any], base: type, retry_class: type, urllib3: ModuleType
) -> Callable[..., Any]:
    plain: dict[type, bool] = {}

    def send(self: Any, request: Any) -> Any:
        tape = runtime.active()
        cls = type(self)
        if cls not in plain:
            plain[cls] = all(getattr(cls, name) is getattr(base, name) for name in _SEND_STEPS)
        if (
            tape is None
            or not plain[cls]
            or urllib3_adapter.handing_down()
            or self._proxy_config.proxy_url_for(request.url) is not None
            or os.environ.get("BOTO_EXPERIMENTAL__ADD_PROXY_HOST_HEADER")
        ):
            return original(self, request)
        place = urllib3_adapter.origin_and_target(request.url)
        if place is None:
            return original(self, request)
        origin, target = place
        manager = self._get_connection_manager(request.url, None)
        pool = _POOLS.find(self, manager, origin)
        if pool is None:
            response = original(self, request)
            _POOLS.learn(self, manager, origin, response.raw)
            return response
        self._setup_ssl_cert(pool, request.url, self._verify)
        arguments = {
            "method": request.method,
            "url": target,
            "body": request.body,
            "headers": request.headers,
            "retries": retry_class(False),
            "assert_same_host": False,
            "preload_content": False,
            "decode_content": False,
            "chunked": self._chunked(request.headers),
            "response_kw": {"enforce_content_length": False},
        }
        timeout = self._get_request_timeout(request)
        if timeout is not None:
            arguments["timeout"] = timeout
        known = urllib3_adapter.known_head(urllib3, pool, arguments)
        if known is None:
            return original(self, request)

        def answer(raw: Any) -> Any:
            response_class = sys.modules["botocore.awsrequest"].AWSResponse
            response = response_class(request.url, raw.status, raw.headers, raw)
            if not request.stream_output:
                response.content  # noqa: B018 - read at once, as send does
            return response

        def hand_down(plan: Interaction | Recording) -> Any:
            return urllib3_adapter.handed_down(tape, plan, lambda: original(self, request))

        return urllib3_adapter.known_exchange(
            urllib3, tape, known, arguments, answer=answer, hand_down=hand_down
        )

    return send
