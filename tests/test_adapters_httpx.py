"""httpx and httpx2 through a real server on 127.0.0.1, replayed with the server stopped."""

from __future__ import annotations

import asyncio
import concurrent.futures
import gzip
import importlib.util
import ssl
import threading
import time
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

import agenttape
from tests.servers import (
    Reply,
    Seen,
    ended_by_a_later_request,
    gzip_reply,
    json_reply,
    record_then_replay,
    refused_port,
    sse_reply,
)


@pytest.fixture(params=["httpx", "httpx2"])
def hx(request: pytest.FixtureRequest) -> ModuleType:
    # httpx2 cannot be installed beside the oldest httpx (the version matrix's 0.23 cell)
    module: ModuleType = pytest.importorskip(request.param)
    return module


def test_gzip_body_stays_compressed_and_headers_keep_order_case_duplicates(
    hx: ModuleType, serve: Any, cassette_path: Path
) -> None:
    payload = b'{"answer": 42, "pad": "' + b"x" * 500 + b'"}'
    reply = gzip_reply(payload)
    reply.headers += [("X-Trace", "one"), ("x-trace", "two"), ("X-TRACE", "three")]
    reply.reason = "Quite OK"
    server = serve(lambda seen: reply)

    def exchange() -> tuple[Any, ...]:
        response = hx.get(f"{server.url}/data")
        return (
            response.status_code,
            response.reason_phrase,
            response.http_version,
            response.headers.raw,
            response.content,
        )

    live, replayed = record_then_replay(cassette_path, server, exchange)
    assert replayed == live
    assert replayed[3][-4:-1] == [
        (b"X-Trace", b"one"),
        (b"x-trace", b"two"),
        (b"X-TRACE", b"three"),
    ]
    assert replayed[4] == payload
    stored = agenttape.load(cassette_path).interactions[0].response
    assert stored is not None
    assert stored.body == gzip.compress(payload, mtime=0)
    assert ("Content-Encoding", "gzip") in stored.headers
    assert stored.reason == "Quite OK"


def test_stream_chunks_reach_caller_while_recording_and_replay_same_boundaries(
    hx: ModuleType, serve: Any, cassette_path: Path
) -> None:
    first_chunk_seen = threading.Event()
    events = [b"data: one\n\n", b"data: two\n\n", b"data: three\n\n"]

    def held_events() -> Any:
        yield events[0]
        # The server sends nothing more until the caller has the first chunk: a recorder
        # that buffered the stream would hang here and the test would fail.
        assert first_chunk_seen.wait(timeout=10)
        yield from events[1:]

    server = serve(
        lambda seen: (
            sse_reply([])
            if seen.path == "/none"
            else Reply(
                headers=[("Content-Type", "text/event-stream")], chunks=held_events(), chunked=True
            )
        )
    )

    def exchange() -> list[bytes]:
        first_chunk_seen.clear()
        chunks = []
        with hx.Client() as client, client.stream("GET", f"{server.url}/events") as response:
            for chunk in response.iter_raw():
                chunks.append(chunk)
                first_chunk_seen.set()
        return chunks

    live, replayed = record_then_replay(cassette_path, server, exchange)
    assert live == events
    assert replayed == events
    stored = agenttape.load(cassette_path).interactions[0].response
    assert stored is not None
    assert [size for size, _offset in stored.chunks] == [len(e) for e in events]


def test_sse_lines_replay(hx: ModuleType, serve: Any, cassette_path: Path) -> None:
    server = serve(lambda seen: sse_reply([b"event: a\ndata: 1\n\n", b"event: b\ndata: 2\n\n"]))

    def exchange() -> list[str]:
        with hx.stream("GET", server.url) as response:
            return list(response.iter_lines())

    live, replayed = record_then_replay(cassette_path, server, exchange)
    assert replayed == live
    # httpx before 0.24 keeps each line's ending
    assert [line.rstrip("\r\n") for line in live] == [
        "event: a",
        "data: 1",
        "",
        "event: b",
        "data: 2",
        "",
    ]


