"""requests, urllib3 and botocore through the urllib3 adapter: recorded from real servers on
127.0.0.1, replayed with the servers stopped, compared byte for byte."""

from __future__ import annotations

import gzip
import http.client
import json
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
import requests
import urllib3
from hypothesis import given
from hypothesis import strategies as st
from requests.adapters import HTTPAdapter
from urllib3.util.retry import Retry

import agenttape
from agenttape._adapters.urllib3 import exchange as urllib3_exchange
from tests.servers import (
    HALF_JSON,
    RATE_LIMIT_HEADERS,
    App,
    Reply,
    Server,
    aws_app,
    ended_by_a_later_request,
    gzip_reply,
    json_reply,
    record_then_replay,
    refused_port,
    sequence,
)

Serve = Callable[[App], Server]


@pytest.fixture
def sleeps(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[float]]:
    """Every ``time.sleep`` the test's own thread asks for (still sleeping for real), but
    subprocess's polling (the cassette header asks git for the commit)."""
    real_sleep = time.sleep
    asked: list[float] = []
    main = threading.get_ident()

    def sleep(seconds: float) -> None:
        caller = sys._getframe(1).f_globals.get("__name__")
        if threading.get_ident() == main and caller != "subprocess":
            asked.append(seconds)
        real_sleep(seconds)

    monkeypatch.setattr(time, "sleep", sleep)
    yield asked


# -- requests -----------------------------------------------------------------------------


def test_requests_json_get_and_post_replay_offline(serve: Serve, cassette_path: Path) -> None:
    server = serve(
        lambda seen: json_reply(
            {"path": seen.path, "query": seen.query, "body": seen.body.decode()},
            headers=[("X-Trace", "a"), ("x-trace", "b")],
        )
    )

    def run() -> list[Any]:
        got = requests.get(f"{server.url}/items?page=2&sort=asc", timeout=5)
        posted = requests.post(f"{server.url}/items", json={"name": "lamp"}, timeout=5)
        return [
            (got.status_code, got.reason, list(got.raw.headers.items()), got.content),
            (posted.status_code, posted.json()),
        ]

    live, replayed = record_then_replay(cassette_path, server, run)
    assert replayed == live
    assert live[1] == (200, {"path": "/items", "query": [], "body": '{"name": "lamp"}'})
    first = agenttape.load(cassette_path).interactions[0]
    assert first.request.method == "GET"
    assert first.request.url == f"{server.url}/items?page=2&sort=asc"
    assert first.response is not None
    assert first.response.headers[1:3] == [("X-Trace", "a"), ("x-trace", "b")]


def test_requests_keeps_raw_gzip_and_decodes_on_replay(serve: Serve, cassette_path: Path) -> None:
    payload = json.dumps({"answer": 42, "padding": "x" * 300}).encode()
    server = serve(lambda seen: gzip_reply(payload))

    def run() -> tuple[bytes, bytes]:
        decoded = requests.get(f"{server.url}/g", timeout=5).content
        raw = requests.get(f"{server.url}/g", stream=True, timeout=5).raw.read(decode_content=False)
        return decoded, raw

    live, replayed = record_then_replay(cassette_path, server, run)
    assert replayed == live == (payload, gzip.compress(payload, mtime=0))
    stored = agenttape.load(cassette_path).interactions[0].response
    assert stored is not None
    assert stored.body == gzip.compress(payload, mtime=0)
    assert ("Content-Encoding", "gzip") in stored.headers


def test_requests_stream_keeps_chunk_boundaries(serve: Serve, cassette_path: Path) -> None:
    pieces = [b"data: one\n\n", b"data: two\n\n", b"data: [DONE]\n\n"]
    server = serve(
        lambda seen: Reply(
            headers=[("Content-Type", "text/event-stream")], chunks=pieces, chunked=True
        )
    )

    def run() -> tuple[list[bytes], list[str]]:
        response = requests.get(f"{server.url}/sse", stream=True, timeout=5)
        chunks = list(response.iter_content(chunk_size=None))
        lines = list(
            requests.get(f"{server.url}/sse", stream=True, timeout=5).iter_lines(
                decode_unicode=True
            )
        )
        return chunks, lines

    live, replayed = record_then_replay(cassette_path, server, run)
    assert replayed == live
    assert live[0] == pieces
    stored = agenttape.load(cassette_path).interactions[0].response
    assert stored is not None
    assert [size for size, _offset in stored.chunks] == [len(p) for p in pieces]
    assert stored.body == b"".join(pieces)


