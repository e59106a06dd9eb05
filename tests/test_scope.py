from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import httpx
import pytest

import agenttape
from agenttape._core.models import Request
from agenttape._core.scope import Scope
from tests.servers import Seen, json_reply

tool_runs: list[dict[str, Any]] = []


@agenttape.boundary("refund")
def refund(order_id: int, amount: float) -> dict[str, Any]:
    """A dangerous tool: every real run is visible in ``tool_runs``."""
    tool_runs.append({"order_id": order_id, "amount": amount})
    return {"refunded": amount, "order_id": order_id}


@pytest.fixture(autouse=True)
def _clear() -> None:
    tool_runs.clear()


def _echo(seen: Seen) -> Any:
    return json_reply({"path": seen.path, "query": dict(seen.query)})


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.mark.parametrize(
    ("pattern", "boundary", "url", "expected"),
    [
        ("api.openai.com", "http", "https://api.openai.com/v1/chat/completions", True),
        ("api.openai.com", "http", "https://eu.api.openai.com/v1/x", False),
        ("*.anthropic.com", "http", "https://api.anthropic.com/v1/messages", True),
        ("*.anthropic.com", "http", "https://anthropic.com/", False),
        ("127.0.0.1:8765", "http", "http://127.0.0.1:8765/v1", True),
        ("127.0.0.1:8765", "http", "http://127.0.0.1:9999/v1", False),
        ("API.OpenAI.com", "http", "https://api.openai.com/", True),
        ("tool:lookup_order", "tool:lookup_order", "tool://lookup_order", True),
        ("lookup_order", "tool:lookup_order", "tool://lookup_order", True),
        ("tool:lookup_*", "tool:lookup_order", "tool://lookup_order", True),
        ("tool:lookup_order", "tool:refund", "tool://refund", False),
        ("tool:lookup_order", "http", "http://lookup_order/", False),
    ],
)
def test_patterns(pattern: str, boundary: str, url: str, expected: bool) -> None:
    assert Scope([pattern]).matches(boundary, Request("GET", url)) is expected


def test_bad_pattern_is_refused() -> None:
    with pytest.raises(ValueError, match="live/frozen pattern"):
        agenttape.use_cassette("x.msgpack", frozen=["https://api.openai.com/v1"])


def test_frozen_tool_never_runs_while_http_records_live(cassette_path: Path, serve: Any) -> None:
    server = serve(_echo)
    with agenttape.use_cassette(cassette_path, mode="once"):
        httpx.get(f"{server.url}/plan")
        refund(7, 12.5)
    assert len(tool_runs) == 1 and len(server.seen) == 1

    # Re-record everything, but the refund tool stays frozen: served from the last recording.
    with agenttape.use_cassette(cassette_path, mode="all", frozen=["tool:refund"]):
        assert httpx.get(f"{server.url}/plan?v=2").json()["query"] == {"v": "2"}
        assert refund(7, 12.5) == {"refunded": 12.5, "order_id": 7}
    assert len(tool_runs) == 1  # not run again
    assert len(server.seen) == 2  # the HTTP call did record live

    # The new recording is complete: it replays without the server and without the tool.
    server.stop()
    with agenttape.use_cassette(cassette_path) as replay:
        httpx.get(f"{server.url}/plan?v=2")
        assert refund(7, 12.5)["refunded"] == 12.5
    assert replay.all_played
    assert [i.boundary for i in replay.interactions] == ["http", "tool:refund"]
    assert len(tool_runs) == 1


@pytest.mark.parametrize("mode", ["all", "new_episodes", "none"])
def test_frozen_miss_raises_in_every_mode_and_never_runs(cassette_path: Path, mode: str) -> None:
    with agenttape.use_cassette(cassette_path, mode="once"):
        refund(7, 12.5)
    tool_runs.clear()
    with (
        agenttape.use_cassette(cassette_path, mode=mode, frozen=["refund"]),
        pytest.raises(agenttape.UnmatchedInteractionError) as miss,
    ):
        refund(7, 99.0)
    assert tool_runs == []
    assert "frozen" in str(miss.value)
    assert "body.amount: expected 12.5, got 99.0" in str(miss.value)


def test_frozen_with_nothing_recorded_raises(cassette_path: Path) -> None:
    with (
        agenttape.use_cassette(cassette_path, mode="once", frozen=["tool:refund"]),
        pytest.raises(agenttape.UnmatchedInteractionError, match="frozen"),
    ):
        refund(1, 1.0)
    assert tool_runs == []


