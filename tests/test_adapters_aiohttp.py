"""aiohttp through its adapter: recorded from real servers on 127.0.0.1, replayed with the
servers stopped, compared byte for byte and read for read."""

from __future__ import annotations

import asyncio
import gzip
import importlib
import itertools
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import aiohttp
import httpx
import pytest

import agenttape
from tests.servers import (
    HALF_JSON,
    RATE_LIMIT_HEADERS,
    App,
    Reply,
    Server,
    ended_by_a_later_request,
    gzip_reply,
    json_reply,
    loaded,
    record_then_replay_async,
    refused_port,
    sequence,
)

Serve = Callable[[App], Server]

LINES = [b"data: one\n\n", b"data: two\n\n", b"data: three\n\n", b"data: [DONE]\n\n"]


async def test_get_and_post_json(serve: Serve, cassette_path: Path) -> None:
    server = serve(
        lambda seen: json_reply(
            {"path": seen.path, "query": seen.query, "body": seen.body.decode()},
            headers=[("X-Trace", "a"), ("x-trace", "b")],
        )
    )

    async def run() -> list[Any]:
        async with aiohttp.ClientSession() as session:
            async with session.get(f"{server.url}/items", params={"page": "2"}) as got:
                first = (got.status, got.reason, list(got.raw_headers), await got.read())
            async with session.post(f"{server.url}/items", json={"name": "lamp"}) as posted:
                second = (posted.status, await posted.json())
        return [first, second]

    live, replayed = await record_then_replay_async(cassette_path, server, run)
    assert replayed == live
    assert live[1] == (200, {"path": "/items", "query": [], "body": '{"name": "lamp"}'})
    assert (b"X-Trace", b"a") in live[0][2] and (b"x-trace", b"b") in live[0][2]
    post = (await loaded(cassette_path)).interactions[1].request
    assert post.method == "POST" and post.body == b'{"name": "lamp"}'


@pytest.mark.parametrize("reader", ["iter_any", "iter_chunked", "readline", "iter_chunks"])
async def test_streaming_reads_keep_the_recorded_boundaries(
    serve: Serve, cassette_path: Path, reader: str
) -> None:
    server = serve(
        lambda seen: Reply(
            headers=[("Content-Type", "text/event-stream")], chunks=LINES, chunked=True, delay=0.05
        )
    )

    async def read(response: aiohttp.ClientResponse) -> list[Any]:
        content = response.content
        if reader == "iter_any":
            return [piece async for piece in content.iter_any()]
        if reader == "iter_chunked":
            return [piece async for piece in content.iter_chunked(7)]
        if reader == "iter_chunks":
            pieces = [piece async for piece in content.iter_chunks()]
            # When the terminating chunk happens to arrive in a read of its own, aiohttp adds
            # an empty end marker; only body pieces are recorded, so compare without it.
            return pieces[:-1] if pieces and pieces[-1] == (b"", True) else pieces
        lines = []
        while line := await content.readline():
            lines.append(line)
        return lines

    async def run() -> list[Any]:
        async with aiohttp.ClientSession() as session, session.get(f"{server.url}/sse") as response:
            return await read(response)

    live, replayed = await record_then_replay_async(cassette_path, server, run)
    assert replayed == live
    stored = (await loaded(cassette_path)).interactions[0].response
    assert stored is not None
    assert stored.body == b"".join(LINES)
    if reader == "iter_any":
        # Each socket read the caller saw live is one recorded chunk (the server pauses
        # between lines, so normally one line per read).
        assert [size for size, _offset in stored.chunks] == [len(piece) for piece in live]


async def test_gzip_is_stored_raw_and_decoded_on_replay(serve: Serve, cassette_path: Path) -> None:
    payload = json.dumps({"answer": 42, "padding": "x" * 300}).encode()
    server = serve(lambda seen: gzip_reply(payload))

    async def run() -> tuple[bytes, bytes]:
        async with aiohttp.ClientSession() as session, session.get(f"{server.url}/g") as response:
            decoded = await response.read()
        async with (
            aiohttp.ClientSession(auto_decompress=False) as raw_session,
            raw_session.get(f"{server.url}/g") as response,
        ):
            raw = await response.read()
        return decoded, raw

    live, replayed = await record_then_replay_async(cassette_path, server, run)
    assert replayed == live == (payload, gzip.compress(payload, mtime=0))
    stored = (await loaded(cassette_path)).interactions[0].response
    assert stored is not None and stored.body == gzip.compress(payload, mtime=0)


