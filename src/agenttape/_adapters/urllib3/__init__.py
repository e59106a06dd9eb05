"""urllib3 2.x, and so requests and botocore: one ``HTTPConnectionPool._make_request`` call is
one wire exchange (each redirect hop and each urllib3 retry included).

The request is first rendered by a copy of the connection, with its own code, into memory,
which yields the exact bytes it would send and makes the replay-or-record decision possible
before any socket opens; a head rendered once serves later requests that differ only in their
target and in plain header values (``HeadShape``), and a known head lets ``urlopen`` (or
requests' adapter) begin the exchange itself (``known_exchange``). Replay then asks that same
copy for its response, as ``_make_request`` would, over an in-memory socket holding the
recorded body: the head is handed to ``http.client`` as it would have parsed it (no second
send, no header parsing), and urllib3 wraps it and reads the body as live, so preloading,
streaming, decoding, chunked reads, cookies and retries happen as they did live. Recording
reads the body through a tee placed on the socket file right after the head.
"""

from __future__ import annotations

import http.client
import inspect
from collections.abc import Callable
from types import ModuleType
from typing import Any

from ..._core import runtime
from ..._core.blame import passed_through
from ..._core.exchange import skip_retry_wait
from .. import http_client, ledger
from . import future as urllib3_future
from .exchange import (
    HANDED,
    as_it_is,
    binder,
    handed_down,
    known_exchange,
    known_head,
    serve_make_request,
)

__tracebackhide__ = passed_through


def install(urllib3: ModuleType) -> list[ledger.Patch]:
    if urllib3_future.is_future(urllib3):
        return urllib3_future.install(urllib3)
    retry = ledger.wrap(urllib3.util.retry.Retry, "sleep", _make_sleep)
    if int(urllib3.__version__.split(".", 1)[0]) < 2:
        return [*_install_1x(urllib3), retry]
    # Attributes, not imports: this runs under the adapters' lock, which never waits on an
    # import (the package has imported both modules by the time it is patched).
    pool_class = urllib3.connectionpool.HTTPConnectionPool
    return [
        ledger.wrap(pool_class, "_make_request", lambda found: _make_make_request(found, urllib3)),
        ledger.wrap(pool_class, "urlopen", lambda found: _make_urlopen(found, urllib3)),
        retry,
    ]


def _install_1x(urllib3: ModuleType) -> list[ledger.Patch]:
    """urllib3 1.x (1.26: requests 2.28-2.31 and botocore 1.29-1.34 resolve it where urllib3 2
    is not allowed) sends through ``http.client``'s connection state machine with connection
    classes of its own: the ``http.client`` adapter serves its requests (its patches come
    with these), its own ``connect`` put off like the standard library's; the retry wait is
    skipped here as on 2.x."""
    connection = urllib3.connection
    return [
        *http_client.install(http.client),
        *(
            http_client.defer_connect(cls)
            for cls in (connection.HTTPConnection, connection.HTTPSConnection)
        ),
    ]


def _make_sleep(original: Callable[..., None]) -> Callable[..., None]:
    def sleep(self: Any, response: Any = None) -> None:
        if skip_retry_wait():
            return
        original(self, response)

    return sleep


def _make_make_request(original: Callable[..., Any], urllib3: ModuleType) -> Callable[..., Any]:
    # Made once the patches are checked: from then on its connections are served here.
    http_client.served_elsewhere(urllib3.connection.HTTPConnection)
    bind = binder(inspect.signature(original))

    def _make_request(self: Any, *args: Any, **kwargs: Any) -> Any:
        handed = HANDED.get()
        if handed is not None:
            owner, plan = handed
            if plan is not None:
                HANDED.set((owner, None))
            return serve_make_request(original, urllib3, owner, bind(self, *args, **kwargs), plan)
        tape = runtime.active()
        if tape is None:
            return original(self, *args, **kwargs)
        return serve_make_request(original, urllib3, tape, bind(self, *args, **kwargs))

    return _make_request


def _make_urlopen(original: Callable[..., Any], urllib3: ModuleType) -> Callable[..., Any]:
    """``urlopen`` begins the exchange itself when the head it will send is known
    (``known_exchange``); anything else goes down to ``_make_request`` as live."""
    bind = binder(inspect.signature(original))

    def urlopen(self: Any, *args: Any, **kwargs: Any) -> Any:
        tape = runtime.active()
        if tape is None or HANDED.get() is not None:
            return original(self, *args, **kwargs)
        arguments = bind(self, *args, **kwargs)
        known = known_head(urllib3, self, arguments)
        if known is None:
            return original(self, *args, **kwargs)
        return known_exchange(
            urllib3,
            tape,
            known,
            arguments,
            answer=as_it_is,
            hand_down=lambda plan: handed_down(tape, plan, lambda: original(self, *args, **kwargs)),
        )

    return urlopen