async def test_async_client_and_async_stream(
    hx: ModuleType, serve: Any, cassette_path: Path
) -> None:
    server = serve(
        lambda seen: (
            sse_reply([b"a" * 10, b"b" * 20])
            if seen.path == "/stream"
            else json_reply({"method": seen.method, "body": seen.body.decode()})
        )
    )

    async def exchange() -> tuple[Any, ...]:
        async with hx.AsyncClient() as client:
            posted = await client.post(f"{server.url}/echo", json={"q": 1})
            async with client.stream("GET", f"{server.url}/stream") as response:
                chunks = [chunk async for chunk in response.aiter_raw()]
        return posted.content, chunks

    async with agenttape.use_cassette(cassette_path, mode="once"):
        live = await exchange()
    server.stop()
    async with agenttape.use_cassette(cassette_path):
        replayed = await exchange()
    assert replayed == live
    assert replayed[1] == [b"a" * 10, b"b" * 20]


def test_redirect_hops_are_separate_interactions(
    hx: ModuleType, serve: Any, cassette_path: Path
) -> None:
    def app(seen: Seen) -> Reply:
        if seen.path == "/old":
            return Reply(status=302, headers=[("Location", "/new")])
        return json_reply({"at": seen.path})

    server = serve(app)

    def exchange() -> tuple[Any, ...]:
        response = hx.get(f"{server.url}/old", follow_redirects=True)
        return response.json(), [r.status_code for r in response.history]

    live, replayed = record_then_replay(cassette_path, server, exchange)
    assert replayed == live == ({"at": "/new"}, [302])
    urls = [i.request.url for i in agenttape.load(cassette_path).interactions]
    assert urls == [f"{server.url}/old", f"{server.url}/new"]


def test_auth_challenge_is_its_own_interaction(
    hx: ModuleType, serve: Any, cassette_path: Path
) -> None:
    challenge = 'Digest realm="tape", nonce="abc123", qop="auth", algorithm=MD5'

    def app(seen: Seen) -> Reply:
        if not (seen.header("Authorization") or "").startswith("Digest"):
            return Reply(status=401, headers=[("WWW-Authenticate", challenge)])
        return json_reply({"ok": True})

    server = serve(app)

    def exchange() -> Any:
        return hx.get(f"{server.url}/secret", auth=hx.DigestAuth("user", "pass")).json()

    live, replayed = record_then_replay(cassette_path, server, exchange)
    assert replayed == live == {"ok": True}
    statuses = [i.response.status for i in agenttape.load(cassette_path).interactions if i.response]
    assert statuses == [401, 200]


def test_custom_transport_and_mounts_are_captured(hx: ModuleType, cassette_path: Path) -> None:
    calls = []

    def handler(request: Any) -> Any:
        calls.append(str(request.url))
        return hx.Response(201, content=b"from mock", headers={"X-Mock": "1"})

    def exchange() -> tuple[bytes, bytes]:
        with hx.Client(transport=hx.MockTransport(handler)) as plain:
            first = plain.get("http://tool.internal/a").content
        mounts = {"http://mounted.internal": hx.MockTransport(handler)}
        with hx.Client(mounts=mounts) as mounted:
            second = mounted.get("http://mounted.internal/b").content
        return first, second

    with agenttape.use_cassette(cassette_path, mode="once"):
        live = exchange()
    assert len(calls) == 2
    with agenttape.use_cassette(cassette_path) as tape:
        replayed = exchange()
    assert len(calls) == 2, "replay must not reach the transport"
    assert replayed == live == (b"from mock", b"from mock")
    assert [i.response.status for i in tape.interactions if i.response] == [201, 201]


def test_connect_error_replays_as_same_exception(hx: ModuleType, cassette_path: Path) -> None:
    url = f"http://127.0.0.1:{refused_port()}/nothing"
    with agenttape.use_cassette(cassette_path, mode="once"), pytest.raises(hx.ConnectError) as live:
        hx.get(url)
    with agenttape.use_cassette(cassette_path), pytest.raises(hx.ConnectError) as replayed:
        hx.get(url)
    assert str(replayed.value) == str(live.value)
    stored = agenttape.load(cassette_path).interactions[0]
    assert stored.response is None
    assert stored.error is not None and stored.error.kind == "connect_error"


def test_read_timeout_replays_as_same_exception(
    hx: ModuleType, serve: Any, cassette_path: Path
) -> None:
    server = serve(lambda seen: Reply(stall=1.0, chunks=[b"late"]))
    with agenttape.use_cassette(cassette_path, mode="once"), pytest.raises(hx.ReadTimeout):
        hx.get(server.url, timeout=0.2)
    server.stop()
    with agenttape.use_cassette(cassette_path), pytest.raises(hx.ReadTimeout):
        hx.get(server.url, timeout=0.2)


