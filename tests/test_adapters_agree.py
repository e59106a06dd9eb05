"""Every adapter writes the same exchange down the same way, and any adapter replays what any
other recorded: the rate-limit story (a 429 with half a JSON body and a retry-after header)
recorded through httpx, requests, urllib3 and aiohttp, replayed through each of them."""

from __future__ import annotations

import asyncio
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
    try:
        CLIENTS[name](url)
    except Exception as exc:
        return type(exc).__name__
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
        assert failure_with(replayed_by, url) == live[replayed_by]
