"""pytest-asyncio's auto mode: an async test with no marker at all (collected only in the
cells that turn auto mode on)."""

from __future__ import annotations

import httpx
from coexist import MODELS, MODELS_URL, NATIVE

import agenttape


async def test_unmarked() -> None:
    async with agenttape.use_cassette(NATIVE), httpx.AsyncClient() as client:
        response = await client.get(MODELS_URL, headers={"accept": "application/json"})
    assert response.json() == MODELS
