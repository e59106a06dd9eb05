"""requests' own level: a replayed request whose head is known is served at
``HTTPAdapter.send``, and must come out as live did; an adapter or a request that ``send``
would treat differently goes down to urllib3 as live."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import requests
import urllib3
from requests.adapters import HTTPAdapter

import agenttape
from tests.servers import App, Reply, Server, gzip_reply, record_then_replay

# Serving a request at requests' send is urllib3 2's adapter's; on urllib3 1.x every request
# goes down to http.client's (tests/test_adapters_urllib3.py covers requests there).
pytestmark = pytest.mark.skipif(
    int(urllib3.__version__.split(".")[0]) < 2, reason="the send-level path needs urllib3 2"
)

Serve = Callable[[App], Server]


def _app(seen: Any) -> Reply:
    kind = seen.path.split("/")[1]
    if kind == "gzip":
        return gzip_reply(b'{"packed": true}' * 40)
    if kind == "cookie":
        return Reply(headers=[("Set-Cookie", "theme=dark; Path=/")], chunks=[b"set"])
    return Reply(
        headers=[("Content-Type", "text/plain"), ("X-Path", seen.path), ("x-lower", "kept")],
        chunks=[f"body of {seen.path}".encode()],
    )


def _seen(response: requests.Response, session: requests.Session) -> tuple[Any, ...]:
    original = response.raw._original_response
    return (
        response.status_code,
        response.reason,
        response.url,
        response.encoding,
        list(response.headers.items()),
        list(response.raw.headers.items()),
        original.msg.items(),
        original.version,
        response.raw.version,
        response.content,
        response.connection is session.get_adapter(response.url),
        sorted(session.cookies.keys()),
    )


@pytest.fixture
def pool_lookups(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """The URL of every pool lookup ``HTTPAdapter.send`` makes."""
    looked_up: list[str] = []
    lookup = HTTPAdapter.get_connection_with_tls_context

    def counted(self: HTTPAdapter, request: Any, *args: Any, **kwargs: Any) -> Any:
        looked_up.append(request.url)
        return lookup(self, request, *args, **kwargs)

    monkeypatch.setattr(HTTPAdapter, "get_connection_with_tls_context", counted)
    yield looked_up


PATHS = ["/plain/1", "/plain/2?q=a%20b&r=1", "/gzip/1", "/cookie/1", "/plain/3", "/plain/1"]


def test_a_known_head_is_replayed_at_send_as_live(
    serve: Serve, cassette_path: Path, pool_lookups: list[str]
) -> None:
    server = serve(_app)

    def run() -> list[tuple[Any, ...]]:
        with requests.Session() as session:
            return [_seen(session.get(server.url + path, timeout=5), session) for path in PATHS]

    live, replayed = record_then_replay(cassette_path, server, run)
    cookie = PATHS.index("/cookie/1")
    # Set-Cookie values never reach the disk: the jar takes the redacted value, which shows the
    # replayed response went through requests' cookie extraction.
    assert (live[cookie][-1], replayed[cookie][-1]) == (["theme"], ["<redacted>"])
    for row in (live, replayed):
        row[cookie] = row[cookie][:4] + row[cookie][7:]
        row[cookie:] = [values[:-1] for values in row[cookie:]]
    assert replayed == live
    # Live, every request looked its pool up; replayed, only the first: the others were served
    # at send.
    assert len(pool_lookups) == 2 * len(PATHS) - (len(PATHS) - 1)


class _Versioned(HTTPAdapter):
    """An adapter of its own that sends every request under /v2."""

    def request_url(self, request: Any, proxies: Any) -> str:
        return "/v2" + super().request_url(request, proxies)


def test_an_adapter_with_steps_of_its_own_is_served_below_send(
    serve: Serve, cassette_path: Path
) -> None:
    server = serve(_app)

    def run() -> list[bytes]:
        with requests.Session() as session:
            session.mount("http://", _Versioned())
            return [session.get(f"{server.url}/plain/{n}", timeout=5).content for n in range(3)]

    live, replayed = record_then_replay(cassette_path, server, run)
    assert replayed == live == [f"body of /v2/plain/{n}".encode() for n in range(3)]
    recorded = agenttape.load(cassette_path).interactions
    assert [i.request.url for i in recorded] == [f"{server.url}/v2/plain/{n}" for n in range(3)]


def test_urls_send_would_cut_differently_are_served_below_send(
    serve: Serve, cassette_path: Path
) -> None:
    """A fragment, and an empty query on a URL set by hand after ``prepare``: ``send`` sends
    neither."""
    server = serve(_app)

    def run() -> list[tuple[str, bytes]]:
        with requests.Session() as session:
            seen = []
            for url in (f"{server.url}/plain/1", f"{server.url}/plain/2#part", "/plain/3?"):
                prepared = session.prepare_request(requests.Request("GET", server.url + "/"))
                prepared.url = url if url.startswith("http") else server.url + url
                response = session.send(prepared, timeout=5)
                seen.append((response.url, response.content))
            return seen

    live, replayed = record_then_replay(cassette_path, server, run)
    assert replayed == live
    assert [body for _, body in live] == [f"body of /plain/{n}".encode() for n in (1, 2, 3)]
    recorded = agenttape.load(cassette_path).interactions
    assert [i.request.url for i in recorded] == [f"{server.url}/plain/{n}" for n in (1, 2, 3)]


def test_a_pool_closed_since_is_looked_up_again(
    serve: Serve, cassette_path: Path, pool_lookups: list[str]
) -> None:
    server = serve(_app)

    def run() -> list[bytes]:
        with requests.Session() as session:
            first = [session.get(f"{server.url}/plain/{n}", timeout=5).content for n in range(2)]
            session.get_adapter(server.url).close()
            later = [session.get(f"{server.url}/plain/{n}", timeout=5).content for n in range(2, 4)]
            return first + later

    live, replayed = record_then_replay(cassette_path, server, run)
    assert replayed == live == [f"body of /plain/{n}".encode() for n in range(4)]
    assert len(pool_lookups) == 4 + 2  # replayed: the first request and the one after close


def test_a_request_through_a_proxy_setting_is_served_below_send(
    serve: Serve, cassette_path: Path, pool_lookups: list[str]
) -> None:
    server = serve(_app)
    # The proxy applies to no host the test asks for: send still goes its own way.
    proxies = {"https": "http://127.0.0.1:9", "no_proxy": "127.0.0.1"}

    def run() -> list[bytes]:
        with requests.Session() as session:
            return [
                session.get(f"{server.url}/plain/{n}", proxies=proxies, timeout=5).content
                for n in range(3)
            ]

    live, replayed = record_then_replay(cassette_path, server, run)
    assert replayed == live
    assert len(pool_lookups) == 6
    with agenttape.use_cassette(cassette_path) as tape:
        assert tape.interactions[0].request.url == f"{server.url}/plain/0"
