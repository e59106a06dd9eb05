from __future__ import annotations

import datetime as dt
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
import time_machine

import agenttape
from tests.servers import json_reply, loaded

RECORDED_AT = dt.datetime(2026, 3, 14, 9, 30, tzinfo=dt.UTC)


def due_today(order: dict[str, Any]) -> bool:
    """The kind of date logic a replay must see on the original day."""
    return dt.date.fromisoformat(order["due"]) == dt.date.today()


@pytest.fixture
def recorded(cassette_path: Path, serve: Any) -> Path:
    """A run recorded on RECORDED_AT (the clock moved there for the recording)."""
    server = serve(lambda seen: json_reply({"id": 7, "due": "2026-03-14"}))
    with (
        time_machine.travel(RECORDED_AT, tick=True),
        agenttape.use_cassette(cassette_path, mode="once"),
    ):
        httpx.get(f"{server.url}/orders/7")
    server.stop()
    return cassette_path


def _url(cassette: Path) -> str:
    return agenttape.load(cassette).interactions[0].request.url


def test_replay_starts_the_clock_at_the_recorded_start_and_ticks(recorded: Path) -> None:
    header_start = agenttape.load(recorded).metadata["created_at"]
    assert header_start.date() == RECORDED_AT.date()
    with agenttape.use_cassette(recorded, freeze_time=True):
        first = time.time()
        order = httpx.get(_url(recorded)).json()
        assert due_today(order)
        assert dt.date.today() == RECORDED_AT.date()
        assert dt.datetime.now(dt.UTC).date() == RECORDED_AT.date()
        assert first >= header_start.timestamp()
        assert first - header_start.timestamp() < 3600  # the recorded day, not today
        while time.time() == first:
            pass  # ticks: the frozen clock still moves forward
    assert dt.date.today() != RECORDED_AT.date()  # put back at exit


async def test_async_replay_freezes_too(recorded: Path) -> None:
    url = (await loaded(recorded)).interactions[0].request.url
    async with agenttape.use_cassette(recorded, freeze_time=True):
        async with httpx.AsyncClient() as client:
            order = (await client.get(url)).json()
        assert due_today(order)


def test_without_freeze_time_the_replay_sees_today(recorded: Path) -> None:
    with agenttape.use_cassette(recorded):
        assert not due_today(httpx.get(_url(recorded)).json())


def test_recording_never_freezes(cassette_path: Path, serve: Any) -> None:
    server = serve(lambda seen: json_reply({"ok": True}))
    today = dt.date.today()
    with agenttape.use_cassette(cassette_path, mode="all", freeze_time=True):
        httpx.get(server.url)
        assert dt.date.today() == today


def test_missing_time_machine_is_a_clear_error(
    recorded: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "time_machine", None)
    with (
        pytest.raises(agenttape.AgentTapeError, match=r"pip install 'agenttape-recorder\[time\]'"),
        agenttape.use_cassette(recorded, freeze_time=True),
    ):
        pass
