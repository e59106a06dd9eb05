from __future__ import annotations

import datetime as _dt
from collections.abc import Callable
from pathlib import Path
from typing import Any

import msgpack
import pytest

import agenttape
from agenttape._core import meta
from agenttape._production.durations import parse_since
from agenttape._production.stored_runs import (
    HEAD_BYTES,
    fetch_run,
    list_runs,
)
from agenttape._tools.runs_table import format_runs, parse_tags
from tests.cli_support import write_run
from tests.servers import Server, json_reply

NOW = _dt.datetime.now(_dt.UTC).replace(microsecond=0)


@pytest.fixture
def now() -> _dt.datetime:
    """The test's own present, not the module's: a store written relative to it is as old as
    it says when ``since="30m"`` reads it, however long the suite ran before the test."""
    return _dt.datetime.now(_dt.UTC).replace(microsecond=0)


@pytest.fixture
def store(tmp_path: Path, now: _dt.datetime) -> Path:
    root = tmp_path / "runs"
    write_run(root, "r_old", now - _dt.timedelta(days=3), {"user_id": "u_1", "beta": True})
    write_run(root, "r_hour", now - _dt.timedelta(hours=1), {"user_id": "u_7710", "n": 3}, "raised")
    write_run(root, "r_now", now, {"user_id": "u_7710", "beta": False}, "flagged")
    write_run(root, "r_flat", now - _dt.timedelta(minutes=5), {"user_id": "u_2"}, dated=False)
    return root


def ids(runs: list[Any]) -> list[str]:
    return [info.run_id for info in runs]


def test_lists_every_run_newest_first_with_tags_status_and_size(
    store: Path, now: _dt.datetime
) -> None:
    runs = list_runs(store)
    assert ids(runs) == ["r_now", "r_flat", "r_hour", "r_old"]
    by_id = {info.run_id: info for info in runs}
    assert by_id["r_hour"].status == "raised" and by_id["r_hour"].reasons == ["why r_hour"]
    assert by_id["r_hour"].tags == {"user_id": "u_7710", "n": 3}
    assert by_id["r_old"].size == (store / by_id["r_old"].name).stat().st_size
    assert by_id["r_flat"].name == "r_flat.msgpack"
    assert by_id["r_now"].created_at == now and by_id["r_now"].interactions == 2


def test_filters_by_tag_as_command_line_text(store: Path) -> None:
    assert ids(list_runs(store, tags={"user_id": "u_7710"})) == ["r_now", "r_hour"]
    assert ids(list_runs(store, tags=parse_tags(["user_id=u_7710", "n=3"]))) == ["r_hour"]
    assert ids(list_runs(store, tags={"beta": "true"})) == ["r_old"]
    assert ids(list_runs(store, tags={"beta": False})) == ["r_now"]
    assert ids(list_runs(store, tags={"tenant_id": "t_3"})) == []


def test_filters_by_time_and_by_errors(store: Path, now: _dt.datetime) -> None:
    assert ids(list_runs(store, since=now - _dt.timedelta(hours=2))) == [
        "r_now",
        "r_flat",
        "r_hour",
    ]
    assert ids(list_runs(store, since="30m")) == ["r_now", "r_flat"]
    assert ids(list_runs(store, errors=True)) == ["r_now", "r_hour"]
    assert ids(list_runs(store, errors=True, since="30m", tags={"user_id": "u_7710"})) == ["r_now"]


def test_dated_folders_older_than_since_are_not_read(store: Path) -> None:
    old = store / "2001-01-01"
    old.mkdir()
    (old / "r_ancient.msgpack").write_bytes(b"not a cassette")
    assert "r_ancient" not in ids(list_runs(store, since="1d"))
    [damaged] = [info for info in list_runs(store) if info.run_id == "r_ancient"]
    assert damaged.status == "unreadable" and "not an agenttape cassette" in damaged.reasons[0]
    assert "r_ancient" not in ids(list_runs(store, errors=True))


def test_big_headers_and_other_key_orders_are_read_whole(store: Path) -> None:
    write_run(store, "r_big", NOW, {"user_id": "u_big", "notes": "n" * (2 * HEAD_BYTES)})
    document = {
        "interactions": [],
        "header": {**meta.new_header({"user_id": "u_odd"}, run_id="r_odd"), "created_at": NOW},
        "agenttape": 1,
    }
    (store / "r_odd.msgpack").write_bytes(msgpack.packb(document, datetime=True))
    assert ids(list_runs(store, tags={"user_id": "u_big"})) == ["r_big"]
    assert ids(list_runs(store, tags={"user_id": "u_odd"})) == ["r_odd"]


def test_fetch_copies_one_run_out_byte_for_byte(store: Path, tmp_path: Path) -> None:
    out = tmp_path / "cassettes" / "r_hour.msgpack"
    assert fetch_run(store, "r_hour", out) == out
    [info] = list_runs(store, tags={"n": "3"})
    assert out.read_bytes() == (store / info.name).read_bytes()
    assert agenttape.load(out).metadata["run_id"] == "r_hour"
    fetch_run(store, "r_flat", tmp_path / "flat.msgpack")
    assert agenttape.load(tmp_path / "flat.msgpack").metadata["run_id"] == "r_flat"


