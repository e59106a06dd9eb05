"""A pytest-recording suite's test, as written for it: its YAML cassette replayed by
agenttape's drop-in (by vcrpy itself in the cell where pytest-recording is active)."""

from __future__ import annotations

from typing import Any

import httpx
import pytest
import requests
from coexist import ASYNC, FEATURES, MODELS, MODELS_URL, on

pytestmark = [pytest.mark.vcr, pytest.mark.default_cassette("models.yaml")]


def _served(vcr: Any) -> None:
    """One request played, by the drop-in or, where pytest-recording is active, by vcrpy
    (whose patches then stand in httpx's client)."""
    assert vcr.play_count == 1
    patched = "/vcr/" in httpx.HTTPTransport.handle_request.__code__.co_filename
    assert patched == ("recording" in FEATURES)


def test_httpx(vcr: Any) -> None:
    with httpx.Client() as client:
        response = client.get(MODELS_URL, headers={"accept": "application/json"})
    assert response.status_code == 200
    assert response.json() == MODELS
    _served(vcr)


@ASYNC
async def test_httpx_async(vcr: Any) -> None:
    async with httpx.AsyncClient() as client:
        response = await client.get(MODELS_URL, headers={"accept": "application/json"})
    assert response.json() == MODELS
    _served(vcr)


def test_requests(vcr: Any) -> None:
    response = requests.get(MODELS_URL, headers={"accept": "application/json"})
    assert response.status_code == 200
    assert response.json() == MODELS
    _served(vcr)


@on("inline-snapshot")
def test_inline_snapshot(vcr: Any) -> None:
    from inline_snapshot import snapshot

    response = httpx.get(MODELS_URL, headers={"accept": "application/json"})
    assert response.json() == snapshot(
        {"object": "list", "data": [{"id": "alpha"}, {"id": "beta"}]}
    )
    _served(vcr)
