"""A large cassette replays from its file (``StoredInteractions``): each interaction is decoded
when played, byte-exact, and what was loaded stays true while the file is replaced."""

from __future__ import annotations

import gc
import json
import os
import tracemalloc
from collections.abc import Callable
from pathlib import Path

import httpx
import msgpack
import pytest

import agenttape
from agenttape._core.models import Closed, Failure, Frame, Interaction, Request, Response
from agenttape._core.wire import codec
from agenttape._core.wire.fast_read import SharedPairs, decode_plain
from agenttape._core.wire.stored import LAZY_FROM, StoredInteractions, rebuilt
from tests.servers import Reply, Seen, Serve, path_body, refused_port

BODY = 1 << 20
PATHS = [f"/part/{i}" for i in range(LAZY_FROM // BODY + 1)]
"""Enough 1 MiB answers to make the cassette one read lazily (``decoded_size``)."""


def app(seen: Seen) -> Reply:
    """Each GET answers with its own 1 MiB; a POST echoes its JSON body back."""
    if seen.method == "POST":
        return Reply(headers=[("Content-Type", "application/json")], chunks=[seen.body])
    return Reply(
        headers=[("Content-Type", "application/octet-stream"), ("X-Path", seen.path)],
        chunks=[path_body(seen.path, BODY)],
    )


def record(
    path: Path, serve: Serve, *, fault: agenttape.Fault | None = None, refused: bool = False
) -> str:
    """Records every part and two JSON POSTs (then, with ``refused``, a connection refused,
    whose URL is returned); returns the server's URL, the server stopped."""
    server = serve(app)
    failing = f"http://127.0.0.1:{refused_port()}/"
    with (
        agenttape.use_cassette(path, mode="once", faults=[fault] if fault else ()),
        httpx.Client(base_url=server.url) as client,
    ):
        if fault is not None:
            assert client.get(PATHS[0]).status_code == 429
        for part in PATHS:
            client.get(part)
        client.post("/chat", content=b'{"model":"m","messages":[1,2]}')
        client.post("/chat", content=b'{"model":"n","messages":[3]}')
        if refused:
            with pytest.raises(httpx.ConnectError):
                client.get(failing)
    server.stop()
    assert path.stat().st_size >= LAZY_FROM
    return failing if refused else server.url


def test_a_large_cassette_holds_only_where_its_interactions_stand(
    cassette_path: Path, serve: Serve
) -> None:
    """Decoded whole, the bodies alone would hold the file's size: opened, and after every
    body was replayed, the cassette holds a small part of it."""
    url = record(cassette_path, serve)
    size = cassette_path.stat().st_size
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        with agenttape.use_cassette(cassette_path) as tape:
            opened = tracemalloc.get_traced_memory()[0] - before
            assert isinstance(tape.interactions, StoredInteractions)
            with httpx.Client(base_url=url) as client:
                for part in reversed(PATHS):
                    answer = client.get(part)
                    assert answer.content == path_body(part, BODY)
                    assert answer.headers.raw[:2] == [
                        (b"Content-Type", b"application/octet-stream"),
                        (b"X-Path", part.encode()),
                    ]
                    del answer
                    gc.collect()  # httpx leaves a read response to the collector
            replayed = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert opened < size // 8
    assert replayed < size // 4
    assert tape.play_count == len(PATHS)


def _getter(client: str) -> tuple[Callable[[str], bytes], Callable[[], None]]:
    """A GET of a URL's body through ``client``, and the closing of what it opened."""
    if client == "requests":
        import requests

        session = requests.Session()
        return lambda url: session.get(url).content, session.close
    if client == "urllib3":
        import urllib3

        manager = urllib3.PoolManager()
        return lambda url: manager.request("GET", url).data, manager.clear
    if client == "aiohttp":
        import asyncio

        import aiohttp

        loop = asyncio.new_event_loop()

        async def get(url: str) -> bytes:
            async with aiohttp.ClientSession() as session, session.get(url) as answer:
                return await answer.read()

        return lambda url: loop.run_until_complete(get(url)), loop.close
    if client == "urllib.request":
        import urllib.request

        def fetch(url: str) -> bytes:
            with urllib.request.urlopen(url) as answer:
                return answer.read()  # type: ignore[no-any-return]

        return fetch, lambda: None
    if client == "tornado":
        from tornado.httpclient import HTTPClient

        tornado_client = HTTPClient()
        return lambda url: tornado_client.fetch(url).body, tornado_client.close
    client_ = httpx.Client()
    return lambda url: client_.get(url).content, client_.close


@pytest.mark.parametrize(
    "client", ["httpx", "requests", "urllib3", "aiohttp", "urllib.request", "tornado"]
)
def test_every_client_lets_go_of_a_played_interaction_without_a_collection(
    cassette_path: Path, serve: Serve, client: str
) -> None:
    """No client's own objects (which may wait in reference cycles for the collector, as a
    read httpx response does) keep a replayed interaction: with the collector off, once every
    body was read, only the last one decoded is still alive."""
    url = record(cassette_path, serve)
    get, close = _getter(client)
    gc.collect()
    gc.disable()
    try:
        with agenttape.use_cassette(cassette_path) as tape:
            assert isinstance(tape.interactions, StoredInteractions)
            for part in PATHS:
                assert get(url + part) == path_body(part, BODY)
            alive = [
                found.request.url
                for found in gc.get_objects()
                if type(found) is Interaction and found.request.url.startswith(url + "/part/")
            ]
    finally:
        gc.enable()
        close()
    assert tape.play_count == len(PATHS)
    assert alive == [url + PATHS[-1]]


def test_a_replayed_failure_names_its_interaction(cassette_path: Path, serve: Serve) -> None:
    url = record(cassette_path, serve, refused=True)
    failed = len(PATHS) + 2
    with agenttape.use_cassette(cassette_path) as tape:
        assert isinstance(tape.interactions, StoredInteractions)
        with pytest.raises(httpx.ConnectError) as caught:
            httpx.get(url)
    notes = "\n".join(getattr(caught.value, "__notes__", ()))
    assert f"agenttape: replayed from cassette {cassette_path}, interaction {failed} " in notes


def test_a_cassette_replaced_while_it_replays_serves_what_was_loaded(
    cassette_path: Path, serve: Serve, tmp_path: Path
) -> None:
    url = record(cassette_path, serve)
    other = tmp_path / "other.msgpack"
    other.write_bytes(b"\x80")  # an empty map: no cassette at all
    with agenttape.use_cassette(cassette_path), httpx.Client(base_url=url) as client:
        os.replace(other, cassette_path)
        assert [client.get(part).content for part in PATHS[:2]] == [
            path_body(part, BODY) for part in PATHS[:2]
        ]


def test_a_json_body_matches_by_its_bytes_or_its_canonical_form(
    cassette_path: Path, serve: Serve
) -> None:
    url = record(cassette_path, serve)
    with agenttape.use_cassette(cassette_path), httpx.Client(base_url=url) as client:
        same = client.post("/chat", content=b'{"model":"m","messages":[1,2]}')
        reordered = client.post("/chat", content=b'{"messages": [3], "model": "n"}')
        with pytest.raises(agenttape.UnmatchedInteractionError) as missed:
            client.post("/chat", content=b'{"model":"m","messages":[1,2,3]}')
    assert same.content == b'{"model":"m","messages":[1,2]}'
    assert reordered.content == b'{"model":"n","messages":[3]}'
    assert "body.messages" in str(missed.value)


def test_a_miss_and_the_never_played_report_read_the_file(
    cassette_path: Path, serve: Serve
) -> None:
    url = record(cassette_path, serve)
    with (
        pytest.warns(UserWarning, match=r"(?s)were never played.*/part/1\b"),
        agenttape.use_cassette(cassette_path, on_unused="warn"),
        httpx.Client(base_url=url) as client,
    ):
        client.get(PATHS[0])
        with pytest.raises(agenttape.UnmatchedInteractionError) as missed:
            client.get("/part/x")
    assert f"GET {url}/part/" in str(missed.value)
    assert "url.path: expected '/part/" in str(missed.value)


def test_with_faults_the_interactions_a_fault_made_are_left_out(
    cassette_path: Path, serve: Serve
) -> None:
    limit = agenttape.fault("rate_limit", on="GET /part/0", nth=1)
    url = record(cassette_path, serve, fault=limit)
    stored = agenttape.load(cassette_path).interactions
    assert [i.injected for i in stored[:2]] == [limit.describe(), None]
    with (
        agenttape.use_cassette(cassette_path, faults=[limit]) as tape,
        httpx.Client(base_url=url) as client,
    ):
        assert isinstance(tape.interactions, StoredInteractions)
        assert tape.interactions == [i for i in stored if i.injected is None]
        assert client.get(PATHS[0]).status_code == 429
        assert client.get(PATHS[0]).content == path_body(PATHS[0], BODY)
    assert len(tape.faults_fired) == 1


def test_a_large_cassette_cut_short_is_refused_whole(cassette_path: Path, serve: Serve) -> None:
    record(cassette_path, serve)
    data = cassette_path.read_bytes()
    cassette_path.write_bytes(data[: len(data) - 100])
    with (
        pytest.raises(agenttape.CassetteFormatError, match="left as it is"),
        agenttape.use_cassette(cassette_path),
    ):
        pass
    assert cassette_path.read_bytes() == data[: len(data) - 100]


def test_a_small_cassette_is_decoded_at_once(cassette_path: Path, serve: Serve) -> None:
    server = serve(app)
    with agenttape.use_cassette(cassette_path, mode="once"):
        httpx.post(server.url + "/chat", content=json.dumps({"a": 1}).encode())
    with agenttape.use_cassette(cassette_path) as tape:
        assert isinstance(tape.interactions, list)


def test_an_interaction_built_again_without_checks_equals_the_checked_one() -> None:
    """``rebuilt`` (on play) and ``decode_plain`` (on load) give equal interactions for every
    shape a cassette holds; a WebSocket session is left to ``decode_plain``."""
    request = Request("POST", "http://h/x", [("A", "1"), ("a", "2")], b"abc", [(1, 0.0), (2, 1)])
    shapes = [
        Interaction(request, Response(200, "OK", "HTTP/1.1", [("X", "y")], b"hello", [(5, 0)])),
        Interaction(
            request,
            Response(200, "", "HTTP/2", [], b"ab", [(1, 0.1), (1, 0.2)], True, [("t", "v")]),
            Failure("read_error", "ReadError", "cut"),
            started_at=1_700_000_000,
            ttfb=0,
            duration=2,
            injected="cut_stream",
        ),
        Interaction(request, None, Failure("connect_error", "ConnectError"), boundary="grpc"),
    ]
    data = codec.encode({}, shapes)
    document = msgpack.unpackb(data, raw=False, use_list=False, timestamp=3)
    for raw, shape in zip(document["interactions"], shapes, strict=True):
        checked = decode_plain(raw, SharedPairs(0))
        assert checked is not None and checked == shape
        assert rebuilt(raw) == checked
    session = Interaction(
        request, Response(101), frames=[Frame("client", "text", b"hi")], closed=Closed(1000)
    )
    (raw,) = msgpack.unpackb(codec.encode({}, [session]), raw=False, use_list=False, timestamp=3)[
        "interactions"
    ]
    assert rebuilt(raw) is None


def test_a_file_of_many_small_interactions_is_read_lazily_too(cassette_path: Path) -> None:
    """What many small interactions hold decoded is mostly objects, not the file's bytes."""
    count = LAZY_FROM // 1024 + 1
    made = [
        Interaction(
            Request("GET", f"http://api.test/items/{i}"),
            Response(200, "OK", headers=[("Content-Type", "text/plain")], body=b"item %d" % i),
        )
        for i in range(count)
    ]
    cassette_path.parent.mkdir(parents=True, exist_ok=True)
    cassette_path.write_bytes(codec.encode({}, made))
    assert cassette_path.stat().st_size < LAZY_FROM
    with agenttape.use_cassette(cassette_path) as tape:
        assert isinstance(tape.interactions, StoredInteractions)
        answer = httpx.get(f"http://api.test/items/{count - 1}")
    assert answer.content == b"item %d" % (count - 1)
    assert answer.headers.raw == [(b"Content-Type", b"text/plain")]
