"""The standard library: ``http.client`` and ``urllib.request`` on it, recorded against a real
server and replayed with the server stopped, byte for byte (gzip stays gzip, chunk boundaries
kept), one interaction per request on a kept-alive connection."""

from __future__ import annotations

import gzip
import http.client
import json
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import agenttape
from tests.servers import App, Reply, Seen, Server, gzip_reply, json_reply, refused_port

Serve = Callable[[App], Server]


def app(seen: Seen) -> Reply:
    if seen.path.startswith("/gzip"):
        return gzip_reply(b'{"compressed": true}')
    if seen.path.startswith("/chunks"):
        return Reply(chunks=[b"data: one\n\n", b"data: two\n\n"], chunked=True)
    if seen.path.startswith("/missing"):
        return json_reply({"error": "not here"}, status=404)
    return json_reply({"method": seen.method, "path": seen.path, "body": seen.body.decode()})


def record_then_replay(cassette: Path, server: Server, run: Callable[[], Any]) -> tuple[Any, Any]:
    with agenttape.use_cassette(cassette, mode="all"):
        live = run()
    server.stop()
    with agenttape.use_cassette(cassette) as tape:
        replayed = run()
    assert tape.all_played
    return live, replayed


def test_http_client_requests_on_one_connection_record_and_replay(
    serve: Serve, cassette_path: Path
) -> None:
    server = serve(app)

    def run() -> list[Any]:
        connection = http.client.HTTPConnection("127.0.0.1", server.port, timeout=5)
        connection.request("POST", "/echo?a=1", body=b'{"q": 1}', headers={"X-Trace": "t-1"})
        first = connection.getresponse()
        got: list[Any] = [first.status, first.getheaders(), first.read()]
        connection.request("GET", "/gzip")
        second = connection.getresponse()
        got += [second.getheader("Content-Encoding"), gzip.decompress(second.read())]
        connection.request("GET", "/chunks")
        third = connection.getresponse()
        got += [third.read1(100), third.read()]
        connection.close()
        return got

    live, replayed = record_then_replay(cassette_path, server, run)
    assert replayed == live
    assert live[4] == b'{"compressed": true}'
    assert live[5] + live[6] == b"data: one\n\ndata: two\n\n"
    interactions = agenttape.load(cassette_path).interactions
    assert [i.request.method for i in interactions] == ["POST", "GET", "GET"]
    first = interactions[0]
    assert first.request.url == f"http://127.0.0.1:{server.port}/echo?a=1"
    assert ("X-Trace", "t-1") in first.request.headers
    assert first.request.body == b'{"q": 1}'
    gzipped = interactions[1].response
    assert gzipped is not None and gzip.decompress(gzipped.body) == b'{"compressed": true}'
    chunked = interactions[2].response
    assert chunked is not None and chunked.body == b"data: one\n\ndata: two\n\n"
    assert len(chunked.chunks) == 2  # the boundaries as they arrived


def test_urllib_request_urlopen_records_and_replays(serve: Serve, cassette_path: Path) -> None:
    server = serve(app)

    def run() -> list[Any]:
        with urllib.request.urlopen(f"{server.url}/hello", timeout=5) as response:
            got: list[Any] = [response.status, json.loads(response.read())]
        request = urllib.request.Request(f"{server.url}/post", data=b"x=1", method="POST")
        with urllib.request.urlopen(request, timeout=5) as response:
            got.append(json.loads(response.read()))
        with pytest.raises(urllib.error.HTTPError) as missing:
            urllib.request.urlopen(f"{server.url}/missing", timeout=5)
        got.append((missing.value.code, missing.value.read()))
        return got

    live, replayed = record_then_replay(cassette_path, server, run)
    assert replayed == live
    assert live[2] == {"method": "POST", "path": "/post", "body": "x=1"}
    assert live[3][0] == 404


def test_a_refused_connection_replays_as_the_same_error(cassette_path: Path) -> None:
    url = f"http://127.0.0.1:{refused_port()}/nothing"

    def run() -> str:
        with pytest.raises(urllib.error.URLError) as caught:
            urllib.request.urlopen(url, timeout=5)
        return type(caught.value.reason).__name__

    with agenttape.use_cassette(cassette_path, mode="all"):
        live = run()
    with agenttape.use_cassette(cassette_path):
        assert run() == live == "ConnectionRefusedError"


def test_requests_through_urllib3_are_recorded_once(serve: Serve, cassette_path: Path) -> None:
    """urllib3 sits on http.client's connection classes: its requests are one interaction
    each, whichever adapter serves them."""
    requests = pytest.importorskip("requests")
    server = serve(app)
    with agenttape.use_cassette(cassette_path, mode="all"):
        requests.get(f"{server.url}/one", timeout=5)
        requests.post(f"{server.url}/two", data=b"2", timeout=5)
    assert [i.request.url for i in agenttape.load(cassette_path).interactions] == [
        f"{server.url}/one",
        f"{server.url}/two",
    ]
