"""``max_age`` and ``on_expired``: a cassette older than its age says so, fails, or is
recorded again, counted from its recorded time (not the file's), whatever a test does to the
clock."""

from __future__ import annotations

import datetime as _dt
import inspect
import os
import textwrap
import time
import warnings
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest
import time_machine

import agenttape
from agenttape._core import files
from agenttape._core.age import parse_age
from agenttape._core.errors import AgentTapeError, AgentTapeWarning
from agenttape._core.meta import new_header
from agenttape._core.models import Interaction, Request, Response
from agenttape._core.wire import codec
from tests.servers import Server, json_reply
from tests.test_pytest_plugin import INI, run

pytest_plugins = ["pytester"]


def age_by(path: Path, days: float) -> None:
    """Moves the cassette's recorded time ``days`` back; its file is written now."""
    header, interactions = files.read(path)
    header["created_at"] -= _dt.timedelta(days=days)
    path.write_bytes(codec.encode(header, interactions))


@pytest.fixture
def recorded(tmp_path: Path, serve: Callable[..., Server]) -> tuple[Path, Server]:
    server = serve(lambda seen: json_reply({"ok": True}))
    path = tmp_path / "tape.msgpack"
    with agenttape.use_cassette(path, mode="once"):
        httpx.get(f"{server.url}/status")
    return path, server


def replay(path: Path, server: Server, **options: object) -> None:
    with agenttape.use_cassette(path, **options):  # type: ignore[arg-type]
        assert httpx.get(f"{server.url}/status").json() == {"ok": True}


def test_an_old_recording_warns_by_its_recorded_time_not_its_file(
    recorded: tuple[Path, Server],
) -> None:
    path, server = recorded
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        old_file = time.time() - 400 * 86400
        os.utime(path, (old_file, old_file))  # a file a year old, a recording of today
        replay(path, server, max_age="90d")
    age_by(path, 100)  # the file written just now, the recording 100 days old
    with pytest.warns(AgentTapeWarning) as caught:
        replay(path, server, max_age="90d")
    assert str(caught[0].message) == (
        f"cassette {path} was recorded 100 days ago, more than its max_age of 90 days; "
        "record it again (pytest --agenttape-record), or pass on_expired='rerecord'"
    )


def test_fail_refuses_an_old_recording(recorded: tuple[Path, Server]) -> None:
    path, server = recorded
    age_by(path, 3)
    with pytest.raises(AgentTapeError, match=r"recorded 3 days ago, more than its max_age of 2"):
        replay(path, server, max_age=_dt.timedelta(days=2), on_expired="fail")


def test_rerecord_records_again_when_the_host_answers(recorded: tuple[Path, Server]) -> None:
    path, server = recorded
    age_by(path, 10)
    seen = len(server.seen)
    with pytest.warns(AgentTapeWarning, match="recording it again"):
        replay(path, server, max_age="1w", on_expired="rerecord")
    assert len(server.seen) == seen + 1
    header, _ = files.read(path)
    assert (_dt.datetime.now(_dt.UTC) - header["created_at"]).total_seconds() < 3600
    assert path.with_name("tape.previous.msgpack").exists()


def test_rerecord_replays_with_a_warning_when_the_host_is_down(
    recorded: tuple[Path, Server],
) -> None:
    path, server = recorded
    age_by(path, 10)
    server.stop()
    before = path.read_bytes()
    with pytest.warns(AgentTapeWarning, match=r"not recorded again now \(127.0.0.1:\d+ does not"):
        replay(path, server, max_age="1w", on_expired="rerecord")
    assert path.read_bytes() == before


