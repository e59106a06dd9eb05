"""agenttape's own cassettes: the marker, ``use_cassette`` and ``async with``."""

from __future__ import annotations

import httpx
import pytest
import requests
from coexist import ASYNC, MODELS, MODELS_URL, NATIVE

import agenttape


@pytest.mark.agenttape(NATIVE)
def test_marker() -> None:
    response = httpx.get(MODELS_URL, headers={"accept": "application/json"})
    assert response.json() == MODELS


def test_use_cassette() -> None:
    with agenttape.use_cassette(NATIVE):
        response = requests.get(MODELS_URL, headers={"accept": "application/json"})
    assert response.json() == MODELS


@ASYNC
async def test_async_with() -> None:
    async with agenttape.use_cassette(NATIVE), httpx.AsyncClient() as client:
        response = await client.get(MODELS_URL, headers={"accept": "application/json"})
    assert response.json() == MODELS


def test_no_http() -> None:
    assert sorted({3, 1, 2}) == [1, 2, 3]