def test_frozen_host_is_served_from_the_cassette_while_recording(
    cassette_path: Path, serve: Any
) -> None:
    frozen_server = serve(_echo)
    live_server = serve(_echo)
    with agenttape.use_cassette(cassette_path, mode="once"):
        httpx.get(f"{frozen_server.url}/payments")
        httpx.get(f"{live_server.url}/search")
    frozen_server.stop()
    with agenttape.use_cassette(
        cassette_path, mode="all", frozen=[f"127.0.0.1:{frozen_server.port}"]
    ) as tape:
        assert httpx.get(f"{frozen_server.url}/payments").json()["path"] == "/payments"
        httpx.get(f"{live_server.url}/search")
    assert len(live_server.seen) == 2
    assert len(tape.interactions) == 2


def test_live_reruns_changed_requests_into_a_derived_cassette(
    cassette_path: Path, serve: Any
) -> None:
    server = serve(_echo)
    with agenttape.use_cassette(cassette_path, mode="once", tags={"user_id": "u_1", "n": 1}):
        httpx.get(f"{server.url}/orders/1")
        httpx.get(f"{server.url}/search?q=kettle")
    before = _sha(cassette_path)
    assert len(server.seen) == 2

    with agenttape.use_cassette(
        cassette_path, live=[f"127.0.0.1:{server.port}"], tags={"n": 2}
    ) as tape:
        assert httpx.get(f"{server.url}/orders/1").json()["path"] == "/orders/1"
        assert httpx.get(f"{server.url}/search?q=teapot").json()["query"] == {"q": "teapot"}
    assert len(server.seen) == 3  # only the changed request ran for real
    assert server.seen[-1].query == [("q", "teapot")]
    assert _sha(cassette_path) == before  # the original is byte for byte untouched

    derived_path = cassette_path.with_name("tape.derived.msgpack")
    assert tape.derived_path == derived_path
    derived = agenttape.load(derived_path)
    assert [i.request.url for i in derived.interactions] == [
        f"{server.url}/orders/1",
        f"{server.url}/search?q=teapot",
    ]
    assert derived.metadata["derived_from"]["path"] == str(cassette_path)
    assert derived.metadata["derived_from"]["run_id"] == tape.metadata["run_id"]
    assert derived.metadata["run_id"] != tape.metadata["run_id"]
    assert derived.metadata["tags"] == {"user_id": "u_1", "n": 2}  # the original's, updated

    # The derived cassette re-enacts the new run on its own, offline.
    server.stop()
    with agenttape.use_cassette(derived_path) as replay:
        httpx.get(f"{server.url}/orders/1")
        httpx.get(f"{server.url}/search?q=teapot")
    assert replay.all_played


def test_live_tool_with_changed_input_runs_for_real(cassette_path: Path) -> None:
    with agenttape.use_cassette(cassette_path, mode="once"):
        refund(7, 12.5)
    before = _sha(cassette_path)
    tool_runs.clear()
    with agenttape.use_cassette(cassette_path, live=["tool:refund"]) as tape:
        assert refund(7, 12.5)["refunded"] == 12.5  # replayed
        assert refund(8, 3.0)["refunded"] == 3.0  # changed input: runs
    assert tool_runs == [{"order_id": 8, "amount": 3.0}]
    assert _sha(cassette_path) == before
    derived = agenttape.load(tape.derived_path)
    assert [json.loads(i.request.body) for i in derived.interactions] == [
        {"amount": 12.5, "order_id": 7},
        {"amount": 3.0, "order_id": 8},
    ]


def test_live_does_not_open_what_it_does_not_name(cassette_path: Path, serve: Any) -> None:
    server = serve(_echo)
    with agenttape.use_cassette(cassette_path, mode="once"):
        httpx.get(f"{server.url}/a")
    before = _sha(cassette_path)
    with (
        agenttape.use_cassette(cassette_path, live=["api.openai.com", "tool:refund"]) as tape,
        pytest.raises(agenttape.UnmatchedInteractionError),
    ):
        httpx.get(f"{server.url}/b")
    assert len(server.seen) == 1
    assert not tape.derived_path.exists()
    assert _sha(cassette_path) == before


def test_live_writes_nothing_when_nothing_changed(cassette_path: Path, serve: Any) -> None:
    server = serve(_echo)
    with agenttape.use_cassette(cassette_path, mode="once"):
        httpx.get(f"{server.url}/a")
    with agenttape.use_cassette(cassette_path, live=["127.0.0.1:*"]) as tape:
        httpx.get(f"{server.url}/a")
    assert not tape.derived_path.exists()