def test_body_cut_short_replays_the_same_error_after_the_same_bytes(
    hx: ModuleType, serve: Any, cassette_path: Path
) -> None:
    server = serve(lambda seen: Reply(status=429, chunks=[b'{"error": {"mess'], length=200))

    def exchange() -> tuple[int, bytes, str]:
        received = b""
        with hx.stream("GET", server.url) as response:
            try:
                for chunk in response.iter_raw():
                    received += chunk
            except hx.TransportError as exc:
                return response.status_code, received, type(exc).__name__
        return response.status_code, received, "no error"

    live, replayed = record_then_replay(cassette_path, server, exchange)
    assert replayed == live
    assert live[1] == b'{"error": {"mess'
    assert live[2] == "RemoteProtocolError"
    stored = agenttape.load(cassette_path).interactions[0]
    assert stored.response is not None and stored.response.truncated


def test_worker_threads_are_recorded_and_replayed(
    hx: ModuleType, serve: Any, cassette_path: Path
) -> None:
    server = serve(lambda seen: json_reply({"n": dict(seen.query)["n"]}))

    def exchange() -> list[Any]:
        with concurrent.futures.ThreadPoolExecutor(4) as pool:
            return list(pool.map(lambda n: hx.get(f"{server.url}/?n={n}").json(), range(12)))

    live, replayed = record_then_replay(cassette_path, server, exchange)
    assert replayed == live == [{"n": str(n)} for n in range(12)]


def test_worker_thread_miss_raises_instead_of_reaching_network(
    hx: ModuleType, serve: Any, cassette_path: Path
) -> None:
    server = serve(lambda seen: json_reply({}))
    with agenttape.use_cassette(cassette_path, mode="once"):
        hx.get(f"{server.url}/known")
    with (
        agenttape.use_cassette(cassette_path),
        concurrent.futures.ThreadPoolExecutor(1) as pool,
        pytest.raises(agenttape.UnmatchedInteractionError),
    ):
        pool.submit(hx.get, f"{server.url}/unknown").result()
    assert [seen.path for seen in server.seen] == ["/known"]


def test_asyncio_to_thread_inside_replay(hx: ModuleType, serve: Any, cassette_path: Path) -> None:
    server = serve(lambda seen: json_reply({"path": seen.path}))

    async def exchange() -> Any:
        return await asyncio.to_thread(lambda: hx.get(f"{server.url}/t").json())

    live, replayed = record_then_replay(cassette_path, server, lambda: asyncio.run(exchange()))
    assert replayed == live == {"path": "/t"}


def test_respx_mocked_route_is_served_by_respx_and_not_recorded(
    serve: Any, cassette_path: Path
) -> None:
    import httpx
    import respx

    server = serve(lambda seen: json_reply({"live": True}))
    with (
        agenttape.use_cassette(cassette_path, mode="once"),
        respx.mock(assert_all_called=False) as router,
    ):
        router.get("http://mocked.test/item").respond(json={"mocked": True})
        router.route(host="127.0.0.1").pass_through()
        mocked = httpx.get("http://mocked.test/item").json()
        live = httpx.get(f"{server.url}/live").json()
    assert mocked == {"mocked": True}
    assert live == {"live": True}
    urls = [i.request.url for i in agenttape.load(cassette_path).interactions]
    assert urls == [f"{server.url}/live"]


def _left_after_first_event(hx: ModuleType, serve: Any, cassette_path: Path) -> str:
    """Records a stream its client left after the first event; returns its URL."""
    events = [b"data: 1\n\n", b"data: 2\n\n"]
    server = serve(lambda seen: sse_reply(events, delay=1.0))
    with (
        agenttape.use_cassette(cassette_path, mode="once"),
        hx.Client() as client,
        client.stream("GET", server.url) as response,
    ):
        assert next(response.iter_raw()) == events[0]
    server.stop()
    return str(server.url)


