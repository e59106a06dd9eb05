from __future__ import annotations

import datetime as dt
import json
import sqlite3
import sys
from pathlib import Path
from typing import Any

import httpx
import pytest

import agenttape
from tests.servers import json_reply


class OrderNotFound(LookupError):
    pass


class ToolFailure(Exception):
    def __init__(self, code: int, detail: str) -> None:
        super().__init__(code, detail)
        self.code = code

    def __str__(self) -> str:
        return f"tool failed with {self.code}: {self.args[1]}"


calls: list[str] = []


@agenttape.boundary("lookup_order")
def lookup_order(order_id: int, *, user_id: str | None = None) -> dict[str, Any]:
    calls.append(f"lookup_order {order_id} {user_id}")
    if order_id == 0:
        raise OrderNotFound(f"no order {order_id}")
    return {
        "order_id": order_id,
        "user_id": user_id,
        "items": ("kettle", "mug"),
        "receipt": b"\x00\xffraw",
        "placed": dt.datetime(2026, 11, 2, 9, 30, tzinfo=dt.UTC),
        "by_size": {1: "small", 2: "large"},
        "price": 12.5,
    }


@agenttape.boundary("fetch_status")
async def fetch_status(order_id: int) -> str:
    calls.append(f"fetch_status {order_id}")
    if order_id < 0:
        raise ToolFailure(503, "backend down")
    return "shipped"


@agenttape.boundary("nothing")
def nothing() -> None:
    calls.append("nothing")


@pytest.fixture(autouse=True)
def _clear_calls() -> None:
    calls.clear()


def test_without_a_cassette_the_function_just_runs() -> None:
    assert lookup_order(7)["order_id"] == 7
    assert calls == ["lookup_order 7 None"]


def test_sync_boundary_records_arguments_and_result_and_replays_without_running(
    cassette_path: Path,
) -> None:
    with agenttape.use_cassette(cassette_path, mode="once"):
        live = lookup_order(7, user_id="u_1")
        assert nothing() is None
    assert calls == ["lookup_order 7 u_1", "nothing"]

    tape = agenttape.load(cassette_path)
    first = tape.interactions[0]
    assert first.boundary == "tool:lookup_order"
    assert first.request.method == "CALL"
    assert first.request.url == "tool://lookup_order"
    assert json.loads(first.request.body) == {"order_id": 7, "user_id": "u_1"}
    assert first.response is not None and first.response.status == 200
    assert first.error is None and first.llm is None
    assert first.ttfb is not None and first.duration is not None

    calls.clear()
    with agenttape.use_cassette(cassette_path) as replay:
        # Keyword or positional: the arguments are bound to their names before matching.
        again = lookup_order(order_id=7, user_id="u_1")
        assert nothing() is None
    assert calls == []
    assert replay.all_played
    assert again == {**live, "items": ["kettle", "mug"]}  # tuples come back as lists
    assert list(again) == list(live)  # dict order kept: code that serialises it sees the same
    assert again["receipt"] == b"\x00\xffraw"
    assert again["placed"] == dt.datetime(2026, 11, 2, 9, 30, tzinfo=dt.UTC)
    assert again["by_size"] == {1: "small", 2: "large"}


async def test_async_boundary_records_and_replays_without_running(cassette_path: Path) -> None:
    async with agenttape.use_cassette(cassette_path, mode="once"):
        assert await fetch_status(7) == "shipped"
    assert calls == ["fetch_status 7"]
    calls.clear()
    async with agenttape.use_cassette(cassette_path) as replay:
        assert await fetch_status(7) == "shipped"
    assert calls == []
    assert replay.play_count == 1


def test_raised_exception_is_replayed_as_the_same_type_and_message(cassette_path: Path) -> None:
    with agenttape.use_cassette(cassette_path, mode="once"), pytest.raises(OrderNotFound) as live:
        lookup_order(0)
    with agenttape.use_cassette(cassette_path), pytest.raises(OrderNotFound) as replayed:
        lookup_order(0)
    assert calls == ["lookup_order 0 None"]
    assert type(replayed.value) is OrderNotFound
    assert str(replayed.value) == str(live.value) == "no order 0"
    assert not hasattr(live.value, "__notes__")
    (note,) = replayed.value.__notes__
    assert note.startswith(f"agenttape: replayed from cassette {cassette_path}, interaction 0 (")
    assert "this exception happened while recording, not now" in note
    recorded = agenttape.load(cassette_path).interactions[0]
    assert recorded.error is not None
    assert recorded.error.kind == "raised"
    assert recorded.error.type == "tests.test_boundary:OrderNotFound"


async def test_exception_with_several_arguments_and_its_own_str(cassette_path: Path) -> None:
    async with agenttape.use_cassette(cassette_path, mode="once"):
        with pytest.raises(ToolFailure):
            await fetch_status(-1)
    async with agenttape.use_cassette(cassette_path):
        with pytest.raises(ToolFailure) as replayed:
            await fetch_status(-1)
    assert replayed.value.args == (503, "backend down")
    assert replayed.value.code == 503
    assert str(replayed.value) == "tool failed with 503: backend down"
    assert calls == ["fetch_status -1"]


def test_builtin_exception_with_a_non_message_argument(cassette_path: Path) -> None:
    @agenttape.boundary("read_setting")
    def read_setting(name: str) -> str:
        return {"region": "eu"}[name]

    with agenttape.use_cassette(cassette_path, mode="once"), pytest.raises(KeyError) as live:
        read_setting("colour")
    with agenttape.use_cassette(cassette_path), pytest.raises(KeyError) as replayed:
        read_setting("colour")
    assert replayed.value.args == live.value.args == ("colour",)
    assert str(replayed.value) == str(live.value)


