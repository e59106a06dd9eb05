"""realtime=True: a reader's timeout fires on replay as it did live.

Without asserting wall-clock times: the order in which the event loop's timers fire is
deterministic, so a marker timer set well before the recorded moment shows whether replay
waited for it.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import httpx
import msgpack
import pytest
import requests

import agenttape
from tests.servers import Reply, loaded

GAP = 1.0  # the server's pause between the two chunks
READ_TIMEOUT = 0.5  # the reader gives up after this long without a chunk
MARKER = 0.2  # a timer set well before the timeout fires


def _slow(seen: Any) -> Reply:
    return Reply(chunks=[b"data: first\n\n", b"data: second\n\n"], delay=GAP, chunked=True)


def _client() -> httpx.AsyncClient:
    """Made before any marker starts: building a client (its TLS context) takes time."""
    return httpx.AsyncClient(timeout=httpx.Timeout(5.0, read=READ_TIMEOUT))


async def _read_with_httpx_timeout(
    client: httpx.AsyncClient, url: str
) -> tuple[list[bytes], BaseException | None]:
    chunks: list[bytes] = []
    try:
        async with client.stream("GET", url) as response:
            async for chunk in response.aiter_raw():
                chunks.append(chunk)
    except httpx.ReadTimeout as exc:
        return chunks, exc
    return chunks, None


async def _marked(reader: Any) -> tuple[Any, bool]:
    """Runs ``reader`` beside a timer of MARKER seconds; says whether the timer fired first."""
    marker = asyncio.ensure_future(asyncio.sleep(MARKER))
    result = await reader
    fired = marker.done()
    marker.cancel()
    return result, fired


async def test_httpx_read_timeout_fires_on_replay_as_it_did_live(
    cassette_path: Path, serve: Any
) -> None:
    server = serve(_slow)
    async with agenttape.use_cassette(cassette_path, mode="once"), _client() as client:
        live_chunks, live_error = await _read_with_httpx_timeout(client, server.url)
    server.stop()
    assert live_chunks == [b"data: first\n\n"]
    assert isinstance(live_error, httpx.ReadTimeout)
    recorded = (await loaded(cassette_path)).interactions[0]
    assert recorded.error is not None and recorded.error.kind == "read_timeout"

    async with agenttape.use_cassette(cassette_path, realtime=True), _client() as client:
        (chunks, error), marker_fired = await _marked(_read_with_httpx_timeout(client, server.url))
    assert chunks == live_chunks
    assert type(error) is httpx.ReadTimeout
    assert marker_fired  # the timeout came at its recorded moment, not at once

    async with agenttape.use_cassette(cassette_path), _client() as client:
        (chunks, error), marker_fired = await _marked(_read_with_httpx_timeout(client, server.url))
    assert chunks == live_chunks and type(error) is httpx.ReadTimeout
    assert not marker_fired  # without realtime the same failure comes at once


async def _read_with_own_timeout(url: str) -> tuple[list[bytes], bool]:
    """An agent's stream reader that gives up when a chunk takes longer than READ_TIMEOUT."""
    chunks: list[bytes] = []
    async with httpx.AsyncClient(timeout=30.0) as client, client.stream("GET", url) as response:
        iterator: AsyncIterator[bytes] = response.aiter_raw()
        while True:
            try:
                chunks.append(await asyncio.wait_for(iterator.__anext__(), READ_TIMEOUT))
            except StopAsyncIteration:
                return chunks, False
            except TimeoutError:
                return chunks, True


async def test_readers_own_timeout_fires_on_replay_as_it_did_live(
    cassette_path: Path, serve: Any
) -> None:
    server = serve(_slow)
    async with agenttape.use_cassette(cassette_path, mode="once"):
        live = await _read_with_own_timeout(server.url)
    server.stop()
    assert live == ([b"data: first\n\n"], True)
    recorded = (await loaded(cassette_path)).interactions[0]
    assert recorded.response is not None and recorded.response.truncated

    async with agenttape.use_cassette(cassette_path, realtime=True):
        assert await _read_with_own_timeout(server.url) == live

    # Without realtime too: a body the reader left stays open, so its timeout fires again.
    async with agenttape.use_cassette(cassette_path):
        assert await _read_with_own_timeout(server.url) == live


async def test_chunks_arrive_at_their_recorded_offsets(cassette_path: Path, serve: Any) -> None:
    """Recorded without any timeout; a stricter reader meets the slow chunk only in realtime."""
    server = serve(_slow)
    async with (
        agenttape.use_cassette(cassette_path, mode="once"),
        httpx.AsyncClient() as client,
    ):
        response = await client.get(server.url)
    server.stop()
    assert response.content == b"data: first\n\ndata: second\n\n"

    async with agenttape.use_cassette(cassette_path, realtime=True):
        assert await _read_with_own_timeout(server.url) == ([b"data: first\n\n"], True)
    async with agenttape.use_cassette(cassette_path, allow_repeats=True):
        assert await _read_with_own_timeout(server.url) == (
            [b"data: first\n\n", b"data: second\n\n"],
            False,
        )


@pytest.mark.parametrize("realtime", [True, False])
def test_sync_replay_of_a_read_timeout(cassette_path: Path, serve: Any, realtime: bool) -> None:
    server = serve(_slow)
    client = httpx.Client(timeout=httpx.Timeout(5.0, read=READ_TIMEOUT))
    with (
        agenttape.use_cassette(cassette_path, mode="once"),
        pytest.raises(httpx.ReadTimeout),
        client.stream("GET", server.url) as response,
    ):
        list(response.iter_raw())
    server.stop()
    chunks: list[bytes] = []
    with (
        agenttape.use_cassette(cassette_path, realtime=realtime),
        pytest.raises(httpx.ReadTimeout),
        client.stream("GET", server.url) as response,
    ):
        chunks.extend(response.iter_raw())
    assert chunks == [b"data: first\n\n"]
    client.close()


