"""An agent that raises inside the block still has every completed interaction written."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest

import agenttape
from tests.servers import Server, path_app, path_body


class AgentFailed(Exception):
    pass


def urls_of(path: Path) -> list[str]:
    return [i.request.url for i in agenttape.load(path).interactions]


def test_sync_block_that_raises_keeps_completed_interactions(
    serve: Callable[..., Server], cassette_path: Path
) -> None:
    server = serve(path_app())
    with (
        pytest.raises(AgentFailed),
        agenttape.use_cassette(cassette_path, mode="all"),
        httpx.Client() as client,
    ):
        for index in range(3):
            client.get(f"{server.url}/step/{index}")
        raise AgentFailed
    assert urls_of(cassette_path) == [f"{server.url}/step/{i}" for i in range(3)]
    for interaction in agenttape.load(cassette_path).interactions:
        assert interaction.response is not None
        assert interaction.response.body == path_body(
            interaction.request.url[len(server.url) :], 64
        )


async def test_async_block_that_raises_keeps_completed_interactions(
    serve: Callable[..., Server], cassette_path: Path
) -> None:
    server = serve(path_app())
    with pytest.raises(AgentFailed):
        async with agenttape.use_cassette(cassette_path, mode="all"), httpx.AsyncClient() as client:
            await client.get(f"{server.url}/a")
            await client.get(f"{server.url}/b")
            raise AgentFailed
    assert await asyncio.to_thread(urls_of, cassette_path) == [f"{server.url}/a", f"{server.url}/b"]


def test_decorated_function_that_raises_keeps_completed_interactions(
    serve: Callable[..., Server], cassette_path: Path
) -> None:
    server = serve(path_app())

    @agenttape.use_cassette(cassette_path, mode="all")
    def agent() -> None:
        httpx.get(f"{server.url}/one")
        raise AgentFailed

    with pytest.raises(AgentFailed):
        agent()
    assert urls_of(cassette_path) == [f"{server.url}/one"]


def test_keyboard_interrupt_keeps_completed_interactions(
    serve: Callable[..., Server], cassette_path: Path
) -> None:
    server = serve(path_app())
    with pytest.raises(KeyboardInterrupt), agenttape.use_cassette(cassette_path, mode="all"):
        httpx.get(f"{server.url}/before-interrupt")
        raise KeyboardInterrupt
    assert urls_of(cassette_path) == [f"{server.url}/before-interrupt"]


def test_stream_cut_short_by_an_exception_is_kept_as_truncated(
    serve: Callable[..., Server], cassette_path: Path
) -> None:
    size = 1024 * 1024  # far more than one read: the exception comes with most of it unread
    server = serve(path_app(size))
    with (
        pytest.raises(AgentFailed),
        agenttape.use_cassette(cassette_path, mode="all"),
        httpx.Client() as client,
    ):
        client.get(f"{server.url}/done")
        with client.stream("GET", f"{server.url}/streaming") as response:
            first = next(response.iter_raw(1024))
            raise AgentFailed
    done, streaming = agenttape.load(cassette_path).interactions
    assert done.response is not None and not done.response.truncated
    assert streaming.response is not None and streaming.response.truncated
    assert streaming.response.body.startswith(first)
    assert len(streaming.response.body) < size
    assert path_body("/streaming", size).startswith(streaming.response.body)


def test_new_episodes_block_that_raises_appends_what_it_recorded(
    serve: Callable[..., Server], cassette_path: Path
) -> None:
    server = serve(path_app())
    with agenttape.use_cassette(cassette_path, mode="once"):
        httpx.get(f"{server.url}/old")
    with pytest.raises(AgentFailed), agenttape.use_cassette(cassette_path, mode="new_episodes"):
        httpx.get(f"{server.url}/old")
        httpx.get(f"{server.url}/new")
        raise AgentFailed
    assert urls_of(cassette_path) == [f"{server.url}/old", f"{server.url}/new"]
    assert len(server.seen) == 2