async def test_redirect_hops_are_recorded_one_by_one(serve: Serve, cassette_path: Path) -> None:
    def app(seen: Any) -> Reply:
        if seen.path == "/old":
            return Reply(status=301, headers=[("Location", "/new")])
        return json_reply({"at": seen.path})

    server = serve(app)

    async def run() -> tuple[Any, ...]:
        async with aiohttp.ClientSession() as session, session.get(f"{server.url}/old") as response:
            return [h.status for h in response.history], str(response.url), await response.json()

    live, replayed = await record_then_replay_async(cassette_path, server, run)
    assert replayed == live
    assert live[2] == {"at": "/new"}
    hops = [
        (i.request.url, i.response.status)
        for i in (await loaded(cassette_path)).interactions
        if i.response
    ]
    assert hops == [(f"{server.url}/old", 301), (f"{server.url}/new", 200)]


async def test_429_half_json_then_200_in_order(serve: Serve, cassette_path: Path) -> None:
    server = serve(
        sequence(
            Reply(status=429, headers=RATE_LIMIT_HEADERS, chunks=[HALF_JSON]),
            json_reply({"ok": True}),
        )
    )

    async def run() -> list[Any]:
        out = []
        async with aiohttp.ClientSession() as session:
            for _ in range(2):
                async with session.post(f"{server.url}/v1/chat", json={"q": 1}) as response:
                    out.append((response.status, list(response.raw_headers), await response.read()))
        return out

    live, replayed = await record_then_replay_async(cassette_path, server, run)
    assert replayed == live
    assert live[0][0] == 429 and live[0][2] == HALF_JSON
    assert (b"retry-after", b"7") in live[0][1]
    assert live[1][0] == 200
    stored = (await loaded(cassette_path)).interactions[0].response
    assert stored is not None and stored.headers[:3] == RATE_LIMIT_HEADERS


async def test_body_cut_short_replays_the_same_bytes_then_the_same_error(
    serve: Serve, cassette_path: Path
) -> None:
    server = serve(
        lambda seen: Reply(status=429, headers=RATE_LIMIT_HEADERS, chunks=[HALF_JSON], length=400)
    )

    async def run() -> tuple[Any, ...]:
        received = bytearray()
        async with (
            aiohttp.ClientSession(auto_decompress=False) as session,
            session.get(f"{server.url}/cut") as response,
        ):
            with pytest.raises(aiohttp.ClientPayloadError) as caught:
                async for piece in response.content.iter_any():
                    received += piece
        return response.status, bytes(received), type(caught.value)

    live, replayed = await record_then_replay_async(cassette_path, server, run)
    assert replayed == live
    assert live[1] == HALF_JSON
    stored = (await loaded(cassette_path)).interactions[0]
    assert stored.error is not None and stored.error.kind == "protocol_error"


async def test_connection_refused_replays_as_client_connector_error(cassette_path: Path) -> None:
    url = f"http://127.0.0.1:{refused_port()}/nothing"

    async def run() -> tuple[type, int | None]:
        async with aiohttp.ClientSession() as session:
            with pytest.raises(aiohttp.ClientConnectorError) as caught:
                await session.get(url)
        return type(caught.value), caught.value.port

    async with agenttape.use_cassette(cassette_path, mode="once"):
        live = await run()
    async with agenttape.use_cassette(cassette_path):
        replayed = await run()
    assert replayed == live
    assert (await loaded(cassette_path)).interactions[0].error.kind == "connect_error"  # type: ignore[union-attr]


@pytest.mark.parametrize("realtime", [False, True])
async def test_read_timeout_replays_as_socket_timeout(
    serve: Serve, cassette_path: Path, realtime: bool
) -> None:
    server = serve(lambda seen: Reply(stall=1.0, chunks=[b"late"]))

    async def run() -> type:
        timeout = aiohttp.ClientTimeout(sock_read=0.2)
        async with aiohttp.ClientSession(timeout=timeout) as session:
            with pytest.raises(aiohttp.ServerTimeoutError) as caught:
                async with session.get(f"{server.url}/slow") as response:
                    await response.read()
        return type(caught.value)

    live, replayed = await record_then_replay_async(cassette_path, server, run, realtime=realtime)
    assert replayed == live
    assert (await loaded(cassette_path)).interactions[0].error.kind == "read_timeout"  # type: ignore[union-attr]


