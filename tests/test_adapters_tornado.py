"""tornado's ``AsyncHTTPClient`` (``simple_httpclient``): ``fetch`` recorded against a real
server and replayed with the server stopped — status, headers in order, the body as tornado
gives it (the cassette keeps the gzip bytes sent), ``streaming_callback`` pieces and
``header_callback`` lines as recorded, redirects, ``HTTPClientError`` for a 4xx with
``raise_error`` either way, and the errors tornado raises live (its ``HTTPTimeoutError``, a
refused connection, a name that does not resolve)."""

from __future__ import annotations

import gzip
import socket
from pathlib import Path
from typing import Any

import pytest

import agenttape
from tests.servers import (
    Reply,
    Seen,
    Serve,
    client_app,
    failing_urls,
    loaded,
    record_then_replay_async,
)

httpclient = pytest.importorskip("tornado.httpclient")
simple_httpclient = pytest.importorskip("tornado.simple_httpclient")

PAYLOAD = b'{"quote": {"symbol": "ACME", "price": 12.5}}'


shared_app = client_app(PAYLOAD)


def app(seen: Seen) -> Reply:
    if seen.path == "/stream":
        return Reply(
            headers=[("Content-Type", "text/event-stream"), ("X-Dup", "a"), ("X-Dup", "b")],
            chunks=[b"data: one\n\n", b"data: two\n\n", b"data: three\n\n"],
            chunked=True,
            delay=0.05,
        )
    return shared_app(seen)


def client() -> Any:
    return httpclient.AsyncHTTPClient(force_instance=True)


async def test_fetch_records_and_replays_byte_exact(serve: Serve, cassette_path: Path) -> None:
    server = serve(app)

    async def run() -> list[Any]:
        fetch = client().fetch
        got: list[Any] = []
        zipped = await fetch(server.url + "/gzip")
        got.append((zipped.code, zipped.reason, list(zipped.headers.get_all()), zipped.body))
        posted = await fetch(server.url + "/echo", method="POST", body=b"q=1")
        got.append((posted.code, posted.body))
        moved = await fetch(server.url + "/moved")
        got.append((moved.code, moved.effective_url, moved.body))
        return got

    live, replayed = await record_then_replay_async(cassette_path, server, run)
    assert replayed == live
    assert live[0][3] == PAYLOAD  # tornado decoded it, live and replayed
    assert ("X-Consumed-Content-Encoding", "gzip") in live[0][2]
    assert live[2] == (200, f"{server.url}/gzip", PAYLOAD)
    interactions = (await loaded(cassette_path)).interactions
    assert [i.request.url for i in interactions] == [
        f"{server.url}/gzip",
        f"{server.url}/echo",
        f"{server.url}/moved",
        f"{server.url}/gzip",  # the redirect's hop, its own exchange
    ]
    first = interactions[0]
    assert first.response is not None
    assert gzip.decompress(first.response.body) == PAYLOAD  # the wire bytes, still gzip
    assert ("Content-Encoding", "gzip") in first.response.headers
    assert ("Accept-Encoding", "gzip") in first.request.headers  # as tornado sent it
    assert interactions[1].request.body == b"q=1"


async def test_streaming_and_header_callbacks_get_what_was_recorded(
    serve: Serve, cassette_path: Path
) -> None:
    server = serve(app)

    async def run() -> tuple[list[bytes], list[str], bytes, list[bytes]]:
        pieces: list[bytes] = []
        lines: list[str] = []
        response = await client().fetch(
            server.url + "/stream", streaming_callback=pieces.append, header_callback=lines.append
        )
        framed: list[bytes] = []
        await client().fetch(server.url + "/pieces", streaming_callback=framed.append)
        return pieces, lines, response.body, framed

    live, replayed = await record_then_replay_async(cassette_path, server, run)
    assert replayed == live
    assert live[0] == [b"data: one\n\n", b"data: two\n\n", b"data: three\n\n"]
    assert live[3] == [b"a" * 10, b"b" * 10, b"c" * 10]
    assert live[1][:4] == [
        "HTTP/1.1 200 OK\r\n",
        "Content-Type: text/event-stream\r\n",
        "X-Dup: a\r\n",
        "X-Dup: b\r\n",
    ]
    for interaction in (await loaded(cassette_path)).interactions:
        assert interaction.response is not None and len(interaction.response.chunks) == 3


async def test_client_errors_with_and_without_raise_error(
    serve: Serve, cassette_path: Path
) -> None:
    server = serve(app)

    async def run() -> list[Any]:
        fetch = client().fetch
        with pytest.raises(httpclient.HTTPClientError) as raised:
            await fetch(server.url + "/missing")
        answered = await fetch(server.url + "/missing", raise_error=False)
        error = answered.error
        return [
            (raised.value.code, raised.value.response.body),
            (answered.code, answered.body, type(error), error.code),
        ]

    live, replayed = await record_then_replay_async(cassette_path, server, run)
    assert replayed == live
    assert live[1][:3] == (404, b'{"error": "no such thing"}', httpclient.HTTPClientError)


async def _failures(url: str) -> list[tuple[type[BaseException], str]]:
    got = []
    for target, timeout in failing_urls(url):
        with pytest.raises(Exception) as caught:
            await client().fetch(target, request_timeout=timeout)
        got.append((type(caught.value), str(caught.value)))
    return got


async def test_failures_replay_as_tornado_raises_them(serve: Serve, cassette_path: Path) -> None:
    server = serve(app)
    unrecorded = await _failures(server.url)  # tornado on its own
    async with agenttape.use_cassette(cassette_path, mode="all"):
        live = await _failures(server.url)
    server.stop()
    async with agenttape.use_cassette(cassette_path, match_on=("method", "path")) as tape:
        replayed = await _failures(server.url)
        assert tape.all_played
    assert replayed == live == unrecorded
    assert [kind for kind, _ in live] == [
        simple_httpclient.HTTPTimeoutError,
        ConnectionRefusedError,
        socket.gaierror,
    ]


async def test_a_miss_is_unmatched_and_mode_none_stays_off_the_network(
    serve: Serve, cassette_path: Path
) -> None:
    server = serve(app)
    async with agenttape.use_cassette(cassette_path, mode="all"):
        await client().fetch(server.url + "/echo")
    async with agenttape.use_cassette(cassette_path):
        with pytest.raises(agenttape.UnmatchedInteractionError):
            await client().fetch(server.url + "/other")
    assert [seen.path for seen in server.seen] == ["/echo"]  # the miss never reached it