def test_rerecord_needs_the_providers_key(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "openai.msgpack"
    old = new_header()
    old["created_at"] -= _dt.timedelta(days=30)
    call = Interaction(Request("GET", "https://api.openai.com/v1/models"), Response(200))
    path.write_bytes(codec.encode(old, [call]))
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    with (
        pytest.warns(AgentTapeWarning, match=r"\(OPENAI_API_KEY is not set\), replayed as it is"),
        agenttape.use_cassette(path, max_age="7d", on_expired="rerecord"),
    ):
        pass


def test_a_frozen_or_travelled_clock_does_not_age_a_cassette(
    recorded: tuple[Path, Server],
) -> None:
    path, server = recorded
    age_by(path, 2)
    a_year_on = _dt.datetime.now(_dt.UTC) + _dt.timedelta(days=365)
    with warnings.catch_warnings(), time_machine.travel(a_year_on):
        warnings.simplefilter("error")
        replay(path, server, max_age="30d")
    with (
        time_machine.travel(_dt.datetime(2001, 1, 1, tzinfo=_dt.UTC), tick=False),
        pytest.warns(AgentTapeWarning, match="recorded 2 days ago"),
    ):
        replay(path, server, max_age="1d")


def test_ages_and_actions_are_checked() -> None:
    assert parse_age("90d") == 90 * 86400
    assert parse_age("12h") == 12 * 3600
    assert parse_age(_dt.timedelta(minutes=5)) == 300
    with pytest.raises(ValueError, match="'90 days' is not an age: give '90d'"):
        parse_age("90 days")
    with pytest.raises(ValueError, match="on_expired must be one of warn, fail, rerecord"):
        agenttape.use_cassette("x.msgpack", on_expired="ignore")  # type: ignore[arg-type]


SUITE = """
    import os
    import httpx
    import pytest

    @pytest.mark.agenttape
    def test_by_ini():
        httpx.get(os.environ["API"] + "/status")

    @pytest.mark.agenttape(max_age="400d", on_expired="fail")
    def test_by_marker():
        httpx.get(os.environ["API"] + "/status")

    @pytest.mark.agenttape(max_age="1d", on_expired="fail")
    def test_too_old():
        httpx.get(os.environ["API"] + "/status")
"""


def test_pytest_ini_option_and_marker(
    pytester: pytest.Pytester, serve: Callable[..., Server]
) -> None:
    server = serve(lambda seen: json_reply({"ok": True}))
    pytester.makepyfile(test_suite=textwrap.dedent(SUITE))
    pytester.makeini(INI + "agenttape_max_age = 90d\n")
    run(pytester, server, "--agenttape-mode=once").assert_outcomes(passed=3)
    for cassette in (pytester.path / "cassettes" / "test_suite").glob("*.msgpack"):
        age_by(cassette, 100)
    server.stop()
    result = run(pytester, server)
    result.assert_outcomes(passed=2, errors=1, warnings=1)
    out = result.stdout.str()
    assert "test_by_ini.msgpack was recorded 100 days ago, more than its max_age of 90 days" in out
    assert "ERROR test_suite.py::test_too_old" in out
    assert "more than its max_age of 1 day (on_expired='fail')" in out


@pytest.fixture
def aged(recorded: tuple[Path, Server]) -> Path:
    """The recording, 100 days old (aged before the test's loop runs: it reads the file)."""
    age_by(recorded[0], 100)
    return recorded[0]


async def test_warnings_of_an_async_block_point_at_its_line(aged: Path, tmp_path: Path) -> None:
    """Under ``async with`` the cassette is read and saved in a worker thread; what that
    warns is shown at the user's ``async with``, as under ``with``, not in the worker."""
    with pytest.warns(AgentTapeWarning, match="more than its max_age") as entering:
        line = inspect.currentframe().f_lineno + 1  # type: ignore[union-attr]
        async with agenttape.use_cassette(aged, max_age="90d", on_unused="ignore"):
            pass
    with pytest.warns(UserWarning, match="nothing was recorded") as leaving:
        async with agenttape.use_cassette(tmp_path / "none.msgpack", mode="all"):
            line_left = inspect.currentframe().f_lineno - 1  # type: ignore[union-attr]
    for caught, at in ((entering, line), (leaving, line_left)):
        assert [(w.filename, w.lineno) for w in caught] == [(__file__, at)]