@pytest.mark.skipif(
    not hasattr(aiohttp, "ConnectionTimeoutError"), reason="httpx-aiohttp needs aiohttp 3.10"
)
async def test_httpx_on_an_aiohttp_transport_records_each_exchange_once(
    serve: Serve, cassette_path: Path
) -> None:
    # Imported off the loop: a first import reads files.
    httpx_aiohttp = await asyncio.to_thread(importlib.import_module, "httpx_aiohttp")
    AiohttpTransport = httpx_aiohttp.AiohttpTransport

    server = serve(lambda seen: json_reply({"path": seen.path}))

    async def run() -> list[Any]:
        async with httpx.AsyncClient(transport=AiohttpTransport()) as client:
            return [(await client.get(f"{server.url}/{n}")).json() for n in range(3)]

    live, replayed = await record_then_replay_async(cassette_path, server, run)
    assert replayed == live == [{"path": f"/{n}"} for n in range(3)]
    assert len((await loaded(cassette_path)).interactions) == 3


async def test_a_cassette_recorded_with_requests_replays_through_aiohttp(
    serve: Serve, cassette_path: Path
) -> None:
    import requests

    server = serve(lambda seen: Reply(status=429, headers=RATE_LIMIT_HEADERS, chunks=[HALF_JSON]))

    def record() -> requests.Response:  # a sync client: off the loop
        with agenttape.use_cassette(cassette_path, mode="once"):
            return requests.get(f"{server.url}/x", timeout=5)

    live = await asyncio.to_thread(record)
    server.stop()
    async with (
        agenttape.use_cassette(cassette_path),
        aiohttp.ClientSession() as session,
        session.get(f"{server.url}/x") as response,
    ):
        assert (response.status, await response.read()) == (live.status_code, live.content)
        assert response.headers["retry-after"] == "7"


async def test_realtime_replay_serves_the_same_reads(serve: Serve, cassette_path: Path) -> None:
    server = serve(lambda seen: Reply(chunks=LINES, chunked=True, delay=0.05))

    async def run() -> list[bytes]:
        async with aiohttp.ClientSession() as session, session.get(f"{server.url}/s") as response:
            return [piece async for piece in response.content.iter_any()]

    live, replayed = await record_then_replay_async(cassette_path, server, run, realtime=True)
    assert replayed == live
    assert b"".join(live) == b"".join(LINES)


async def test_new_episodes_records_only_the_miss(serve: Serve, cassette_path: Path) -> None:
    server = serve(lambda seen: json_reply({"path": seen.path}))

    async def get(session: aiohttp.ClientSession, path: str) -> Any:
        async with session.get(f"{server.url}/{path}") as response:
            return await response.json()

    async with agenttape.use_cassette(cassette_path, mode="once"), aiohttp.ClientSession() as s:
        await get(s, "old")
    async with (
        agenttape.use_cassette(cassette_path, mode="new_episodes") as tape,
        aiohttp.ClientSession() as session,
    ):
        answers = [await get(session, path) for path in ("old", "new")]
    assert answers == [{"path": "/old"}, {"path": "/new"}]
    assert [seen.path for seen in server.seen] == ["/old", "/new"]
    assert len(tape.interactions) == 2


async def test_concurrent_tasks_record_and_replay(serve: Serve, cassette_path: Path) -> None:
    import asyncio

    server = serve(lambda seen: Reply(chunks=[seen.path.encode(), b"!"], chunked=True, delay=0.01))

    async def run() -> list[bytes]:
        async with aiohttp.ClientSession() as session:

            async def fetch(n: int) -> bytes:
                async with session.get(f"{server.url}/{n}") as response:
                    return await response.read()

            return list(await asyncio.gather(*(fetch(n) for n in range(20))))

    live, replayed = await record_then_replay_async(cassette_path, server, run)
    assert replayed == live == [f"/{n}!".encode() for n in range(20)]