def test_a_stream_left_early_stays_open_until_the_client_closes_it(
    hx: ModuleType, serve: Any, cassette_path: Path
) -> None:
    """With no read timeout nothing but the client's close ends it, from another thread."""
    url = _left_after_first_event(hx, serve, cassette_path)
    received: list[bytes] = []
    first = threading.Event()
    with (
        agenttape.use_cassette(cassette_path),
        hx.Client(timeout=None) as client,
        client.stream("GET", url) as response,
    ):

        def read() -> None:
            for chunk in response.iter_raw():
                received.append(chunk)
                first.set()

        reader = threading.Thread(target=read)
        reader.start()
        assert first.wait(5)
        reader.join(0.3)
        assert reader.is_alive(), "the stream ended by itself"
        response.close()
        reader.join(5)
        assert not reader.is_alive(), "closing the response did not end the read"
    assert received == [b"data: 1\n\n"]


async def test_an_async_stream_left_early_stays_open_until_the_client_closes_it(
    hx: ModuleType, serve: Any, cassette_path: Path
) -> None:
    url = await asyncio.to_thread(_left_after_first_event, hx, serve, cassette_path)
    received: list[bytes] = []
    async with (
        agenttape.use_cassette(cassette_path),
        hx.AsyncClient(timeout=None) as client,
        client.stream("GET", url) as response,
    ):

        async def read() -> None:
            async for chunk in response.aiter_raw():
                received.append(chunk)

        reader = asyncio.ensure_future(read())
        done, _pending = await asyncio.wait([reader], timeout=0.3)
        assert not done, "the stream ended by itself"
        assert received == [b"data: 1\n\n"]
        await response.aclose()
        await asyncio.wait_for(reader, 5)


def test_a_stream_left_early_replays_the_clients_read_timeout(
    hx: ModuleType, serve: Any, cassette_path: Path
) -> None:
    url = _left_after_first_event(hx, serve, cassette_path)
    received: list[bytes] = []
    with (
        agenttape.use_cassette(cassette_path),
        hx.Client(timeout=hx.Timeout(5.0, read=0.2)) as client,
        client.stream("GET", url) as response,
        pytest.raises(hx.ReadTimeout),
    ):
        for chunk in response.iter_raw():
            received.append(chunk)
    assert received == [b"data: 1\n\n"]


def test_a_body_whole_by_its_length_is_not_left_open(
    hx: ModuleType, serve: Any, cassette_path: Path
) -> None:
    """A client that closes without reading the end of a body its Content-Length says it has
    all of left nothing open: replay ends it."""
    server = serve(lambda seen: json_reply({"ok": True}))
    with agenttape.use_cassette(cassette_path, mode="once"), hx.Client() as client:
        with client.stream("GET", server.url) as response:
            assert next(response.iter_raw()) == b'{"ok": true}'
        with client.stream("HEAD", server.url):
            pass
    server.stop()
    stored = agenttape.load(cassette_path).interactions
    assert [i.response.truncated for i in stored if i.response] == [False, False]
    with agenttape.use_cassette(cassette_path), hx.Client(timeout=None) as client:
        assert client.get(server.url).content == b'{"ok": true}'
        assert client.head(server.url).content == b""


def _ended_by_a_later_request(hx: ModuleType, serve: Any, cassette_path: Path) -> str:
    """Records an event stream the server ends only when the client POSTs /close, which the
    client does a while after the first event; the server is stopped after."""
    server = serve(ended_by_a_later_request())
    with (
        agenttape.use_cassette(cassette_path, mode="once"),
        hx.Client(timeout=5) as client,
        client.stream("GET", f"{server.url}/events") as response,
    ):
        chunks = response.iter_raw()
        assert next(chunks) == b"data: 1\n\n"
        time.sleep(0.5)
        client.post(f"{server.url}/close")
        assert list(chunks) == []
    server.stop()
    return str(server.url)


async def test_a_stream_the_server_ended_at_a_later_request_ends_after_it_on_replay(
    hx: ModuleType, serve: Any, cassette_path: Path
) -> None:
    """Replayed at once, the stream still ends only once the request that ended it live is
    made again: a client that reconnects when a stream ends would otherwise reconnect with
    requests that were never recorded."""
    url = await asyncio.to_thread(_ended_by_a_later_request, hx, serve, cassette_path)
    order: list[str] = []
    async with agenttape.use_cassette(cassette_path) as tape, hx.AsyncClient(timeout=5) as client:
        async with client.stream("GET", f"{url}/events") as response:

            async def read() -> None:
                async for chunk in response.aiter_raw():
                    order.append(chunk.decode())
                order.append("end")

            reader = asyncio.ensure_future(read())
            await asyncio.sleep(0.1)  # less than live: the end is due after the POST
            order.append("post")
            assert (await client.post(f"{url}/close")).json() == {"closed": True}
            await asyncio.wait_for(reader, 5)
        assert tape.all_played
    assert order == ["data: 1\n\n", "post", "end"]