def test_requests_redirect_hops_and_cookies(serve: Serve, cassette_path: Path) -> None:
    def app(seen: Any) -> Reply:
        if seen.path == "/login":
            return Reply(
                status=302,
                headers=[("Location", "/home"), ("Set-Cookie", "session=s3cr3t; Path=/")],
            )
        return json_reply({"cookie": seen.header("Cookie")})

    server = serve(app)

    def run() -> tuple[Any, ...]:
        with requests.Session() as session:
            response = session.get(f"{server.url}/login", timeout=5)
            return (
                [hop.status_code for hop in response.history],
                response.url,
                response.json(),
                session.cookies.get("session"),
            )

    live, replayed = record_then_replay(cassette_path, server, run)
    assert live == ([302], f"{server.url}/home", {"cookie": "session=s3cr3t"}, "s3cr3t")
    # Set-Cookie values are secrets and never reach the disk, so the replayed jar stays empty;
    # the hop that sent the cookie replays all the same (cookies are not matched).
    assert replayed == (*live[:3], None)
    first, second = agenttape.load(cassette_path).interactions
    assert first.response is not None
    assert first.response.header("Set-Cookie") == "<redacted>"
    assert second.request.header("Cookie") == "<redacted>"


def test_requests_is_recorded_once_per_exchange(serve: Serve, cassette_path: Path) -> None:
    server = serve(lambda seen: json_reply({"ok": True}))
    with agenttape.use_cassette(cassette_path, mode="once") as tape, requests.Session() as session:
        for _ in range(3):
            session.get(f"{server.url}/ping", timeout=5)
    assert len(tape.interactions) == 3


# Responses whose heads steer http.client differently: framing, closing, bodiless statuses.
HEADS: dict[str, Reply] = {
    "/length": json_reply({"ok": True}),
    "/chunked": Reply(chunks=[b"a", b"bc"], chunked=True),
    "/until-close": Reply(chunks=[b"until ", b"close"], framed=False),
    "/close": Reply(headers=[("Connection", "close")], chunks=[b"bye"]),
    "/http10-keep-alive": Reply(
        version="HTTP/1.0", headers=[("Connection", "Keep-Alive")], chunks=[b"old"]
    ),
    "/http10": Reply(version="HTTP/1.0", chunks=[b"older"]),
    # A length without its body: the server then closes, and says so.
    "/not-modified": Reply(
        status=304, headers=[("ETag", '"v1"'), ("Connection", "close")], length=100
    ),
    "/no-content": Reply(status=204),
    "/head": Reply(headers=[("Content-Type", "text/plain"), ("Connection", "close")], length=42),
    "/odd": Reply(
        status=299,
        reason="Odd But Fine",
        headers=[
            ("X-Folded", "one\r\n two"),
            ("X-Pad", "padded  "),
            ("Connection", "keep-alive"),
            ("connection", "close"),  # the first of a name counts
        ],
        chunks=[b"odd"],
    ),
}


def test_every_kind_of_head_replays_as_http_client_parsed_it(
    serve: Serve, cassette_path: Path
) -> None:
    server = serve(lambda seen: HEADS[seen.path])

    def run() -> tuple[Any, ...]:
        seen = []
        with requests.Session() as session:
            for path in HEADS:
                send = session.head if path == "/head" else session.get
                response = send(f"{server.url}{path}", stream=True, timeout=5)
                raw = response.raw._original_response
                parsed = (raw.status, raw.reason, raw.version, raw.chunked, raw.will_close)
                seen.append((*parsed, raw.length, raw.msg.items(), response.raw.length_remaining))
                seen.append((list(response.raw.headers.items()), response.content))
            pools = session.get_adapter(server.url).poolmanager.pools
            # keys(): the container refuses to be iterated itself.
            return tuple(seen), [pools[key].num_requests for key in pools.keys()]  # noqa: SIM118

    live, replayed = record_then_replay(cassette_path, server, run)
    assert replayed == live
    assert live[1] == [len(HEADS)]
    bodies = [content for _headers, content in live[0][1::2]]
    assert bodies[:6] == [b'{"ok": true}', b"abc", b"until close", b"bye", b"old", b"older"]
    assert bodies[6:] == [b"", b"", b"", b"odd"]


def test_a_read_timeout_mid_body_replays_the_same_bytes_then_the_same_error(
    serve: Serve, cassette_path: Path
) -> None:
    server = serve(lambda seen: Reply(chunks=[b"first part", b"never read"], delay=1.0))

    def run() -> tuple[Any, ...]:
        response = requests.get(f"{server.url}/stalls", stream=True, timeout=0.3)
        got = []
        with pytest.raises(urllib3.exceptions.ReadTimeoutError) as caught:
            while piece := response.raw.read(4):
                got.append(piece)
        return got, str(caught.value)

    live, replayed = record_then_replay(cassette_path, server, run)
    assert replayed == live
    assert live[0] == [b"firs", b"t pa"]  # the last two bytes sat in the buffer of a read cut short
    (interaction,) = agenttape.load(cassette_path).interactions
    # What the caller was given: the bytes left in the buffer went down with the read.
    assert interaction.response is not None and interaction.response.body == b"first pa"
    assert interaction.error is not None and interaction.error.kind == "read_timeout"


# -- urllib3 directly ---------------------------------------------------------------------