async def test_a_stream_left_early_is_recorded_as_truncated_not_failed(
    serve: Serve, cassette_path: Path
) -> None:
    server = serve(lambda seen: Reply(chunks=LINES, chunked=True, delay=0.2))

    async def run() -> bytes:
        async with aiohttp.ClientSession() as session, session.get(f"{server.url}/s") as response:
            return await response.content.readany()

    live, replayed = await record_then_replay_async(cassette_path, server, run)
    assert replayed == live == LINES[0]
    (interaction,) = (await loaded(cassette_path)).interactions
    assert interaction.error is None
    assert interaction.response is not None and interaction.response.truncated
    assert interaction.response.body == LINES[0]


async def test_a_stream_the_server_ended_at_a_later_request_ends_after_it_on_replay(
    serve: Serve, cassette_path: Path
) -> None:
    """The end of a chunked stream the server ended when the client POSTed comes after that
    POST on replay too, not with the stream's last chunk."""
    server = serve(ended_by_a_later_request())
    async with (
        agenttape.use_cassette(cassette_path, mode="once"),
        aiohttp.ClientSession() as session,
        session.get(f"{server.url}/events") as response,
    ):
        assert await response.content.readany() == b"data: 1\n\n"
        await asyncio.sleep(0.5)
        async with session.post(f"{server.url}/close") as closed:
            assert await closed.json() == {"closed": True}
        assert await response.content.read() == b""
    server.stop()

    order: list[str] = []
    async with (
        agenttape.use_cassette(cassette_path) as tape,
        aiohttp.ClientSession() as session,
        session.get(f"{server.url}/events") as response,
    ):

        async def read() -> None:
            async for chunk in response.content.iter_any():
                order.append(chunk.decode())
            order.append("end")

        reader = asyncio.ensure_future(read())
        await asyncio.sleep(0.1)  # less than live: the end is due after the POST
        order.append("post")
        async with session.post(f"{server.url}/close") as closed:
            assert await closed.json() == {"closed": True}
        await asyncio.wait_for(reader, 5)
        assert tape.all_played
    assert order == ["data: 1\n\n", "post", "end"]


async def test_replayed_responses_keep_the_connection_alive_as_live(
    serve: Serve, cassette_path: Path
) -> None:
    """A response read to its end leaves its connection open for the next request, as the
    live socket was; one the server closes does not. aiohttp writes a request's body in a
    task of its own (before 3.11, every request's): the replayed answer comes once it ended."""

    def app(seen: Any) -> Reply:
        closes = seen.path == "/closes"
        return Reply(headers=[("Connection", "close")] if closes else [], chunks=[b"ok"])

    async def run() -> list[bool]:
        protocols = []
        async with aiohttp.ClientSession() as session:
            for path in ("/a", "/b", "/closes", "/c", "/d"):
                body = b"x" * 100 if path == "/b" else None
                async with session.request(
                    "POST" if body else "GET", server.url + path, data=body
                ) as response:
                    protocols.append(response._protocol)
                    assert await response.read() == b"ok"
        return [later is earlier for earlier, later in itertools.pairwise(protocols)]

    server = serve(app)
    live, replayed = await record_then_replay_async(cassette_path, server, run)
    assert replayed == live
    assert live == [True, True, False, True]  # the server closed the third


async def test_tasks_started_eagerly_record_and_replay_in_their_order(
    task_factory: str, serve: Serve, cassette_path: Path
) -> None:
    """From Python 3.12 a task may run its first steps at once, inside ``create_task``
    (``eager_task_factory``): recording and paced replay see the same requests either way."""
    server = serve(lambda seen: Reply(chunks=[seen.path.encode(), b"!"], chunked=True, delay=0.01))

    async def run() -> list[bytes]:
        async with aiohttp.ClientSession() as session:

            async def fetch(n: int) -> bytes:
                async with session.get(f"{server.url}/{n}") as response:
                    return b"".join([piece async for piece in response.content.iter_any()])

            return list(await asyncio.gather(*(fetch(n) for n in range(8))))

    live, replayed = await record_then_replay_async(cassette_path, server, run, realtime=True)
    assert replayed == live == [f"/{n}!".encode() for n in range(8)]