def test_fetch_refuses_missing_damaged_and_malformed_runs(store: Path, tmp_path: Path) -> None:
    out = tmp_path / "out.msgpack"
    with pytest.raises(
        agenttape.CassetteNotFoundError, match=r"r_missing is not in store .*agenttape runs"
    ):
        fetch_run(store, "r_missing", out)
    (store / "r_bad.msgpack").write_bytes(b"\x81\xa9agenttape")
    with pytest.raises(agenttape.CassetteFormatError, match=r"r_bad\.msgpack"):
        fetch_run(store, "r_bad", out)
    assert not out.exists()
    with pytest.raises(ValueError, match="not a run id"):
        fetch_run(store, "../r_hour", out)
    with pytest.raises(agenttape.CassetteNotFoundError, match="does not exist"):
        list_runs(tmp_path / "nowhere")


def test_since_accepts_durations_dates_and_times() -> None:
    assert parse_since("90s", now=NOW) == NOW - _dt.timedelta(seconds=90)
    assert parse_since("2h", now=NOW) == NOW - _dt.timedelta(hours=2)
    assert parse_since("1.5d", now=NOW) == NOW - _dt.timedelta(hours=36)
    assert parse_since("1w", now=NOW) == NOW - _dt.timedelta(days=7)
    assert parse_since("2026-11-20") == _dt.datetime(2026, 11, 20, tzinfo=_dt.UTC)
    assert parse_since("2026-11-20T15:00Z") == _dt.datetime(2026, 11, 20, 15, tzinfo=_dt.UTC)
    offset = _dt.timezone(_dt.timedelta(hours=2))
    assert parse_since("2026-11-20T15:00+02:00") == _dt.datetime(2026, 11, 20, 15, tzinfo=offset)
    with pytest.raises(ValueError, match="neither a duration"):
        parse_since("yesterday")
    with pytest.raises(ValueError, match="KEY=VALUE"):
        parse_tags(["user_id"])


def test_table_and_json_views(store: Path, now: _dt.datetime) -> None:
    runs = list_runs(store, tags={"user_id": "u_7710"})
    table = format_runs(runs).splitlines()
    assert table[0].split() == ["created", "(UTC)", "run", "id", "status", "n", "size", "tags"]
    assert "r_now" in table[1] and "flagged" in table[1] and "user_id=u_7710 beta=False" in table[1]
    assert format_runs([]) == "no runs"
    assert runs[0].to_dict()["created_at"] == now.isoformat()
    assert runs[0].to_dict()["tags"] == {"user_id": "u_7710", "beta": False}


# -- the whole story: a production failure found by tag, fetched, replayed as a test ----------


def answer(base_url: str, question: str) -> str:
    """The agent under test: one OpenAI call, key from the environment as usual."""
    import openai

    client = openai.OpenAI(base_url=base_url + "/v1", max_retries=2)
    completion = client.chat.completions.create(
        model="gpt-4o-mini", messages=[{"role": "user", "content": question}]
    )
    return completion.choices[0].message.content or ""


def test_a_production_run_found_by_tag_replays_offline_as_a_test(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from llm_standin import StandIn

    key = "sk-proj-" + "Pr0ductionKeyThatMustNeverLeak01"
    monkeypatch.setenv("OPENAI_API_KEY", key)
    store = tmp_path / "runs"
    standin = StandIn(rate_limit_first=1)  # the 3 PM rate limit hits the first caller
    answers = {}
    with agenttape.Recorder(store, keep="errors") as recorder:
        for user_id in ("u_7710", "u_1001", "u_2002"):
            with recorder.run(user_id=user_id, tenant_id="t_3"):
                answers[user_id] = answer(standin.url, "Where is my order? It is late.")
    [found] = list_runs(store, tags=parse_tags(["user_id=u_7710"]))
    assert found.status == "failed" and found.reasons[0].startswith("HTTP 429 from POST")
    assert list_runs(store, tags={"user_id": "u_1001"}) == []  # healthy runs were not kept

    cassette = tmp_path / "cassettes" / f"{found.run_id}.msgpack"
    fetch_run(store, found.run_id, cassette)
    assert key.encode() not in cassette.read_bytes()
    standin.stop()  # offline from here on
    monkeypatch.delenv("OPENAI_API_KEY")

    with agenttape.use_cassette(cassette, mode="none") as tape:
        replayed = answer(standin.url, "Where is my order? It is late.")
    assert replayed == answers["u_7710"]
    assert tape.all_played and [i.response.status for i in tape.interactions if i.response] == [
        429,
        200,
    ]


def test_runs_written_by_a_recorder_list_and_fetch(
    serve: Callable[..., Server], tmp_path: Path
) -> None:
    import httpx

    server = serve(lambda seen: json_reply({"ok": True}))
    with (
        agenttape.Recorder(tmp_path / "runs", keep="all") as recorder,
        recorder.run(run_id="r_8821", user_id="u_7710") as run,
    ):
        httpx.get(server.url + "/x")
    [info] = list_runs(tmp_path / "runs", tags={"user_id": "u_7710"})
    assert (info.run_id, info.status, info.interactions) == ("r_8821", "ok", 1)
    assert info.created_at == run.started
    fetch_run(tmp_path / "runs", "r_8821", tmp_path / "r_8821.msgpack")
    assert len(agenttape.load(tmp_path / "r_8821.msgpack").interactions) == 1
