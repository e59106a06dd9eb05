"""The order-lookup failure, re-enacted from the cassette shipped with the example."""

from __future__ import annotations

import hashlib
import shutil
from pathlib import Path

import pytest
from llm_standin import StandIn
from order_lookup import agent, fixed_agent, run, shop

import agenttape

ALICE = "u_alice"


@pytest.fixture
def database(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "shop.sqlite"
    monkeypatch.setattr(shop, "DATABASE", path)
    return path


@pytest.fixture
def cassette(tmp_path: Path) -> Path:
    """A copy of the shipped cassette, so derived cassettes land in the test's directory."""
    copy = tmp_path / "tape" / run.CASSETTE.name
    copy.parent.mkdir()
    shutil.copyfile(run.CASSETTE, copy)
    return copy


def _others_orders() -> list[tuple[object, ...]]:
    return [order for order in shop.ORDERS if order[1] != ALICE]


def _leaks(answer: str) -> list[str]:
    return [
        str(part)
        for order in _others_orders()
        for part in (order[0], order[1], order[4])
        if str(part) in answer
    ]


def test_replay_reenacts_the_wrong_answer_offline_with_the_tool_frozen(database: Path) -> None:
    shipped = hashlib.sha256(run.CASSETTE.read_bytes()).hexdigest()
    answer = run.replay_wrong(run.CASSETTE)
    assert "1042" in answer and "u_bob" in answer and "9 Elm Street" in answer
    assert not database.exists()  # the frozen tool never ran: the database was never opened
    assert hashlib.sha256(run.CASSETTE.read_bytes()).hexdigest() == shipped


def test_fixed_agent_never_returns_another_users_order(database: Path, cassette: Path) -> None:
    answer = run.replay_fixed(cassette)
    assert _leaks(answer) == []
    assert "1017" in answer  # Alice's own kettle order

    derived = agenttape.load(cassette.with_name("wrong_order.derived.msgpack"))
    tool = next(i for i in derived.interactions if i.boundary == "tool:lookup_order")
    assert b'"user_id":"u_alice"' in tool.request.body  # the fixed tool ran, for Alice only
    final = derived.interactions[-1]
    assert final.response is not None
    assert b"1042" in final.response.body  # the pinned model still named Bob's order


def test_fixed_tool_only_returns_the_users_own_orders(database: Path) -> None:
    shop.create(database)
    for user in sorted({order[1] for order in shop.ORDERS} | {"u_nobody"}):
        for product in shop.PRODUCTS:
            found = fixed_agent.lookup_order(product, user)
            assert found is None or found["user_id"] == user


def test_shipped_cassette_is_what_the_standin_answers(database: Path, tmp_path: Path) -> None:
    """Recording again from the stand-in gives the shipped cassette's bodies, byte for byte."""
    fresh_path = tmp_path / "fresh.msgpack"
    run.record(fresh_path, port=0)
    fresh, shipped = agenttape.load(fresh_path), agenttape.load(run.CASSETTE)
    assert [i.boundary for i in fresh.interactions] == [i.boundary for i in shipped.interactions]
    for new, old in zip(fresh.interactions, shipped.interactions, strict=True):
        assert new.request.body == old.request.body
        assert new.response is not None and old.response is not None
        assert new.response.body == old.response.body
        assert new.llm == old.llm
    assert shipped.metadata["tags"] == run.TAGS


def test_rerecording_the_model_live_keeps_the_tool_frozen(database: Path, cassette: Path) -> None:
    """mode='all' with the tool frozen: the LLM calls go to the stand-in again, the tool is
    served from the previous recording and never touches the database."""
    with (
        StandIn() as api,
        agenttape.use_cassette(cassette, mode="all", frozen=["tool:lookup_order"]) as tape,
    ):
        answer = agent.answer(run.client(api.port), ALICE, run.QUESTION)
    assert not database.exists()
    assert "1042" in answer
    assert [i.boundary for i in tape.interactions] == ["http", "tool:lookup_order", "http"]
    assert all(f":{api.port}/" in i.request.url for i in tape.interactions if i.boundary == "http")
