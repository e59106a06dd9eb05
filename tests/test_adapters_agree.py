"""Every adapter writes the same exchange down the same way, and any adapter replays what any
other recorded: the rate-limit story (a 429 with half a JSON body and a retry-after header)
recorded through httpx, requests, urllib3 and aiohttp, replayed through each of them."""

from __future__ import annotations

import asyncio
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

import aiohttp
import httpx
import pytest
import requests
import urllib3

import agenttape
from tests.servers import Reply, Server

HALF = [b'{"error": {"message": "Rate limit reached', b" for gpt-4o in organization org-"]
HEADERS = [
    ("Content-Type", "application/json"),
    ("retry-after", "7"),
    ("X-Request-Id", "req_1"),
    ("x-request-id", "req_2"),
]


def limited(seen: Any) -> Reply:
    # The pause keeps the two halves in separate socket reads, so every adapter sees two.
    return Reply(status=429, headers=HEADERS, chunks=HALF, chunked=True, delay=0.2)


def with_httpx(url: str) -> tuple[int, str, bytes]:
    with httpx.Client() as client:
        response = client.get(url)
        return response.status_code, response.headers["retry-after"], response.content


def with_requests(url: str) -> tuple[int, str, bytes]:
    response = requests.get(url, timeout=5)
    return response.status_code, response.headers["retry-after"], response.content


def with_urllib3(url: str) -> tuple[int, str, bytes]:
    with urllib3.PoolManager() as http:
        response = http.request("GET", url, retries=False)
        return response.status, response.headers["retry-after"], response.data


def with_aiohttp(url: str) -> tuple[int, str, bytes]:
    async def get() -> tuple[int, str, bytes]:
        async with aiohttp.ClientSession() as session, session.get(url) as response:
            return response.status, response.headers["retry-after"], await response.read()

    return asyncio.run(get())


CLIENTS: dict[str, Callable[[str], tuple[int, str, bytes]]] = {
    "httpx": with_httpx,
    "requests": with_requests,
    "urllib3": with_urllib3,
    "aiohttp": with_aiohttp,
}


@pytest.fixture(scope="module")
def recordings(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, dict[str, Path]]:
    """One cassette per client, recorded from one server that is then stopped."""
    folder = tmp_path_factory.mktemp("agree")
    with Server(limited) as server:
        url = f"{server.url}/v1/chat/completions"
        paths = {}
        for name, client in CLIENTS.items():
            paths[name] = folder / f"{name}.msgpack"
            with agenttape.use_cassette(paths[name], mode="once"):
                assert client(url) == (429, "7", b"".join(HALF))
    return url, paths


def test_every_adapter_records_the_same_bytes(recordings: tuple[str, dict[str, Path]]) -> None:
    _url, paths = recordings
    stored = {}
    for name, path in paths.items():
        (interaction,) = agenttape.load(path).interactions
        response = interaction.response
        assert response is not None and interaction.error is None
        stored[name] = (
            response.status,
            response.reason,
            response.http_version,
            response.headers,
            response.body,
            [size for size, _offset in response.chunks],
        )
    expected = (
        429,
        "Too Many Requests",
        "HTTP/1.1",
        [*HEADERS, ("Transfer-Encoding", "chunked")],
        b"".join(HALF),
        [len(piece) for piece in HALF],
    )
    assert stored == dict.fromkeys(CLIENTS, expected)


@pytest.mark.parametrize("recorded_by", list(CLIENTS))
@pytest.mark.parametrize("replayed_by", list(CLIENTS))
def test_any_adapter_replays_any_recording(
    recordings: tuple[str, dict[str, Path]], recorded_by: str, replayed_by: str
) -> None:
    url, paths = recordings
    with agenttape.use_cassette(paths[recorded_by]) as tape:
        assert CLIENTS[replayed_by](url) == (429, "7", b"".join(HALF))
        assert tape.all_played


def cut_short(seen: Any) -> Reply:
    return Reply(status=429, headers=HEADERS, chunks=HALF, length=500, delay=0.05)