def test_a_stream_waiting_for_a_request_never_made_still_ends(
    hx: ModuleType, serve: Any, cassette_path: Path
) -> None:
    """A client that no longer makes the request is not left hanging: the end comes after
    the recorded time between the last event and the end, and a short grace."""
    url = _ended_by_a_later_request(hx, serve, cassette_path)
    with agenttape.use_cassette(cassette_path) as tape, hx.Client(timeout=5) as client:
        with client.stream("GET", f"{url}/events") as response:
            assert list(response.iter_raw()) == [b"data: 1\n\n"]
        assert tape.play_count == 1, "the POST was not made"


def _context(client: Any) -> Any:
    """The TLS context the client's transport connects with."""
    return client._transport._pool._ssl_context


def test_clients_made_while_replaying_share_one_tls_context_and_keep_their_types(
    hx: ModuleType, serve: Any, cassette_path: Path
) -> None:
    """Loading the CA bundle (tens of ms per client) happens once per replay, not once per
    client; the transport stays the library's own class, built by its own ``__init__``."""
    server = serve(lambda seen: json_reply({"path": seen.path}))
    with (
        agenttape.use_cassette(cassette_path, mode="once"),
        hx.Client() as first,
        hx.Client() as second,
    ):
        assert _context(first) is not _context(second)  # recording: as the library builds
        for _ in range(2):
            assert first.get(f"{server.url}/a").json() == {"path": "/a"}
    server.stop()

    with agenttape.use_cassette(cassette_path) as tape:
        closed = hx.Client(transport=hx.HTTPTransport(retries=1))  # as the Anthropic SDK does
        with closed:
            assert closed.get(f"{server.url}/a").json() == {"path": "/a"}
        kept = hx.Client()
        assert kept.get(f"{server.url}/a").json() == {"path": "/a"}
        asynchronous = hx.AsyncClient()
        assert tape.all_played
    assert type(closed._transport) is hx.HTTPTransport
    assert type(kept._transport) is hx.HTTPTransport
    assert type(asynchronous._transport) is hx.AsyncHTTPTransport
    shared = _context(kept)
    assert _context(closed) is shared and _context(asynchronous) is shared

    later = serve(lambda seen: json_reply({"later": seen.path}))
    assert kept.get(f"{later.url}/b").json() == {"later": "/b"}  # live, after the cassette
    with hx.Client() as outside, hx.Client() as another:
        assert _context(outside) is not _context(another) is not shared
        made_outside = _context(outside)
        assert shared.cert_store_stats() == made_outside.cert_store_stats()
        assert shared.cert_store_stats()["x509_ca"] > 0
        assert (shared.verify_mode, shared.check_hostname) == (
            made_outside.verify_mode,
            made_outside.check_hostname,
        )
    kept.close()


async def test_an_async_client_made_while_replaying_keeps_its_transport_class(
    hx: ModuleType, serve: Any, cassette_path: Path
) -> None:
    server = serve(lambda seen: json_reply({"path": seen.path}))

    async def exchange() -> tuple[Any, Any]:
        async with hx.AsyncClient() as client:
            return (await client.get(f"{server.url}/a")).json(), client._transport

    async with agenttape.use_cassette(cassette_path, mode="once"):
        live, _ = await exchange()
    server.stop()
    async with agenttape.use_cassette(cassette_path, allow_repeats=True):
        replayed, transport = await exchange()
        _, again = await exchange()
    assert replayed == live == {"path": "/a"}
    assert type(transport) is hx.AsyncHTTPTransport
    assert transport._pool._ssl_context is again._pool._ssl_context


