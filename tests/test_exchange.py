"""The exchange seam: a failure replayed from a cassette says where it came from."""

from __future__ import annotations

import asyncio
import traceback
from collections.abc import Callable
from pathlib import Path

import aiohttp
import httpx
import pytest
import requests
import urllib3

import agenttape
from tests.servers import refused_port


def _note(exc: BaseException) -> str:
    notes = [n for n in getattr(exc, "__notes__", ()) if n.startswith("agenttape:")]
    assert len(notes) == 1, notes
    return notes[0]


def _record_refused(path: Path, call: Callable[[], object]) -> None:
    with agenttape.use_cassette(path, mode="once") as tape, pytest.raises(Exception) as live:
        call()
    assert "__notes__" not in vars(live.value)  # the live failure carries no note
    assert tape.interactions[0].error is not None
    assert tape.interactions[0].error.kind == "connect_error"


def test_a_replayed_connect_error_says_it_was_replayed_and_from_where(
    cassette_path: Path,
) -> None:
    url = f"http://127.0.0.1:{refused_port()}/weather?i=0"
    _record_refused(cassette_path, lambda: httpx.get(url))
    recorded = agenttape.load(cassette_path).interactions[0].started
    with (
        pytest.raises(httpx.ConnectError) as caught,
        agenttape.use_cassette(cassette_path, mode="once"),
    ):
        httpx.get(url)
    assert _note(caught.value) == (
        f"agenttape: replayed from cassette {cassette_path}, interaction 0 (GET {url}), "
        f"recorded {recorded:%Y-%m-%d %H:%M:%S} UTC: this connect error happened while "
        "recording, not now. To record it again against the live service: AGENTTAPE_MODE=all "
        "(or mode='all', pytest --agenttape-record, agenttape run --mode all)."
    )
    printed = "".join(traceback.format_exception(caught.value))
    assert printed.rstrip().endswith(_note(caught.value))


def test_every_library_gets_the_note(cassette_path: Path, tmp_path: Path) -> None:
    url = f"http://127.0.0.1:{refused_port()}/weather?i=1"

    def with_urllib3() -> object:
        return urllib3.PoolManager().request("GET", url, retries=False)

    async def fetch() -> None:
        async with aiohttp.ClientSession() as session:
            await session.get(url)

    for name, call, raised in [
        ("urllib3", with_urllib3, urllib3.exceptions.NewConnectionError),
        ("aiohttp", lambda: asyncio.run(fetch()), aiohttp.ClientConnectorError),
    ]:
        path = tmp_path / f"{name}.msgpack"
        _record_refused(path, call)
        with pytest.raises(raised) as caught, agenttape.use_cassette(path):
            call()
        assert f"replayed from cassette {path}, interaction 0 (GET {url})" in _note(caught.value)


def test_requests_shows_the_note_on_the_failure_it_wraps(cassette_path: Path) -> None:
    url = f"http://127.0.0.1:{refused_port()}/weather"
    _record_refused(cassette_path, lambda: requests.get(url))
    with pytest.raises(requests.ConnectionError) as caught, agenttape.use_cassette(cassette_path):
        requests.get(url)
    printed = "".join(traceback.format_exception(caught.value))
    assert f"agenttape: replayed from cassette {cassette_path}, interaction 0" in printed


def test_a_miss_carries_no_replay_note(cassette_path: Path) -> None:
    url = f"http://127.0.0.1:{refused_port()}/weather"
    _record_refused(cassette_path, lambda: httpx.get(url))
    with (
        pytest.raises(agenttape.UnmatchedInteractionError) as caught,
        agenttape.use_cassette(cassette_path),
    ):
        httpx.get(url + "?other=1")
    assert not getattr(caught.value, "__notes__", ())
