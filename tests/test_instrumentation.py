"""Instrumentation of the same clients composes with agenttape, in either order: spans are
still made, with the replayed status, and the wrappers stay; a mocked route is the mock's."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx
import pytest

import agenttape
from tests.instrumentation_support import ANSWER, STATUS, Spans
from tests.servers import json_reply, refused_port

ROOT = Path(__file__).resolve().parent.parent
INSTRUMENTATIONS = [
    "httpx",
    "httpx-async",
    "httpx-client",
    "httpx2",
    "requests",
    "aiohttp",
    "sentry-httpx",
]


@pytest.mark.parametrize("order", ["before", "after"])
@pytest.mark.parametrize("instrumentation", INSTRUMENTATIONS)
def test_spans_are_made_recording_and_replaying_and_wrappers_stay(
    instrumentation: str, order: str, tmp_path: Path
) -> None:
    """Installed before agenttape's first cassette or after it (a process each: which came
    first is decided once per process)."""
    completed = subprocess.run(
        [sys.executable, "-m", "tests.instrumentation_support", instrumentation, order, tmp_path],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert completed.returncode == 0, completed.stderr
    seen = json.loads(completed.stdout.splitlines()[-1])
    assert seen["recorded"] == seen["replayed"] == [STATUS, ANSWER]
    assert (seen["stored"], seen["played"]) == (1, 1)
    assert seen["recording_seen"] == [STATUS]
    assert seen["replay_seen"] == [STATUS]
    assert seen["wrappers_kept"]


def test_a_replayed_error_reaches_the_wrapper_as_the_library_raises_it(
    cassette_path: Path,
) -> None:
    from opentelemetry.instrumentation.httpx import HTTPXClientInstrumentor
    from opentelemetry.trace import StatusCode

    spans = Spans()
    HTTPXClientInstrumentor().instrument(tracer_provider=spans.provider)
    try:
        url = f"http://127.0.0.1:{refused_port()}/down"
        with agenttape.use_cassette(cassette_path, mode="once"), pytest.raises(httpx.ConnectError):
            httpx.get(url)
        with agenttape.use_cassette(cassette_path), pytest.raises(httpx.ConnectError):
            httpx.get(url)
        finished = spans.exporter.get_finished_spans()
    finally:
        HTTPXClientInstrumentor().uninstrument()
    assert [span.status.status_code for span in finished] == [StatusCode.ERROR] * 2
    stored = agenttape.load(cassette_path).interactions[0].error
    assert stored is not None
    assert (stored.kind, stored.type) == ("connect_error", "ConnectError")


def _mocked(request: httpx.Request) -> bool:
    return request.url.host == "mocked.test"


@pytest.mark.httpx_mock(should_mock=_mocked)
def test_pytest_httpx_mocked_route_is_the_mocks_recording_and_replaying(
    httpx_mock: Any, serve: Any, cassette_path: Path
) -> None:
    httpx_mock.add_response(url="http://mocked.test/item", json={"mocked": True}, is_reusable=True)
    server = serve(lambda seen: json_reply({"live": True}))
    live_url = f"{server.url}/live"

    def exchange() -> tuple[Any, Any]:
        with httpx.Client() as client:
            return client.get("http://mocked.test/item").json(), client.get(live_url).json()

    async def exchange_async() -> tuple[Any, Any]:
        async with httpx.AsyncClient() as client:
            mocked = (await client.get("http://mocked.test/item")).json()
            return mocked, (await client.get(live_url)).json()

    with agenttape.use_cassette(cassette_path, mode="once"):
        recorded = [exchange(), asyncio.run(exchange_async())]
    server.stop()
    with agenttape.use_cassette(cassette_path) as tape:
        replayed = [exchange(), asyncio.run(exchange_async())]
        assert tape.all_played
    assert recorded == replayed == [({"mocked": True}, {"live": True})] * 2
    urls = [i.request.url for i in agenttape.load(cassette_path).interactions]
    assert urls == [live_url, live_url]


def test_respx_mocked_route_is_respx_when_replaying(serve: Any, cassette_path: Path) -> None:
    import respx

    server = serve(lambda seen: json_reply({"live": True}))
    live_url = f"{server.url}/live"
    with agenttape.use_cassette(cassette_path, mode="once"):
        assert httpx.get(live_url).json() == {"live": True}
    server.stop()
    with (
        agenttape.use_cassette(cassette_path) as tape,
        respx.mock(assert_all_called=True) as router,
    ):
        router.get("http://mocked.test/item").respond(json={"mocked": True})
        router.route(host="127.0.0.1").pass_through()
        assert httpx.get("http://mocked.test/item").json() == {"mocked": True}
        assert httpx.get(live_url).json() == {"live": True}
        assert tape.all_played