def failure_with(name: str, url: str) -> str:
    """The exception the client raises on a body the server cut short."""
    return type(raised_by(name, url)).__name__


def raised_by(name: str, url: str) -> Exception:
    try:
        CLIENTS[name](url)
    except Exception as exc:
        return exc
    raise AssertionError(f"{name} read a body that was cut short without an error")


@pytest.fixture(scope="module")
def cut_recordings(
    tmp_path_factory: pytest.TempPathFactory,
) -> tuple[str, dict[str, Path], dict[str, str]]:
    folder = tmp_path_factory.mktemp("cut")
    with Server(cut_short) as server:
        url = f"{server.url}/v1/chat/completions"
        paths, live = {}, {}
        for name in CLIENTS:
            paths[name] = folder / f"{name}.msgpack"
            with agenttape.use_cassette(paths[name], mode="once"):
                live[name] = failure_with(name, url)
    return url, paths, live


def test_a_body_cut_short_is_recorded_alike(
    cut_recordings: tuple[str, dict[str, Path], dict[str, str]],
) -> None:
    _url, paths, live = cut_recordings
    assert live == {
        "httpx": "RemoteProtocolError",
        "requests": "ChunkedEncodingError",
        "urllib3": "ProtocolError",
        "aiohttp": "ClientPayloadError",
    }
    for path in paths.values():
        (interaction,) = agenttape.load(path).interactions
        assert interaction.response is not None
        assert interaction.response.body == b"".join(HALF)
        assert interaction.response.headers[:4] == HEADERS
        assert interaction.error is not None and interaction.error.kind == "protocol_error"


@pytest.mark.parametrize("recorded_by", list(CLIENTS))
@pytest.mark.parametrize("replayed_by", list(CLIENTS))
def test_a_body_cut_short_replays_as_each_librarys_own_error(
    cut_recordings: tuple[str, dict[str, Path], dict[str, str]], recorded_by: str, replayed_by: str
) -> None:
    url, paths, live = cut_recordings
    with agenttape.use_cassette(paths[recorded_by]):
        replayed = raised_by(replayed_by, url)
    assert type(replayed).__name__ == live[replayed_by]
    # ... and says, once, that it came from the cassette
    printed = "".join(traceback.format_exception(replayed))
    assert printed.count(f"agenttape: replayed from cassette {paths[recorded_by]}, ") == 1


# -- a stream the client closed early ---------------------------------------------------------
#
# The server sends one event, then holds the stream open (the next one is far off). The
# recording client reads the first event and closes: the body is recorded as left early by the
# client, not as ended by the server. A second client then reads the first event and waits for
# the next with a read timeout shorter than the server's pause: live it times out, the stream
# still open. Replay must do the same in every mode; ending the body there instead is an end
# of stream that never happened (SDKs reconnect on one).

EVENTS = [b"data: 1\n\n", b"data: 2\n\n", b"data: 3\n\n"]
PROBE_TIMEOUT = 0.3


def held_open(seen: Any) -> Reply:
    return Reply(
        headers=[("Content-Type", "text/event-stream")], chunks=EVENTS, chunked=True, delay=1.5
    )


def first_event_then_close(name: str, url: str) -> bytes:
    """What each client reads before it closes the stream."""
    if name == "httpx":
        with httpx.Client() as client, client.stream("GET", url) as response:
            return next(response.iter_raw())
    if name == "requests":
        with requests.get(url, stream=True, timeout=5) as response:
            return next(response.iter_content(chunk_size=None))
    if name == "urllib3":
        with urllib3.PoolManager() as http:
            response = http.request("GET", url, preload_content=False, retries=False)
            first = next(response.read_chunked())
            response.release_conn()
            return first

    async def read() -> bytes:
        async with aiohttp.ClientSession() as session, session.get(url) as response:
            return await response.content.readany()

    return asyncio.run(read())


