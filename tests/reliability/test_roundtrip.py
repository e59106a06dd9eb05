"""Whatever crossed the wire is what replay hands back: odd header bytes, duplicate and mixed-
case names, empty, non-UTF-8 and 100 MB bodies, chunk boundaries. Recorded through the real
httpx adapter against a real server, replayed with the server proven unused."""

from __future__ import annotations

import hashlib
import itertools
import string
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

import agenttape
from agenttape._core.secrets import SECRET_HEADERS, secret_regex
from tests.reliability.scale import properties
from tests.servers import Reply, Seen, Server

TOKEN = string.ascii_letters + string.digits + "!#$%&'*+-.^_`|~"
# Header value bytes HTTP/1.1 allows: visible ASCII and obs-text, spaces only inside.
VALUE_BYTES = [*range(0x21, 0x7F), *range(0x80, 0x100)]


@dataclass
class Exchange:
    method: str
    request_headers: list[tuple[bytes, bytes]]
    request_body: bytes
    reply: Reply


def header_names() -> st.SearchStrategy[str]:
    pool = st.text(st.sampled_from(TOKEN), min_size=1, max_size=12)
    return pool.filter(lambda n: n.lower() not in SECRET_HEADERS and n.lower() not in RESERVED)


RESERVED = {"content-length", "transfer-encoding", "host", "connection", "expect", "te", "upgrade"}


@st.composite
def header_values(draw: st.DrawFn) -> bytes:
    words = draw(st.lists(st.binary(min_size=1, max_size=8).map(_visible), min_size=0, max_size=3))
    value = b" ".join(words)
    assume(not secret_regex().search(value.decode("latin-1")))
    return value


def _visible(raw: bytes) -> bytes:
    return bytes(VALUE_BYTES[b % len(VALUE_BYTES)] for b in raw)


@st.composite
def header_lists(draw: st.DrawFn) -> list[tuple[bytes, bytes]]:
    names = draw(st.lists(header_names(), min_size=1, max_size=3))
    count = draw(st.integers(0, 6))
    # Names drawn from a small pool, in random case: duplicates and case both occur.
    return [
        (
            draw(st.sampled_from(names)).encode("latin-1"),
            draw(header_values()),
        )
        for _ in range(count)
    ]


bodies = st.one_of(
    st.just(b""),
    st.binary(min_size=1, max_size=2048),
    st.sampled_from([b"\xff\xfe\x00bad utf-8 \xc3\x28", "caf\u00e9".encode("latin-1"), b"{}"]),
)


@st.composite
def exchanges(draw: st.DrawFn) -> Exchange:
    chunked = draw(st.booleans())
    chunks = draw(st.lists(st.binary(min_size=1, max_size=512), max_size=5)) if chunked else []
    if not chunked:
        body = draw(bodies)
        chunks = [body] if body else []
    reason = draw(st.binary(max_size=16).map(_visible))
    reply = Reply(
        status=draw(st.sampled_from([200, 201, 299, 400, 404, 429, 500, 503, 599])),
        reason=reason.decode("latin-1"),
        headers=[(n.decode("latin-1"), v.decode("latin-1")) for n, v in draw(header_lists())],
        chunks=chunks,
        chunked=chunked,
    )
    return Exchange(
        method=draw(st.sampled_from(["GET", "POST", "PUT", "PATCH", "DELETE"])),
        request_headers=draw(header_lists()),
        request_body=draw(bodies),
        reply=reply,
    )


class Scripted:
    """One server for every example; each path answers with the reply scripted for it."""

    def __init__(self) -> None:
        self.replies: dict[str, Reply] = {}
        self.server = Server(self.app)
        self.paths = itertools.count()

    def app(self, seen: Seen) -> Reply:
        return self.replies[seen.path]

    def script(self, reply: Reply) -> str:
        path = f"/exchange/{next(self.paths)}"
        self.replies[path] = reply
        return self.server.url + path