async def test_answers_served_in_one_read_keep_bytes_boundaries_and_connection(
    serve: Serve, cassette_path: Path
) -> None:
    """Answers with nothing to pace and one body piece are handed over in one read; between
    them, a streamed answer is walked piece by piece on the same kept-alive connection. Every
    one reads as live: head pairs in order with their duplicates, cookies, the pieces
    ``iter_chunks`` yields, a body that runs to the end of the connection, no body at all."""
    replies = {
        "/pairs": Reply(
            headers=[
                ("X-Trace", "a"),
                ("Link", "</a>; rel=next"),
                ("x-trace", "b"),
                ("Link", "</b>; rel=last"),
            ],
            chunks=[b"one piece"],
        ),
        "/chunked": Reply(
            headers=[("Content-Type", "text/plain")], chunks=[b"x" * 300], chunked=True
        ),
        "/stream": Reply(chunks=LINES, chunked=True, delay=0.05),
        "/after": Reply(chunks=[b"after the stream"]),
        "/empty": Reply(chunks=[], chunked=True),
        "/nothing": Reply(status=204),
        "/to-the-end": Reply(chunks=[b"until ", b"closed"], framed=False),
        "/last": Reply(chunks=[b"on a new connection"]),
    }

    async def run() -> list[Any]:
        seen: list[Any] = []
        protocols = []
        async with aiohttp.ClientSession() as session:
            for path in replies:
                async with session.get(server.url + path) as response:
                    protocols.append(response._protocol)
                    # aiohttp's one shared empty payload (a 204's) ends ``iter_chunks`` only
                    # the first time in a process: read whole.
                    pieces = (
                        [piece async for piece in response.content.iter_chunks()]
                        if response.status != 204
                        else await response.read()
                    )
                    # A terminating chunk read on its own adds an empty end marker (see above).
                    if pieces and pieces[-1] == (b"", True):
                        pieces = pieces[:-1]
                    seen.append((response.status, response.reason, response.raw_headers, pieces))
            async with session.head(server.url + "/head") as response:
                seen.append((response.status, response.raw_headers, await response.read()))
        reused = [later is earlier for earlier, later in itertools.pairwise(protocols)]
        # Left out: whether the connection the paced stream came on is used again (live, it
        # is not; replayed, it is), which is the walk's, not what this test is about.
        del reused[list(replies).index("/stream")]
        seen.append(reused)
        return seen

    def app(seen: Any) -> Reply:
        if seen.method == "HEAD":  # the length a GET's body has, and no body
            return Reply(headers=[("X-Trace", "a")], length=9)
        return replies[seen.path]

    server = serve(app)
    live, replayed = await record_then_replay_async(cassette_path, server, run)
    assert replayed == live
    pairs = live[0][2]
    assert [name for name, _ in pairs[:4]] == [b"X-Trace", b"Link", b"x-trace", b"Link"]
    assert live[2][3] == [(line, True) for line in LINES]  # one piece each, as recorded
    assert b"".join(piece for piece, _ in live[6][3]) == b"until closed"
    # Kept alive throughout but after the body that ran to the end of its connection.
    assert live[-1] == [True, True, True, True, True, False]


async def test_an_answer_served_as_the_request_is_written_leaves_no_read_timeout_behind(
    task_factory: str, serve: Serve, cassette_path: Path
) -> None:
    """A request without a body is answered as aiohttp's one write of it returns (from 3.12;
    before, a turn of the loop later): after the read timeout has started, so the end of the
    answer stops it, as live. A timer left running would fail the kept-alive connection once
    idle longer than the timeout, and the next request would need a new one."""
    server = serve(lambda seen: Reply(chunks=[seen.path.encode()]))

    async def run() -> list[Any]:
        got: list[Any] = []
        protocols = []
        timeout = aiohttp.ClientTimeout(sock_read=0.05)
        async with aiohttp.ClientSession(timeout=timeout) as session:
            for path, body in (("/a", None), ("/b", None), ("/c", b"posted"), ("/d", None)):
                async with session.request(
                    "POST" if body else "GET", server.url + path, data=body
                ) as response:
                    protocols.append(response._protocol)
                    got.append(await response.read())
                await asyncio.sleep(0.15)  # idle three read timeouts long
        got.append([later is earlier for earlier, later in itertools.pairwise(protocols)])
        return got

    live, replayed = await record_then_replay_async(cassette_path, server, run)
    assert replayed == live == [b"/a", b"/b", b"/c", b"/d", [True, True, True]]
