"""Each plugin doing its work beside agenttape, a replay inside where it applies: these run
only in the cells that turn their plugin on, and prove it acts."""

from __future__ import annotations

import os
import socket
import time
from typing import Any

import httpx
import pytest
from coexist import ASYNC, MODELS, MODELS_URL, NATIVE, on
from hypothesis import given, settings
from hypothesis import strategies as st

import agenttape

attempts: dict[str, int] = {}


def _replay() -> Any:
    with agenttape.use_cassette(NATIVE):
        return httpx.get(MODELS_URL, headers={"accept": "application/json"}).json()


@on("syrupy")
def test_syrupy(snapshot: Any) -> None:
    assert _replay() == snapshot


@on("hypothesis")
@settings(max_examples=10, deadline=None)
@given(st.text(max_size=8))
def test_hypothesis(suffix: str) -> None:
    assert _replay() == MODELS
    assert isinstance(suffix, str)


@on("rerunfailures")
@pytest.mark.flaky(reruns=2)
def test_passes_when_run_again(request: pytest.FixtureRequest) -> None:
    attempts[request.node.nodeid] = attempts.get(request.node.nodeid, 0) + 1
    assert _replay() == MODELS
    assert attempts[request.node.nodeid] > 1, "fails the first time: rerun"


@on("socket")
def test_socket_blocked() -> None:
    from pytest_socket import SocketBlockedError

    with pytest.raises(SocketBlockedError):
        socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    assert _replay() == MODELS


@on("blockbuster")
@ASYNC
async def test_blockbuster_guards() -> None:
    from blockbuster import BlockingError

    with pytest.raises(BlockingError):
        time.sleep(0.001)


@on("xdist")
def test_in_a_worker() -> None:
    assert os.environ.get("PYTEST_XDIST_WORKER", "").startswith("gw")
    assert _replay() == MODELS


@on("cov")
def test_measured() -> None:
    import coverage

    assert coverage.Coverage.current() is not None
    assert _replay() == MODELS


@on("timeout")
def test_timeout_set(request: pytest.FixtureRequest) -> None:
    assert float(request.config.getoption("timeout")) > 0
    assert _replay() == MODELS


@on("randomly")
def test_random_order(request: pytest.FixtureRequest) -> None:
    assert isinstance(request.config.getoption("randomly_seed"), int)
    assert _replay() == MODELS


@on("anyio")
@pytest.mark.anyio
async def test_anyio(anyio_backend: str) -> None:
    assert anyio_backend == "asyncio"
    async with agenttape.use_cassette(NATIVE), httpx.AsyncClient() as client:
        response = await client.get(MODELS_URL, headers={"accept": "application/json"})
    assert response.json() == MODELS
