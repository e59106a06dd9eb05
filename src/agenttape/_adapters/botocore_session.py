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
from typing import Any

from .._core import runtime
from .urllib3 import send as urllib3_adapter
from .urllib3.exchange import handing_down


def _make_send(
    original: Callable[..., Any], kept: urllib3_adapter.KeptSteps, *, retry_class: type
) -> Callable[..., Any]:
    def send(self: Any, request: Any) -> Any:
        tape = runtime.active()
        if (
            tape is None
            or not kept(type(self))
            or handing_down()
            or self._proxy_config.proxy_url_for(request.url) is not None
            or os.environ.get("BOTO_EXPERIMENTAL__ADD_PROXY_HOST_HEADER")
        ):
            return original(self, request)
        place = urllib3_adapter.origin_and_target(request.url)
        if place is None:
            return original(self, request)
        origin, target = place

        def arguments_for(pool: Any) -> dict[str, Any]:
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
            return arguments

        def answer(raw: Any) -> Any:
            # Looked up here: botocore's request classes may still be importing at install.
            response_class = sys.modules["botocore.awsrequest"].AWSResponse
            response = response_class(request.url, raw.status, raw.headers, raw)
            if not request.stream_output:
                response.content  # noqa: B018 - read at once, as send does
            return response

        return urllib3_adapter.serve_at_send(
            tape,
            self,
            self._get_connection_manager(request.url, None),
            origin,
            arguments_for,
            lambda: original(self, request),
            answer,
        )

    return send


install = urllib3_adapter.send_installer(
    "URLLib3Session",
    # What ``send`` uses of its session; a session class overriding one is left to itself,
    # and a botocore without one of them is not patched.
    ("_get_request_timeout", "_chunked", "_setup_ssl_cert", "_get_connection_manager"),
    _make_send,
    retry_class="Retry",
)