def test_urllib3_poolmanager_preload_and_stream(serve: Serve, cassette_path: Path) -> None:
    pieces = [b"alpha-", b"beta-", b"gamma"]
    server = serve(
        lambda seen: Reply(headers=[("Content-Type", "text/plain")], chunks=pieces, chunked=True)
    )

    def run() -> tuple[Any, ...]:
        with urllib3.PoolManager() as http:
            preloaded = http.request("GET", f"{server.url}/a")
            streamed = http.request("GET", f"{server.url}/b", preload_content=False)
            parts = list(streamed.stream(1024))
            streamed.release_conn()
            return preloaded.status, preloaded.data, list(preloaded.headers.items()), parts

    live, replayed = record_then_replay(cassette_path, server, run)
    assert replayed == live
    assert live[3] == pieces


def _varied_app(seen: Any) -> Reply:
    """A different kind of response per path, all to requests with the same headers."""
    kind = seen.path.split("/")[1]
    if kind == "gzip":
        return gzip_reply(b'{"packed": true}' * 40)
    if kind == "pieces":
        return Reply(chunks=[b"one-", b"two-", b"three"], chunked=True)
    if kind == "missing":
        return json_reply({"error": "not here"}, status=404)
    if kind == "empty":
        return Reply(status=204)
    if kind == "cookie":
        return Reply(headers=[("Set-Cookie", "theme=dark; Path=/")], chunks=[b"set"])
    return Reply(
        headers=[("Content-Type", "text/plain"), ("X-Path", seen.path), ("x-lower", "kept")],
        chunks=[f"body of {seen.path}".encode()],
    )


VARIED_PATHS = [
    "/plain/1",
    "/plain/2?q=a%20b&r=1",
    "/gzip/1",
    "/plain/3",
    "/pieces/1",
    "/missing/1",
    "/empty/1",
    "/cookie/1",
    "/plain/4",
    "/gzip/2",
]


def test_repeated_requests_on_one_session_replay_as_live_whatever_the_response(
    serve: Serve, cassette_path: Path
) -> None:
    """Once a session has sent a head, the same head to another target is known without
    rendering it again; every response after the first must still be what it was live:
    status, reason, header lists as urllib3 and http.client hold them, body, decoding,
    streamed pieces and cookies."""
    server = serve(_varied_app)

    def run() -> list[tuple[Any, ...]]:
        seen = []
        with requests.Session() as session:
            for path in VARIED_PATHS:
                response = session.get(server.url + path, stream=path.startswith("/pieces"))
                original = response.raw._original_response
                streamed = path.startswith("/pieces")
                parts = list(response.iter_content(None)) if streamed else []
                seen.append(
                    (
                        response.status_code,
                        response.reason,
                        list(response.raw.headers.items()),
                        original.msg.items(),
                        original.version,
                        response.raw.version,
                        b"" if streamed else response.content,
                        parts,
                        sorted(session.cookies.keys()),
                    )
                )
        return seen

    live, replayed = record_then_replay(cassette_path, server, run)
    cookie = VARIED_PATHS.index("/cookie/1")
    # Set-Cookie values never reach the disk: the replayed jar takes the redacted one, which
    # shows the replayed response went through requests' cookie extraction as live.
    assert replayed[cookie][8] == ["<redacted>"] and live[cookie][8] == ["theme"]
    for row in (live, replayed):
        row[cookie:] = [(*values[:2], *values[4:8]) for values in row[cookie:]]
    assert replayed == live
    assert [row[0] for row in live] == [200, 200, 200, 200, 200, 404, 204, 200, 200, 200]
    assert live[4][7] == [b"one-", b"two-", b"three"]
    # What was recorded for each request is the head the server received.
    recorded = agenttape.load(cassette_path).interactions
    for interaction, path in zip(recorded, VARIED_PATHS, strict=True):
        assert interaction.request.url == server.url + path


def test_repeated_requests_through_a_pool_send_and_record_the_heads_the_server_saw(
    serve: Serve, cassette_path: Path
) -> None:
    server = serve(_varied_app)
    headers = {"X-Trace": "t-1", "Accept": "application/json"}

    def run() -> list[tuple[Any, ...]]:
        with urllib3.HTTPConnectionPool("127.0.0.1", server.port) as pool:
            out = []
            for path in VARIED_PATHS:
                if path.startswith("/cookie"):
                    continue  # its Set-Cookie is redacted on disk
                response = pool.request("GET", path, headers=headers)
                out.append((response.status, list(response.headers.items()), response.data))
            for body in (b'{"n": 1}', b'{"n": 2}'):
                response = pool.request("POST", "/plain/post", body=body, headers=headers)
                out.append((response.status, list(response.headers.items()), response.data))
            return out

    with agenttape.use_cassette(cassette_path, mode="once"):
        live = run()
    heads = [(seen.method, seen.path, seen.headers, seen.body) for seen in server.seen]
    recorded = agenttape.load(cassette_path).interactions
    assert [
        (i.request.method, urlsplit(i.request.url).path, i.request.headers) for i in recorded
    ] == [(method, path, headers_seen) for method, path, headers_seen, _ in heads]
    assert [i.request.body for i in recorded] == [body for *_, body in heads]
    server.stop()
    with agenttape.use_cassette(cassette_path) as tape:
        assert run() == live
        assert tape.all_played


