"""``agenttape show`` as a newcomer reads it: requests that differ in their query look
different, and a recording cut short says so."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import httpx
import pytest

import agenttape
from agenttape._tools.cli import main
from tests.cli_support import signals_as_at_a_terminal
from tests.servers import Server, json_reply


@pytest.fixture
def weather(serve: Any) -> Server:
    server: Server = serve(lambda seen: json_reply({"i": dict(seen.query).get("i")}))
    return server


def _show(capsys: pytest.CaptureFixture[str], *args: str | Path) -> str:
    assert main(["show", *map(str, args)]) == 0
    return capsys.readouterr().out


def test_the_table_shows_each_query(
    weather: Server, cassette_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with agenttape.use_cassette(cassette_path, mode="once"):
        for i in range(2):
            httpx.get(f"{weather.url}/weather", params={"i": i})
        httpx.get(f"{weather.url}/weather")
    host = weather.url.removeprefix("http://")
    lines = _show(capsys, cassette_path).splitlines()
    assert "RECORDING CUT SHORT" not in "\n".join(lines)
    assert [line.split()[3] for line in lines[2:]] == [
        f"{host}/weather?i=0",
        f"{host}/weather?i=1",
        f"{host}/weather",
    ]
    table = json.loads(_show(capsys, cassette_path, "--json"))
    assert table["interactions"][1]["host+path"] == f"{host}/weather?i=1"


def test_a_recording_cut_short_says_so(
    weather: Server, cassette_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with (
        pytest.raises(KeyboardInterrupt),
        agenttape.use_cassette(cassette_path, mode="once"),
    ):
        for i in range(20):
            httpx.get(f"{weather.url}/weather", params={"i": i})
            if i == 2:
                raise KeyboardInterrupt
    text = _show(capsys, cassette_path)
    assert text.splitlines()[1] == (
        "RECORDING CUT SHORT: interrupted by KeyboardInterrupt after 3 interactions; what the "
        "code did after that was never recorded. Record it again to the end."
    )
    assert len(text.splitlines()) == 2 + 1 + 3
    header = json.loads(_show(capsys, cassette_path, "--json"))["header"]
    assert header["interrupted"] == {"after": 3, "by": "KeyboardInterrupt"}


def test_ctrl_c_in_a_script_leaves_a_cassette_that_says_it_was_cut_short(
    weather: Server, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """As a newcomer meets it: a script recording 20 requests gets a real SIGINT after 3."""
    cassette = tmp_path / "cassettes" / "weather.msgpack"
    script = tmp_path / "weather.py"
    script.write_text(
        textwrap.dedent(
            """
            import sys, time
            import httpx
            import agenttape

            with agenttape.use_cassette(sys.argv[1], mode="once"):
                for i in range(20):
                    httpx.get(sys.argv[2] + "/weather", params={"i": i}, timeout=60)
                    if i == 2:
                        print("ready", flush=True)
                        time.sleep(60)  # Ctrl-C comes here
            """
        )
    )
    with signals_as_at_a_terminal():
        running = subprocess.Popen(
            [sys.executable, str(script), str(cassette), weather.url],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
    assert running.stdout is not None
    if running.stdout.readline() != "ready\n":
        _out, err = running.communicate(timeout=60)
        pytest.fail(f"the script ended before its third request ({running.returncode}): {err}")
    running.send_signal(signal.SIGINT)
    _out, err = running.communicate(timeout=60)
    assert running.returncode == -signal.SIGINT
    assert err.rstrip().endswith("KeyboardInterrupt")
    assert agenttape.load(cassette).metadata["interrupted"] == {
        "after": 3,
        "by": "KeyboardInterrupt",
    }
    assert _show(capsys, cassette).splitlines()[1] == (
        "RECORDING CUT SHORT: interrupted by KeyboardInterrupt after 3 interactions; what the "
        "code did after that was never recorded. Record it again to the end."
    )
    weather.stop()
    with (
        pytest.raises(agenttape.UnmatchedInteractionError) as caught,
        agenttape.use_cassette(cassette),
    ):
        for i in range(20):
            httpx.get(f"{weather.url}/weather", params={"i": i})
    assert str(caught.value).startswith(
        f"No recorded interaction matches GET {weather.url}/weather?i=3\n"
    )
    assert (
        "This cassette's recording was cut short (interrupted by KeyboardInterrupt after 3 "
        "interactions): what the code did after that was never recorded. Record it again to "
        "the end."
    ) in str(caught.value)