async def test_a_stalled_head_keeps_its_delay(cassette_path: Path, serve: Any) -> None:
    """Headers that came late live come late in realtime replay: a deadline meets them."""
    server = serve(lambda seen: Reply(chunks=[b"ok"], stall=GAP))
    async with agenttape.use_cassette(cassette_path, mode="once"), httpx.AsyncClient() as client:
        assert (await client.get(server.url)).content == b"ok"
    server.stop()

    async def fetch() -> bytes | None:
        """Waits READ_TIMEOUT for the status line and headers only, then reads the body."""
        async with httpx.AsyncClient() as client:
            request = client.build_request("GET", server.url)
            try:
                response = await asyncio.wait_for(client.send(request, stream=True), READ_TIMEOUT)
            except TimeoutError:
                return None
            try:
                return await response.aread()
            finally:
                await response.aclose()

    async with agenttape.use_cassette(cassette_path, realtime=True):
        assert await fetch() is None
    async with agenttape.use_cassette(cassette_path):
        assert await fetch() == b"ok"


async def test_a_timeout_before_the_head_fires_at_its_recorded_moment(
    cassette_path: Path, serve: Any
) -> None:
    server = serve(lambda seen: Reply(chunks=[b"late"], stall=GAP))
    async with agenttape.use_cassette(cassette_path, mode="once"), _client() as client:
        chunks, error = await _read_with_httpx_timeout(client, server.url)
    server.stop()
    assert chunks == [] and isinstance(error, httpx.ReadTimeout)
    recorded = (await loaded(cassette_path)).interactions[0]
    assert recorded.response is None and recorded.error is not None

    async with agenttape.use_cassette(cassette_path, realtime=True), _client() as client:
        (chunks, error), marker_fired = await _marked(_read_with_httpx_timeout(client, server.url))
    assert chunks == [] and type(error) is httpx.ReadTimeout and marker_fired
    async with agenttape.use_cassette(cassette_path), _client() as client:
        (chunks, error), marker_fired = await _marked(_read_with_httpx_timeout(client, server.url))
    assert chunks == [] and type(error) is httpx.ReadTimeout and not marker_fired


# -- a recorded moment later than the client waits ------------------------------------------

LATE = 8.0  # a chunk, or the head, a hand-edited cassette puts this many seconds late
PATIENCE = 0.3  # the client's read timeout


def _recorded_then_delayed(path: Path, serve: Any, part: str) -> str:
    """Records a two-chunk body from a real server, then edits the file so that ``part``
    (``head`` or ``chunk``) comes LATE seconds after the request; returns the URL."""
    server = serve(lambda seen: Reply(chunks=[b"one ", b"two"], delay=0.05, chunked=True))
    with agenttape.use_cassette(path, mode="once"):
        assert httpx.get(server.url).content == b"one two"
    server.stop()
    document = msgpack.unpackb(path.read_bytes(), timestamp=3)
    interaction = document["interactions"][0]
    if part == "head":
        interaction["ttfb"] = LATE
        interaction["response"]["chunks"] = [
            [size, LATE] for size, _ in interaction["response"]["chunks"]
        ]
    else:
        interaction["response"]["chunks"][1][1] = LATE
    path.write_bytes(msgpack.packb(document, use_bin_type=True, datetime=True))
    return server.url


def _httpx_sync(url: str) -> None:
    timeout = httpx.Timeout(5.0, read=PATIENCE)
    with httpx.Client(timeout=timeout) as client, client.stream("GET", url) as response:
        list(response.iter_raw())


def _httpx_async(url: str) -> None:
    async def read() -> None:
        timeout = httpx.Timeout(5.0, read=PATIENCE)
        async with (
            httpx.AsyncClient(timeout=timeout) as client,
            client.stream("GET", url) as response,
        ):
            async for _chunk in response.aiter_raw():
                pass

    asyncio.run(read())


def _requests(url: str) -> None:
    requests.get(url, timeout=(5.0, PATIENCE)).content  # noqa: B018


def _aiohttp(url: str) -> None:
    async def read() -> None:
        timeout = aiohttp.ClientTimeout(total=30, sock_read=PATIENCE)
        async with (
            aiohttp.ClientSession(timeout=timeout) as session,
            session.get(url) as response,
        ):
            await response.read()

    asyncio.run(read())


READERS: dict[str, tuple[Any, Any]] = {
    "httpx": (_httpx_sync, httpx.ReadTimeout),
    "httpx async": (_httpx_async, httpx.ReadTimeout),
    # Late headers are a ReadTimeout to requests, a late body chunk a ConnectionError.
    "requests": (_requests, (requests.exceptions.ReadTimeout, requests.exceptions.ConnectionError)),
    "aiohttp": (_aiohttp, asyncio.TimeoutError),
}


@pytest.mark.parametrize("part", ["head", "chunk"])
@pytest.mark.parametrize("library", sorted(READERS))
def test_a_realtime_wait_longer_than_the_clients_timeout_ends_in_that_timeout(
    cassette_path: Path, serve: Any, library: str, part: str
) -> None:
    """Live, a client stops waiting after its read timeout; replay does not keep it waiting
    for the recorded moment, however late the cassette puts it."""
    url = _recorded_then_delayed(cassette_path, serve, part)
    read, timeout_error = READERS[library]
    started = time.monotonic()
    with agenttape.use_cassette(cassette_path, realtime=True), pytest.raises(timeout_error):
        read(url)
    assert time.monotonic() - started < LATE / 2