def next_event_or_timeout(name: str, url: str) -> tuple[bytes, str]:
    """The first event, then what waiting for the next with a short read timeout gives: the
    exception raised, or "ended" when the body ended instead."""
    if name == "httpx":
        timeout = httpx.Timeout(5.0, read=PROBE_TIMEOUT)
        with httpx.Client(timeout=timeout) as client, client.stream("GET", url) as response:
            raw = response.iter_raw()
            first = next(raw)
            try:
                next(raw)
            except httpx.TransportError as exc:
                return first, type(exc).__name__
            return first, "more"
    if name == "requests":
        with requests.get(url, stream=True, timeout=(5, PROBE_TIMEOUT)) as response:
            content = response.iter_content(chunk_size=None)
            first = next(content)
            try:
                next(content)
            except StopIteration:
                return first, "ended"
            except requests.RequestException as exc:
                return first, type(exc).__name__
            return first, "more"
    if name == "urllib3":
        timeout = urllib3.Timeout(connect=5.0, read=PROBE_TIMEOUT)
        with urllib3.PoolManager(timeout=timeout) as http:
            response = http.request("GET", url, preload_content=False, retries=False)
            chunks = response.read_chunked()
            first = next(chunks)
            try:
                next(chunks)
            except StopIteration:
                return first, "ended"
            except urllib3.exceptions.HTTPError as exc:
                return first, type(exc).__name__
            finally:
                response.release_conn()
            return first, "more"

    async def read() -> tuple[bytes, str]:
        timeout = aiohttp.ClientTimeout(total=5.0, sock_read=PROBE_TIMEOUT)
        async with (
            aiohttp.ClientSession(timeout=timeout) as session,
            session.get(url) as response,
        ):
            first = await response.content.readany()
            try:
                after = await response.content.readany()
            except aiohttp.ClientError as exc:
                return first, type(exc).__name__
            return first, "ended" if after == b"" else "more"

    return asyncio.run(read())


@pytest.fixture(scope="module")
def left_early(
    tmp_path_factory: pytest.TempPathFactory,
) -> tuple[str, dict[str, Path], dict[str, tuple[bytes, str]]]:
    folder = tmp_path_factory.mktemp("left-early")
    with Server(held_open) as server:
        url = f"{server.url}/v1/events"
        paths, live = {}, {}
        for name in CLIENTS:
            paths[name] = folder / f"{name}.msgpack"
            with agenttape.use_cassette(paths[name], mode="once"):
                assert first_event_then_close(name, url) == EVENTS[0]
            live[name] = next_event_or_timeout(name, url)
    return url, paths, live


def test_a_stream_left_early_is_still_open_live(
    left_early: tuple[str, dict[str, Path], dict[str, tuple[bytes, str]]],
) -> None:
    _url, paths, live = left_early
    assert live == {
        "httpx": (EVENTS[0], "ReadTimeout"),
        "requests": (EVENTS[0], "ConnectionError"),
        "urllib3": (EVENTS[0], "ReadTimeoutError"),
        "aiohttp": (EVENTS[0], "SocketTimeoutError"),
    }
    for path in paths.values():
        (interaction,) = agenttape.load(path).interactions
        assert interaction.error is None
        assert interaction.response is not None and interaction.response.truncated
        assert interaction.response.body == EVENTS[0]


@pytest.mark.parametrize("options", [{}, {"mode": "new_episodes"}, {"realtime": True}])
@pytest.mark.parametrize("replayed_by", list(CLIENTS))
@pytest.mark.parametrize("recorded_by", ["httpx", "aiohttp"])
def test_a_stream_left_early_stays_open_on_replay(
    left_early: tuple[str, dict[str, Path], dict[str, tuple[bytes, str]]],
    recorded_by: str,
    replayed_by: str,
    options: dict[str, Any],
) -> None:
    url, paths, live = left_early
    before = paths[recorded_by].read_bytes()
    with agenttape.use_cassette(paths[recorded_by], **options) as tape:
        assert next_event_or_timeout(replayed_by, url) == live[replayed_by]
        assert tape.all_played
    assert paths[recorded_by].read_bytes() == before  # nothing reached for the network