@pytest.fixture(scope="module")
def scripted() -> Iterator[Scripted]:
    script = Scripted()
    yield script
    script.server.stop()


def fetch(client: httpx.Client, exchange: Exchange, url: str) -> tuple[httpx.Response, list[bytes]]:
    with client.stream(
        exchange.method, url, headers=exchange.request_headers, content=exchange.request_body
    ) as response:
        return response, list(response.iter_raw())


def head_of(response: httpx.Response) -> tuple[int, bytes, str, list[tuple[bytes, bytes]]]:
    return (
        response.status_code,
        response.extensions["reason_phrase"],
        response.http_version,
        list(response.headers.raw),
    )


counter = itertools.count()


@properties(60, 300)
@given(exchange=exchanges())
def test_recorded_and_replayed_byte_exact(
    exchange: Exchange, scripted: Scripted, tmp_path_factory: pytest.TempPathFactory
) -> None:
    url = scripted.script(exchange.reply)
    path = tmp_path_factory.getbasetemp() / "roundtrip" / f"{next(counter)}.msgpack"
    with httpx.Client() as client:
        with agenttape.use_cassette(path, mode="all"):
            live, live_chunks = fetch(client, exchange, url)
        sent = scripted.server.seen[-1]
        with agenttape.use_cassette(path, mode="none") as tape:
            replayed, replayed_chunks = fetch(client, exchange, url)
            assert tape.all_played
    assert scripted.server.seen[-1] is sent  # replay never reached the server

    (interaction,) = agenttape.load(path).interactions
    recorded = interaction.response
    assert recorded is not None
    # The request exactly as httpx put it on the wire.
    assert interaction.request.method == exchange.method
    assert [
        (k.encode("latin-1"), v.encode("latin-1")) for k, v in interaction.request.headers
    ] == list(live.request.headers.raw)
    assert interaction.request.body == exchange.request_body == sent.body
    # The response exactly as the server sent it, and as the live client saw it.
    wire_body = b"".join(exchange.reply.chunks)
    assert recorded.body == wire_body == b"".join(live_chunks)
    assert [size for size, _ in recorded.chunks] == [len(c) for c in live_chunks]
    assert (recorded.status, recorded.reason.encode("latin-1"), recorded.http_version) == head_of(
        live
    )[:3]
    assert [(k.encode("latin-1"), v.encode("latin-1")) for k, v in recorded.headers] == list(
        live.headers.raw
    )
    sent_names = [n.lower() for n, _ in exchange.reply.headers]
    assert [n.lower() for n, _ in recorded.headers][: len(sent_names)] == sent_names
    # Replay hands back the same head, the same bytes, cut at the same places.
    assert head_of(replayed) == head_of(live)
    assert replayed_chunks == live_chunks


@pytest.mark.parametrize("size", [0, 100 * 1024 * 1024])
def test_large_and_empty_bodies_byte_exact(
    size: int, serve: Callable[..., Server], tmp_path: Path
) -> None:
    body = hashlib.shake_256(b"agenttape").digest(size) if size else b""
    server = serve(lambda seen: Reply(chunks=[body] if body else []))
    path = tmp_path / "large.msgpack"
    upload = body[: size // 64]
    with httpx.Client(timeout=60) as client:
        with agenttape.use_cassette(path, mode="all"):
            live, live_chunks = fetch(client, Exchange("POST", [], upload, Reply()), server.url)
        server.stop()
        with agenttape.use_cassette(path, mode="none"):
            replayed, replayed_chunks = fetch(
                client, Exchange("POST", [], upload, Reply()), server.url
            )
    (interaction,) = agenttape.load(path).interactions
    assert interaction.request.body == upload
    assert interaction.response is not None and interaction.response.body == body
    assert [size for size, _ in interaction.response.chunks] == [len(c) for c in live_chunks]
    assert replayed_chunks == live_chunks
    assert head_of(replayed) == head_of(live)