@given(st.text(alphabet="az09._~!$&'()*+,;=:@/?-%#é \t[]", max_size=24))
def test_a_target_a_known_head_takes_as_it_is_is_the_one_urllib3_sends(tail: str) -> None:
    target = "/" + tail
    if urllib3_exchange.AS_ENCODED(target) is not None:
        assert urllib3.connectionpool._encode_target(target) == target  # type: ignore[attr-defined]


@pytest.mark.skipif(
    int(urllib3.__version__.split(".")[0]) < 2,
    reason="the rendered-head cache is urllib3 2's adapter's (1.x goes through http.client)",
)
def test_heads_whose_values_change_are_sent_and_recorded_as_the_server_saw_them(
    serve: Serve, cassette_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A head rendered once is reused for other values of the same headers when each value is
    plain text; any other value is rendered by urllib3 itself."""
    server = serve(_varied_app)
    rendered: list[Any] = []
    render = urllib3_exchange.render_request

    def counted(conn: Any, arguments: dict[str, Any]) -> Any:
        rendered.append(arguments["headers"]["X-Trace"])
        return render(conn, arguments)

    monkeypatch.setattr(urllib3_exchange, "render_request", counted)
    values: list[str | bytes] = ["t-1", "t-22", b"t-333", "a  b", " padded", "caf\xe9", "t-4"]

    def run() -> list[tuple[Any, ...]]:
        with urllib3.HTTPConnectionPool("127.0.0.1", server.port) as pool:
            out = []
            for n, value in enumerate(values):
                headers = {"X-Trace": value, "Accept": "application/json"}
                response = pool.request("GET", f"/plain/{n}", headers=headers)
                out.append((response.status, list(response.headers.items()), response.data))
            return out

    with agenttape.use_cassette(cassette_path, mode="once"):
        live = run()
    heads = [(seen.method, seen.path, seen.headers) for seen in server.seen]
    recorded = agenttape.load(cassette_path).interactions
    assert [
        (i.request.method, urlsplit(i.request.url).path, list(i.request.headers)) for i in recorded
    ] == heads
    assert [dict(head[2])["X-Trace"] for head in heads][3:6] == ["a  b", "padded", "caf\xe9"]
    assert rendered == ["t-1", " padded", "caf\xe9"]
    server.stop()
    with agenttape.use_cassette(cassette_path) as tape:
        assert run() == live
        assert tape.all_played


class _OwnResponse(http.client.HTTPResponse):
    """A connection's own response class, which must read the head itself."""


class _OwnResponseConnection(urllib3.connection.HTTPConnection):
    response_class = _OwnResponse


def test_a_connection_with_its_own_response_class_keeps_it_on_replay(
    serve: Serve, cassette_path: Path
) -> None:
    server = serve(lambda seen: Reply(headers=[("X-Kind", "own")], chunks=[b"mine"], chunked=True))

    def run() -> tuple[Any, ...]:
        with urllib3.HTTPConnectionPool("127.0.0.1", server.port) as pool:
            pool.ConnectionCls = _OwnResponseConnection
            response = pool.request("GET", "/own")
            original = response._original_response
            return type(original), original.msg.items(), response.status, response.data

    live, replayed = record_then_replay(cassette_path, server, run)
    assert replayed == live
    assert live[0] is _OwnResponse and live[3] == b"mine"


def test_urllib3_retry_replays_429_then_200_without_waiting(
    serve: Serve, cassette_path: Path, sleeps: list[float]
) -> None:
    server = serve(
        sequence(
            Reply(status=429, headers=[("retry-after", "1")], chunks=[HALF_JSON]),
            json_reply({"ok": True}),
        )
    )

    def run() -> tuple[int, bytes, int]:
        with urllib3.PoolManager() as http:
            retries = Retry(total=2, status_forcelist=[429], respect_retry_after_header=True)
            response = http.request("GET", f"{server.url}/limited", retries=retries)
            assert response.retries is not None
            return response.status, response.data, len(response.retries.history)

    with agenttape.use_cassette(cassette_path, mode="once"):
        live = run()
    assert 1.0 in sleeps  # the live retry honoured retry-after
    server.stop()
    sleeps.clear()
    with agenttape.use_cassette(cassette_path) as tape:
        replayed = run()
        assert tape.all_played
    assert replayed == live == (200, b'{"ok": true}', 1)
    assert 1.0 not in sleeps
    statuses = [i.response.status for i in agenttape.load(cassette_path).interactions if i.response]
    assert statuses == [429, 200]


def test_a_retried_2xx_after_a_known_head_replays_its_retry(
    serve: Serve, cassette_path: Path
) -> None:
    """A 2xx the Retry asks to retry (in its status list), on a pool whose head is known,
    goes through urllib3's retry as it did live."""
    flaky = sequence(Reply(status=202, chunks=[b"later"]), json_reply({"ok": True}))

    def app(seen: Any) -> Reply:
        return json_reply({"warm": True}) if seen.path == "/warm" else flaky(seen)

    server = serve(app)

    def run() -> tuple[Any, ...]:
        with urllib3.PoolManager() as http:
            retries = Retry(total=2, status_forcelist=[202])
            warm = http.request("GET", f"{server.url}/warm", retries=retries)
            response = http.request("GET", f"{server.url}/flaky", retries=retries)
            assert response.retries is not None
            history = [(entry.method, entry.status) for entry in response.retries.history]
            return warm.data, response.status, response.data, history

    live, replayed = record_then_replay(cassette_path, server, run)
    assert replayed == live == (b'{"warm": true}', 200, b'{"ok": true}', [("GET", 202)])
    statuses = [i.response.status for i in agenttape.load(cassette_path).interactions if i.response]
    assert statuses == [200, 202, 200]


def test_fast_retries_off_keeps_the_wait(
    serve: Serve, cassette_path: Path, sleeps: list[float]
) -> None:
    server = serve(
        sequence(
            Reply(status=503, headers=[("Retry-After", "1")], chunks=[b"busy"]),
            json_reply({"ok": True}),
        )
    )

    def run() -> int:
        with urllib3.PoolManager() as http:
            retries = Retry(total=2, status_forcelist=[503])
            return http.request("GET", f"{server.url}/x", retries=retries).status

    live, replayed = record_then_replay(cassette_path, server, run, fast_retries=False)
    assert live == replayed == 200
    assert sleeps.count(1.0) == 2  # once live, once replayed


def test_requests_retry_adapter_replays_in_order(
    serve: Serve, cassette_path: Path, sleeps: list[float]
) -> None:
    server = serve(
        sequence(
            Reply(status=429, headers=[("Retry-After", "1")], chunks=[b"{}"]),
            json_reply({"ok": True}),
        )
    )

    def run() -> Any:
        with requests.Session() as session:
            session.mount(
                "http://", HTTPAdapter(max_retries=Retry(total=2, status_forcelist=[429]))
            )
            return session.get(f"{server.url}/r", timeout=5).json()

    with agenttape.use_cassette(cassette_path, mode="once"):
        live = run()
    server.stop()
    sleeps.clear()
    with agenttape.use_cassette(cassette_path):
        assert run() == live == {"ok": True}
    assert 1.0 not in sleeps


# -- the rate-limit story: half a JSON body, byte-exact ----------------------------------


def test_429_half_json_is_byte_exact(serve: Serve, cassette_path: Path) -> None:
    server = serve(lambda seen: Reply(status=429, headers=RATE_LIMIT_HEADERS, chunks=[HALF_JSON]))

    def run() -> tuple[Any, ...]:
        response = requests.post(
            f"{server.url}/v1/chat/completions", json={"model": "m"}, timeout=5
        )
        return response.status_code, list(response.raw.headers.items()), response.content

    live, replayed = record_then_replay(cassette_path, server, run)
    assert replayed == live
    assert live[2] == HALF_JSON
    assert ("retry-after", "7") in live[1]
    stored = agenttape.load(cassette_path).interactions[0].response
    assert stored is not None
    assert stored.body == HALF_JSON
    assert stored.headers[:3] == RATE_LIMIT_HEADERS


def test_body_cut_short_replays_the_same_bytes_then_the_same_error(
    serve: Serve, cassette_path: Path
) -> None:
    server = serve(
        lambda seen: Reply(status=429, headers=RATE_LIMIT_HEADERS, chunks=[HALF_JSON], length=400)
    )

    def run() -> tuple[Any, ...]:
        preloaded: BaseException | None = None
        try:
            requests.get(f"{server.url}/cut", timeout=5)
        except requests.exceptions.ChunkedEncodingError as exc:
            preloaded = exc
        response = requests.get(f"{server.url}/cut", stream=True, timeout=5)
        raw = bytearray()
        streamed: BaseException | None = None
        try:
            while piece := response.raw.read(10, decode_content=False):
                raw += piece
        except urllib3.exceptions.ProtocolError as exc:
            streamed = exc
        return str(preloaded), bytes(raw), str(streamed), response.status_code

    live, replayed = record_then_replay(cassette_path, server, run)
    assert replayed == live
    # urllib3 1.x does not enforce Content-Length by default: no error there, live or not.
    enforced = int(urllib3.__version__.split(".")[0]) >= 2
    assert (live[0] != "None", live[2] != "None") == (enforced, enforced)
    assert live[1] == HALF_JSON[: len(live[1])] and len(live[1]) >= 70
    stored = agenttape.load(cassette_path).interactions[0]
    assert stored.response is not None and stored.response.body == HALF_JSON
    assert stored.error is not None and stored.error.kind == "protocol_error"


# -- transport errors ---------------------------------------------------------------------


def test_connection_refused_replays_as_requests_connection_error(cassette_path: Path) -> None:
    url = f"http://127.0.0.1:{refused_port()}/nothing"

    def run() -> tuple[type, type, str]:
        with pytest.raises(requests.exceptions.ConnectionError) as caught:
            requests.get(url, timeout=5)
        reason = caught.value.args[0].reason
        return (
            type(caught.value),
            type(reason),
            "Failed to establish a new connection" in str(reason),
        )

    with agenttape.use_cassette(cassette_path, mode="once"):
        live = run()
    with agenttape.use_cassette(cassette_path):
        replayed = run()
    assert replayed == live
    assert live[1] is urllib3.exceptions.NewConnectionError
    stored = agenttape.load(cassette_path).interactions[0]
    assert stored.response is None and stored.error is not None
    assert stored.error.kind == "connect_error"


def test_read_timeout_replays_as_the_same_exception(serve: Serve, cassette_path: Path) -> None:
    server = serve(lambda seen: Reply(stall=1.0, chunks=[b"late"]))

    def run() -> tuple[type, type]:
        with pytest.raises(requests.exceptions.ReadTimeout) as caught:
            requests.get(f"{server.url}/slow", timeout=0.2)
        with (
            urllib3.PoolManager() as http,
            pytest.raises(urllib3.exceptions.MaxRetryError) as direct,
        ):
            http.request("GET", f"{server.url}/slow", timeout=0.2, retries=Retry(total=0, read=0))
        return type(caught.value), type(direct.value.reason)

    live, replayed = record_then_replay(cassette_path, server, run)
    assert (
        replayed == live == (requests.exceptions.ReadTimeout, urllib3.exceptions.ReadTimeoutError)
    )
    kinds = [i.error.kind for i in agenttape.load(cassette_path).interactions if i.error]
    assert kinds == ["read_timeout", "read_timeout"]


def test_a_miss_raises_unmatched(serve: Serve, cassette_path: Path) -> None:
    server = serve(lambda seen: json_reply({"ok": True}))
    with agenttape.use_cassette(cassette_path, mode="once"):
        requests.get(f"{server.url}/one", timeout=5)
    server.stop()
    with agenttape.use_cassette(cassette_path), pytest.raises(agenttape.UnmatchedInteractionError):
        requests.get(f"{server.url}/two", timeout=5)


# -- httpx records, requests replays: one model for every adapter -------------------------


def test_a_cassette_recorded_with_httpx_replays_through_requests(
    serve: Serve, cassette_path: Path
) -> None:
    import httpx

    server = serve(lambda seen: Reply(status=429, headers=RATE_LIMIT_HEADERS, chunks=[HALF_JSON]))
    with agenttape.use_cassette(cassette_path, mode="once"), httpx.Client() as client:
        live = client.get(f"{server.url}/x")
    server.stop()
    with agenttape.use_cassette(cassette_path):
        replayed = requests.get(f"{server.url}/x", timeout=5)
    assert (replayed.status_code, replayed.content) == (live.status_code, live.content)
    assert replayed.headers["retry-after"] == "7"


# -- botocore / boto3 ---------------------------------------------------------------------

ACCESS_KEY = "AKIAIOSFODNN7EXAMPLE"
SECRET_KEY = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"


def aws_client(service: str, server: Server, key: str = ACCESS_KEY, **config: Any) -> Any:
    import boto3
    from botocore.config import Config

    return boto3.client(
        service,
        endpoint_url=server.url,
        region_name="us-east-1",
        aws_access_key_id=key,
        aws_secret_access_key=SECRET_KEY if key == ACCESS_KEY else "another-secret",
        config=Config(**config),
    )


def test_botocore_s3_and_dynamodb_replay_offline_without_credentials_on_disk(
    serve: Serve, cassette_path: Path
) -> None:
    server = serve(aws_app())

    def run(key: str) -> tuple[Any, Any]:
        buckets = aws_client("s3", server, key).list_buckets()["Buckets"]
        tables = aws_client("dynamodb", server, key).list_tables()["TableNames"]
        return [b["Name"] for b in buckets], tables

    with agenttape.use_cassette(cassette_path, mode="once"):
        live = run(ACCESS_KEY)
    server.stop()
    time.sleep(1.1)  # x-amz-date and the SigV4 signature now differ from the recording
    with agenttape.use_cassette(cassette_path) as tape:
        replayed = run("AKIAI44QH8DHBEXAMPLE")
        assert tape.all_played
    assert replayed == live == (["alpha", "beta"], ["orders", "users"])

    data = cassette_path.read_bytes()
    assert ACCESS_KEY.encode() not in data
    assert SECRET_KEY.encode() not in data
    first, second = agenttape.load(cassette_path).interactions
    assert first.request.header("authorization") == "<redacted>"
    assert first.request.header("x-amz-date") is not None
    assert second.request.header("X-Amz-Target") == "DynamoDB_20120810.ListTables"


def test_botocore_throttling_retries_replay_in_order_without_waiting(
    serve: Serve, cassette_path: Path, sleeps: list[float]
) -> None:
    server = serve(aws_app(throttle_first=2))

    def run() -> Any:
        client = aws_client("dynamodb", server, retries={"mode": "standard", "max_attempts": 4})
        response = client.list_tables()
        return response["TableNames"], response["ResponseMetadata"]["RetryAttempts"]

    with agenttape.use_cassette(cassette_path, mode="once"):
        live = run()
    live_waits = [s for s in sleeps if s > 0]
    server.stop()
    sleeps.clear()
    with agenttape.use_cassette(cassette_path):
        replayed = run()
    assert replayed == live == (["orders", "users"], 2)
    assert len(live_waits) == 2
    assert not [s for s in sleeps if s > 0]
    statuses = [i.response.status for i in agenttape.load(cassette_path).interactions if i.response]
    assert statuses == [400, 400, 200]


def test_botocore_put_object_behind_expect_100_continue(serve: Serve, cassette_path: Path) -> None:
    server = serve(aws_app())

    def run() -> str:
        client = aws_client("s3", server)
        return str(client.put_object(Bucket="tapes", Key="a.txt", Body=b"hello world")["ETag"])

    live, replayed = record_then_replay(cassette_path, server, run)
    assert replayed == live == '"5eb63bbbe01eeed093cb22bb8f5acdc3"'
    request = agenttape.load(cassette_path).interactions[0].request
    assert request.header("Expect") == "100-continue"
    assert request.body == b"hello world"


def test_botocore_heads_signed_anew_each_call_are_recorded_as_the_server_saw_them(
    serve: Serve, cassette_path: Path
) -> None:
    """Each call signs its head afresh (date, signature, invocation id), so no two heads are
    alike: each is recorded as sent, and replays."""
    server = serve(aws_app())

    def run() -> list[Any]:
        s3, dynamodb = aws_client("s3", server), aws_client("dynamodb", server)
        out: list[Any] = []
        for _ in range(3):
            out.append([b["Name"] for b in s3.list_buckets()["Buckets"]])
            out.append(dynamodb.list_tables()["TableNames"])
        out.append(str(s3.put_object(Bucket="tapes", Key="a.txt", Body=b"hello")["ETag"]))
        return out

    with agenttape.use_cassette(cassette_path, mode="once"):
        live = run()
    seen = [
        (s.method, s.path, [(n, "<redacted>" if n == "Authorization" else v) for n, v in s.headers])
        for s in server.seen
    ]
    recorded = agenttape.load(cassette_path).interactions
    assert [
        (i.request.method, urlsplit(i.request.url).path, list(i.request.headers)) for i in recorded
    ] == seen
    assert len({i.request.header("amz-sdk-invocation-id") for i in recorded}) == 7
    server.stop()
    with agenttape.use_cassette(cassette_path) as tape:
        assert run() == live
        assert tape.all_played


# -- modes and pacing ---------------------------------------------------------------------


def test_new_episodes_mixes_replayed_and_live_on_one_session(
    serve: Serve, cassette_path: Path
) -> None:
    server = serve(lambda seen: json_reply({"path": seen.path}))
    with agenttape.use_cassette(cassette_path, mode="once"):
        requests.get(f"{server.url}/old", timeout=5)
    with (
        agenttape.use_cassette(cassette_path, mode="new_episodes") as tape,
        requests.Session() as session,
    ):
        answers = [
            session.get(f"{server.url}/{p}", timeout=5).json() for p in ("old", "new", "old")
        ]
    assert answers == [{"path": "/old"}, {"path": "/new"}, {"path": "/old"}]
    assert [seen.path for seen in server.seen] == ["/old", "/new", "/old"]
    assert len(tape.interactions) == 3


def test_realtime_replay_waits_for_recorded_offsets(
    serve: Serve, cassette_path: Path, sleeps: list[float]
) -> None:
    pieces = [b"first ", b"second ", b"third"]
    server = serve(lambda seen: Reply(chunks=pieces, chunked=True, delay=0.1))

    def run() -> list[bytes]:
        response = requests.get(f"{server.url}/slow", stream=True, timeout=5)
        return list(response.iter_content(chunk_size=None))

    with agenttape.use_cassette(cassette_path, mode="once"):
        live = run()
    server.stop()
    sleeps.clear()
    with agenttape.use_cassette(cassette_path):
        assert run() == live
    assert not sleeps
    with agenttape.use_cassette(cassette_path, realtime=True):
        assert run() == live == pieces
    assert len([s for s in sleeps if s > 0]) >= 2


def test_worker_threads_record_and_replay_concurrently(serve: Serve, cassette_path: Path) -> None:
    from concurrent.futures import ThreadPoolExecutor

    server = serve(lambda seen: json_reply({"n": seen.query[0][1]}))

    def fetch(n: int) -> Any:
        return requests.get(f"{server.url}/item", params={"n": n}, timeout=5).json()

    def run() -> list[Any]:
        with ThreadPoolExecutor(8) as pool:
            return list(pool.map(fetch, range(24)))

    live, replayed = record_then_replay(cassette_path, server, run)
    assert replayed == live == [{"n": str(n)} for n in range(24)]


def test_a_stream_closed_early_is_recorded_as_truncated_not_failed(
    serve: Serve, cassette_path: Path
) -> None:
    pieces = [b"first ", b"second ", b"third"]
    server = serve(lambda seen: Reply(chunks=pieces, chunked=True, delay=0.05))

    def run() -> bytes:
        with requests.get(f"{server.url}/s", stream=True, timeout=5) as response:
            return next(response.iter_content(chunk_size=None))

    live, replayed = record_then_replay(cassette_path, server, run)
    assert replayed == live == b"first "
    (interaction,) = agenttape.load(cassette_path).interactions
    assert interaction.error is None
    assert interaction.response is not None and interaction.response.truncated
    assert interaction.response.body == b"first "


def test_realtime_replays_an_error_when_it_came(
    serve: Serve, cassette_path: Path, sleeps: list[float]
) -> None:
    server = serve(lambda seen: Reply(stall=1.0, chunks=[b"late"]))

    def run() -> type:
        with pytest.raises(requests.exceptions.ReadTimeout) as caught:
            requests.get(f"{server.url}/slow", timeout=0.3)
        return type(caught.value)

    live, replayed = record_then_replay(cassette_path, server, run)
    assert replayed == live
    (interaction,) = agenttape.load(cassette_path).interactions
    assert interaction.duration is not None and interaction.duration >= 0.3
    sleeps.clear()
    with agenttape.use_cassette(cassette_path, realtime=True):
        assert run() is live
    # One wait, until the recorded moment counted from the request (less what replay took).
    assert len(sleeps) == 1
    assert interaction.duration - 0.05 < sleeps[0] <= interaction.duration


def test_a_stream_the_server_ended_at_a_later_request_ends_after_it_on_replay(
    serve: Serve, cassette_path: Path
) -> None:
    """The end of a chunked stream the server ended when the client POSTed comes after that
    POST on replay too, not with the stream's last chunk."""
    server = serve(ended_by_a_later_request())
    with agenttape.use_cassette(cassette_path, mode="once"), urllib3.PoolManager() as http:
        stream = http.request("GET", f"{server.url}/events", preload_content=False)
        chunks = stream.stream(1024)
        assert next(chunks) == b"data: 1\n\n"
        time.sleep(0.5)
        assert json.loads(http.request("POST", f"{server.url}/close").data) == {"closed": True}
        assert list(chunks) == []
    server.stop()

    order: list[str] = []
    with agenttape.use_cassette(cassette_path) as tape, urllib3.PoolManager() as http:
        stream = http.request("GET", f"{server.url}/events", preload_content=False)

        def read() -> None:
            order.extend(chunk.decode() for chunk in stream.stream(1024))
            order.append("end")

        reader = threading.Thread(target=read)
        reader.start()
        time.sleep(0.1)  # less than live: the end is due after the POST
        order.append("post")
        assert json.loads(http.request("POST", f"{server.url}/close").data) == {"closed": True}
        reader.join(5)
        assert tape.all_played
    assert order == ["data: 1\n\n", "post", "end"]


def test_answers_urlopen_serves_itself_keep_every_header_pair(
    serve: Serve, cassette_path: Path
) -> None:
    """After the first request renders its head, ``urlopen`` serves the replayed answers
    itself: urllib3's header dict holds every pair in order, duplicates and case kept, as
    the one ``getresponse()`` makes live, over the same ``http.client`` message."""
    pairs = [("X-Part", "1"), ("Link", "</a>; rel=next"), ("x-part", "2"), ("Link", "</b>")]
    server = serve(lambda seen: Reply(headers=pairs, chunks=[seen.path.encode()]))

    def run() -> list[Any]:
        out = []
        manager = urllib3.PoolManager()
        for n in range(3):
            response = manager.request("GET", f"{server.url}/pairs/{n}")
            headers = response.headers
            message = response._original_response.msg
            out.append(
                (list(headers.items()), headers.getlist("x-part"), message.items(), response.data)
            )
        manager.clear()
        return out

    live, replayed = record_then_replay(cassette_path, server, run)
    assert replayed == live
    assert live[2][2][:4] == pairs  # the message as sent; urllib3's dict groups by name
    assert live[2][0][:2] == [("X-Part", "1"), ("X-Part", "2")]
    assert live[2][1] == ["1", "2"]
