"""Replay served at once: what the clients send is read once per kind of request, but what a
cassette answers is always what the cassette holds now, byte for byte."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import aiohttp
import httpx
import pytest
import requests

import agenttape
from agenttape._adapters import httpx as httpx_adapter
from agenttape._core.models import Response
from tests.servers import Reply, Seen, Server


def _by_header(seen: Seen) -> Reply:
    value = seen.header("X-Pick") or "none"
    return Reply(
        headers=[("Content-Type", "text/plain"), ("X-Answer", f"to-{value}")],
        chunks=[f"picked {value}".encode()],
    )


@pytest.fixture
def server(serve: Any) -> Server:
    started: Server = serve(_by_header)
    return started


MATCH = ["method", "url", "headers:x-pick"]


def _edit(path: Path, index: int, response: Response) -> None:
    """Puts ``response`` in place of interaction ``index``'s, as an edit of the file would."""
    cassette = agenttape.load(path)
    cassette.interactions[index].response = response
    cassette.save()


def _recorded_once(server: Server, cassette_path: Path) -> str:
    """One GET recorded through httpx; its URL."""
    url = server.url + "/same"
    with agenttape.use_cassette(cassette_path, mode="once"), httpx.Client() as client:
        client.get(url, headers={"X-Pick": "a"}).read()
    return url


def test_a_cassette_edited_between_replays_is_served_as_it_is_now(
    server: Server, cassette_path: Path
) -> None:
    url = _recorded_once(server, cassette_path)
    with agenttape.use_cassette(cassette_path), httpx.Client() as client:
        first = client.get(url, headers={"X-Pick": "a"})
    assert (b"X-Answer", b"to-a") in first.headers.raw
    assert first.content == b"picked a"
    _edit(
        cassette_path,
        0,
        Response(202, "Taken", headers=[("x-answer", "\xe9dited"), ("X-More", "1")], body=b"new"),
    )
    with agenttape.use_cassette(cassette_path), httpx.Client() as client:
        second = client.get(url, headers={"X-Pick": "a"})
    assert second.status_code == 202
    assert second.extensions["reason_phrase"] == b"Taken"
    assert second.headers.raw == [(b"x-answer", b"\xe9dited"), (b"X-More", b"1")]
    assert second.content == b"new"


@pytest.mark.parametrize("client", ["httpx", "requests", "aiohttp"])
def test_each_request_is_read_as_sent_though_its_kind_was_seen_before(
    client: str, server: Server, cassette_path: Path
) -> None:
    """The same URL and header names with other values each time: a request read from a kept
    table (httpx's and aiohttp's header sets, requests' known heads) is still matched on its
    own values."""
    url = server.url + "/same"
    picks = ["a", "b", "c", "b", "a"]

    async def fetch(pick: str) -> bytes:
        async with (
            aiohttp.ClientSession() as session,
            session.get(url, headers={"X-Pick": pick}) as response,
        ):
            return await response.read()

    def get(pick: str) -> bytes:
        if client == "httpx":
            with httpx.Client() as session:
                return session.get(url, headers={"X-Pick": pick}).content
        if client == "aiohttp":
            return asyncio.run(fetch(pick))
        return requests_session.get(url, headers={"X-Pick": pick}).content

    requests_session = requests.Session()
    with agenttape.use_cassette(cassette_path, mode="once", match_on=MATCH):
        recorded = [get(pick) for pick in picks]
    assert recorded == [f"picked {pick}".encode() for pick in picks]
    server.stop()
    replay_order = ["c", "a", "b", "a", "b"]
    with agenttape.use_cassette(cassette_path, match_on=MATCH) as cassette:
        replayed = [get(pick) for pick in replay_order]
    assert replayed == [f"picked {pick}".encode() for pick in replay_order]
    assert cassette.all_played


def test_the_tables_of_what_httpx_sends_stay_bounded() -> None:
    for number in range(httpx_adapter._LIMIT + 10):
        request = httpx.Request(
            "GET", f"http://example.test/{number}", headers={"X-N": str(number)}
        )
        model, upgrade = httpx_adapter._to_model(request)
        assert model.url == f"http://example.test/{number}"
        assert ("X-N", str(number)) in model.headers
        assert not upgrade
    assert len(httpx_adapter._SENT_HEADERS) <= httpx_adapter._LIMIT
    assert len(httpx_adapter._URL_TEXTS) <= httpx_adapter._LIMIT


def test_a_replayed_httpx_response_holds_what_its_constructor_sets(
    server: Server, cassette_path: Path
) -> None:
    url = _recorded_once(server, cassette_path)
    with (
        agenttape.use_cassette(cassette_path),
        httpx.Client() as client,
        client.stream("GET", url, headers={"X-Pick": "a"}) as replayed,
    ):
        made = httpx.Response(
            replayed.status_code,
            headers=replayed.headers,
            stream=replayed.stream,
            extensions=replayed.extensions,
            request=replayed.request,
        )
        assert vars(replayed).keys() - {"_elapsed"} == vars(made).keys()
        for name, value in vars(made).items():
            assert getattr(replayed, name) == value, name
        assert replayed.read() == b"picked a"
        assert replayed.headers is not made.headers


def test_a_response_class_whose_constructor_sets_more_makes_every_response() -> None:
    class Richer(httpx.Response):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            self.seen: list[str] = []

    assert httpx_adapter._made_as(httpx.Response) is not None
    assert httpx_adapter._made_as(Richer) is None
