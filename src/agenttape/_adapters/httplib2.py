"""httplib2 (and google-api-python-client and the Google API clients on it).

``Http.request`` sends through ``http.client``'s connection machinery, on connection classes
of httplib2's own (``HTTPConnectionWithTimeout``, ``HTTPSConnectionWithTimeout``) whose
``connect`` opens (and, for HTTPS, wraps) the socket itself and which ``Http`` calls before the
request reaches ``http.client``. Those two ``connect`` methods are put off under a tape as
``http.client``'s own are: the request is then kept, decided on and served by the
``http.client`` adapter — replayed over an in-memory socket, or recorded on a connection opened
only then — so httplib2's own response handling (its gzip and deflate decoding, redirects,
caching, its ``ServerNotFoundError`` for a name that does not resolve) runs as live.
"""

from __future__ import annotations

import http.client
from types import ModuleType

from .._core.blame import passed_through
from . import http_client, ledger
from .http_client import defer_connect

__tracebackhide__ = passed_through


def install(module: ModuleType) -> list[ledger.Patch]:
    # With the http.client adapter's patches (in place already, they are skipped): where
    # those do not fit, httplib2's connections are not put off either.
    return [
        *http_client.install(http.client),
        defer_connect(module.HTTPConnectionWithTimeout),
        defer_connect(module.HTTPSConnectionWithTimeout),
    ]