def test_changed_arguments_miss_with_the_argument_named(cassette_path: Path) -> None:
    with agenttape.use_cassette(cassette_path, mode="once"):
        lookup_order(7, user_id="u_1")
    calls.clear()
    with (
        agenttape.use_cassette(cassette_path),
        pytest.raises(agenttape.UnmatchedInteractionError) as miss,
    ):
        lookup_order(7, user_id="u_2")
    assert calls == []
    message = str(miss.value)
    assert "CALL tool://lookup_order" in message
    assert "body.user_id: expected 'u_1', got 'u_2'" in message


def test_identical_calls_replay_in_recorded_order(cassette_path: Path) -> None:
    counter = iter(range(10))

    @agenttape.boundary("next_ticket")
    def next_ticket() -> int:
        return next(counter)

    with agenttape.use_cassette(cassette_path, mode="once"):
        assert [next_ticket(), next_ticket(), next_ticket()] == [0, 1, 2]
    with agenttape.use_cassette(cassette_path):
        assert [next_ticket(), next_ticket(), next_ticket()] == [0, 1, 2]
        with pytest.raises(agenttape.UnmatchedInteractionError, match="already played"):
            next_ticket()


def test_unserialisable_argument_raises_type_error_naming_boundary_and_type(
    cassette_path: Path,
) -> None:
    connection = sqlite3.connect(":memory:")

    @agenttape.boundary("run_query")
    def run_query(db: Any, sql: str) -> list[Any]:
        calls.append("run_query")
        return list(db.execute(sql))

    with agenttape.use_cassette(cassette_path, mode="once"):
        with pytest.raises(TypeError) as error:
            run_query(connection, "select 1")
        assert calls == []  # refused before it ran
        message = str(error.value)
        assert "boundary 'run_query'" in message
        assert "argument 'db'" in message
        assert "sqlite3.Connection" in message
    connection.close()


def test_unserialisable_result_raises_type_error_with_its_path(cassette_path: Path) -> None:
    @agenttape.boundary("make_report")
    def make_report() -> dict[str, Any]:
        return {"rows": [1, {"when": dt.date(2026, 1, 2)}]}

    with agenttape.use_cassette(cassette_path, mode="once") as tape:
        with pytest.raises(TypeError) as error:
            make_report()
        assert tape.interactions == []
    message = str(error.value)
    assert "boundary 'make_report': return value at rows[1].when" in message
    assert "datetime.date" in message


def test_methods_leave_the_instance_out_of_the_record(cassette_path: Path) -> None:
    class Orders:
        def __init__(self) -> None:
            self.connection = sqlite3.connect(":memory:")

        @agenttape.boundary("orders.count")
        def count(self, user_id: str) -> int:
            calls.append("count")
            return len(user_id)

    orders = Orders()
    with agenttape.use_cassette(cassette_path, mode="once"):
        assert orders.count("u_123") == 5
    with agenttape.use_cassette(cassette_path):
        assert Orders().count("u_123") == 5
    assert calls == ["count"]
    assert json.loads(agenttape.load(cassette_path).interactions[0].request.body) == {
        "user_id": "u_123"
    }
    orders.connection.close()


def test_http_inside_a_recording_boundary_belongs_to_the_boundary(
    cassette_path: Path, serve: Any
) -> None:
    server = serve(lambda seen: json_reply({"stock": 3}))

    @agenttape.boundary("stock")
    def stock(sku: str) -> int:
        return int(httpx.get(f"{server.url}/stock/{sku}").json()["stock"])

    with agenttape.use_cassette(cassette_path, mode="once"):
        assert stock("kettle") == 3
    server.stop()
    tape = agenttape.load(cassette_path)
    assert [i.boundary for i in tape.interactions] == ["tool:stock"]
    with agenttape.use_cassette(cassette_path) as replay:
        assert stock("kettle") == 3
    assert replay.all_played


def test_boundary_needs_a_name() -> None:
    with pytest.raises(ValueError, match="boundary needs a name"):
        agenttape.boundary("")


def test_a_callable_without_a_signature_records_positions_and_keywords(
    cassette_path: Path,
) -> None:
    maximum = agenttape.boundary("maximum")(max)  # a builtin: no inspectable signature
    with agenttape.use_cassette(cassette_path, mode="once"):
        assert maximum(3, 9, 4) == 9
    recorded = agenttape.load(cassette_path).interactions[0]
    assert json.loads(recorded.request.body) == {"args": [3, 9, 4], "kwargs": {}}
    with agenttape.use_cassette(cassette_path) as replay:
        assert maximum(3, 9, 4) == 9
    assert replay.all_played


def test_replay_never_imports_a_module_named_by_the_cassette(cassette_path: Path) -> None:
    @agenttape.boundary("fails")
    def fails() -> None:
        raise OrderNotFound("gone")

    with agenttape.use_cassette(cassette_path, mode="once"), pytest.raises(OrderNotFound):
        fails()
    tape = agenttape.load(cassette_path)
    error = tape.interactions[0].error
    assert error is not None
    error.type = "antigravity:Exception"  # a module with side effects on import
    tape.save()
    with agenttape.use_cassette(cassette_path), pytest.raises(Exception) as replayed:
        fails()
    assert "antigravity" not in sys.modules
    assert type(replayed.value).__name__ == "Exception"
    assert type(replayed.value).__module__ == "antigravity"
    assert str(replayed.value) == "gone"