def test_the_shared_tls_context_follows_the_arguments_and_the_environment(
    hx: ModuleType, serve: Any, cassette_path: Path, monkeypatch: Any
) -> None:
    """What changes the context the library would build changes the one shared: another
    ``trust_env``, another ``SSL_CERT_FILE``; ``verify=<context>`` is the caller's own."""
    server = serve(lambda seen: json_reply({"path": seen.path}))
    with agenttape.use_cassette(cassette_path, mode="once"):
        hx.get(f"{server.url}/a")
    certifi = pytest.importorskip("certifi")
    monkeypatch.delenv("SSL_CERT_FILE", raising=False)
    own = ssl.create_default_context()
    with agenttape.use_cassette(cassette_path, allow_repeats=True):
        with hx.Client() as plain, hx.Client() as again, hx.Client(trust_env=False) as untrusting:
            assert _context(plain) is _context(again)
            assert _context(untrusting) is not _context(plain)
        monkeypatch.setenv("SSL_CERT_FILE", certifi.where())
        with hx.Client() as named, hx.Client() as named_again, hx.Client(verify=own) as mine:
            assert _context(named) is _context(named_again) is not _context(plain)
            assert _context(mine) is own
            assert named.get(f"{server.url}/a").json() == {"path": "/a"}


@pytest.mark.filterwarnings("ignore::DeprecationWarning")  # verify=<str>, from httpx 0.28
def test_a_client_whose_construction_fails_while_replaying_still_fails_there(
    hx: ModuleType, serve: Any, tmp_path: Path, cassette_path: Path
) -> None:
    server = serve(lambda seen: json_reply({"path": seen.path}))
    with agenttape.use_cassette(cassette_path, mode="once"):
        hx.get(f"{server.url}/a")
    with agenttape.use_cassette(cassette_path) as tape:
        assert not tape.is_recording
        for _ in range(2):  # a failure is not kept: the second raises as the first
            with pytest.raises(OSError):
                hx.Client(verify=str(tmp_path / "no-such-bundle.pem"))
            if importlib.util.find_spec("h2") is None:
                with pytest.raises(ImportError, match="h2"):
                    hx.Client(http2=True)
            else:
                with hx.Client(http2=True) as client:
                    assert type(client._transport) is hx.HTTPTransport
        assert hx.get(f"{server.url}/a").json() == {"path": "/a"}


def test_a_ca_bundle_the_environment_names_is_read_when_the_client_is_made(
    hx: ModuleType, serve: Any, tmp_path: Path, cassette_path: Path, monkeypatch: Any
) -> None:
    server = serve(lambda seen: json_reply({"path": seen.path}))
    with agenttape.use_cassette(cassette_path, mode="once"):
        hx.get(f"{server.url}/a")

    def construction_error() -> type[BaseException] | None:
        try:
            hx.Client().close()
        except Exception as exc:
            return type(exc)
        return None

    monkeypatch.setenv("SSL_CERT_FILE", str(tmp_path / "no-such-bundle.pem"))
    outside = construction_error()  # FileNotFoundError where the library reads it at once
    with agenttape.use_cassette(cassette_path) as tape:
        assert construction_error() is outside
        assert construction_error() is outside
        with hx.Client(trust_env=False) as untrusting:  # it reads no variable
            assert untrusting.get(f"{server.url}/a").json() == {"path": "/a"}
        assert tape.all_played


async def test_tasks_started_eagerly_record_and_replay_in_their_order(
    task_factory: str, hx: ModuleType, serve: Any, cassette_path: Path
) -> None:
    """From Python 3.12 a task may run its first steps at once, inside ``create_task``
    (``eager_task_factory``): recording and paced replay see the same requests either way."""
    server = serve(lambda seen: Reply(chunks=[seen.path.encode(), b"!"], chunked=True, delay=0.01))

    async def run() -> list[bytes]:
        async with hx.AsyncClient() as client:

            async def fetch(n: int) -> bytes:
                async with client.stream("GET", f"{server.url}/{n}") as response:
                    return b"".join([piece async for piece in response.aiter_raw()])

            return list(await asyncio.gather(*(fetch(n) for n in range(8))))

    async with agenttape.use_cassette(cassette_path, mode="once", realtime=True):
        live = await run()
    server.stop()
    async with agenttape.use_cassette(cassette_path, realtime=True) as tape:
        replayed = await run()
        assert tape.all_played
    assert replayed == live == [f"/{n}!".encode() for n in range(8)]
