"""A frozen clock (time-machine, freezegun) does not stall a replay, sync or async."""

from __future__ import annotations

import datetime
import time
from typing import Any

import httpx
import requests
from coexist import ASYNC, MODELS, MODELS_URL, NATIVE, on

import agenttape

FROZEN = datetime.datetime(2024, 1, 1, tzinfo=datetime.UTC)


def _replays() -> None:
    with agenttape.use_cassette(NATIVE, allow_repeats=True):
        assert httpx.get(MODELS_URL, headers={"accept": "application/json"}).json() == MODELS
        assert requests.get(MODELS_URL, headers={"accept": "application/json"}).json() == MODELS


async def _replays_async() -> None:
    async with agenttape.use_cassette(NATIVE), httpx.AsyncClient() as client:
        response = await client.get(MODELS_URL, headers={"accept": "application/json"})
    assert response.json() == MODELS


@on("time-machine")
def test_time_machine(time_machine: Any) -> None:
    time_machine.move_to(FROZEN, tick=False)
    _replays()
    assert time.time() == FROZEN.timestamp()


@on("time-machine")
@ASYNC
async def test_time_machine_async() -> None:
    import time_machine

    with time_machine.travel(FROZEN, tick=False):
        await _replays_async()
        assert time.time() == FROZEN.timestamp()


@on("freezegun")
def test_freezegun() -> None:
    from freezegun import freeze_time

    with freeze_time(FROZEN):
        _replays()
        assert time.time() == FROZEN.timestamp()


@on("freezegun")
@ASYNC
async def test_freezegun_async() -> None:
    from freezegun import freeze_time

    with freeze_time(FROZEN):
        await _replays_async()
        assert time.time() == FROZEN.timestamp()
