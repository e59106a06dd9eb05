"""The drift report of the pytest-recording drop-in on a suite of many stale cassettes: a
summary that fits a screen, the whole report in a file the summary names, each test said as it
ended, and a changed string shown where it differs."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

# Imported here, once, as tests/test_recording_plugin.py does: libyaml's C loader keeps the
# node classes of the first import of yaml.
import vcr  # noqa: F401

from tests.servers import Server, json_reply

pytest_plugins = ["pytester"]

AGENTTAPE = ("-p", "no:recording", "-p", "no:cassetter")
RECORDING = ("-p", "no:agenttape", "-p", "no:cassetter")
PROMPT = "You are a helpful assistant for the support desk of Acme Corp; answer briefly."
CHANGED = PROMPT.replace("briefly", "at length")
STALE = 30


SUITE = """
import os, pytest, requests

@pytest.mark.vcr
@pytest.mark.parametrize("number", range(int(os.environ["TESTS"])))
def test_chat(number):
    sent = {"model": "m", "temperature": int(os.environ["TEMPERATURE"]), "n": number,
            "system": os.environ["PROMPT"]}
    last = number == int(os.environ["TESTS"]) - 1
    if last and os.environ["TEMPERATURE"] != "0":
        sent["stream"] = False  # sent now, not when recorded
    answer = requests.post(os.environ["API"] + "/v1/chat/completions", json=sent).json()
    assert answer["seen"] == number
    assert not last, "its own failure"
"""


def _run(
    pytester: pytest.Pytester, *args: str, temperature: int = 1, prompt: str = CHANGED, **env: str
) -> pytest.RunResult:
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("TEMPERATURE", str(temperature))
        patch.setenv("PROMPT", prompt)
        for name, value in env.items():
            patch.setenv(name, value)
        return pytester.runpytest_inprocess("-p", "no:cacheprovider", *args)


def _suite(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, tests: int) -> None:
    """``tests`` tests recorded by pytest-recording against a real server; the code now sends
    another temperature and a prompt changed near its end, and the last test fails on its
    own assertion."""
    pytester.makeini("[pytest]\nasyncio_default_fixture_loop_scope = function\n")
    pytester.makepyfile(test_suite=SUITE)
    with Server(lambda seen: json_reply({"seen": seen.json()["n"]})) as server:
        recorded = _run(
            pytester, *RECORDING, "--record-mode=once", temperature=0, prompt=PROMPT,
            API=server.url, TESTS=str(tests),
        )  # fmt: skip
        recorded.assert_outcomes(passed=tests - 1, failed=1)
    monkeypatch.setenv("API", server.url)  # stopped: the runs below are offline
    monkeypatch.setenv("TESTS", str(tests))


def _section(output: str) -> list[str]:
    text = output[output.index("agenttape: requests changed since recording") :]
    lines = text.split("short test summary info")[0].splitlines()[1:]
    return [line for line in lines if line.strip() and not line.startswith("=")]


def test_a_long_report_is_summed_up_on_screen_and_written_whole_to_the_file_it_names(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    _suite(pytester, monkeypatch, STALE)
    result = _run(pytester, *AGENTTAPE)
    result.assert_outcomes(passed=STALE - 1, failed=1)
    section = _section(result.stdout.str())
    assert len(section) <= 25, "\n".join(section)
    summary = "\n".join(section)
    assert f"{STALE} tests named, {STALE} replayed requests that differ" in summary
    assert f"({STALE - 1} passed, 1 failed)" in summary
    assert f"  request body.temperature: {STALE} tests" in summary
    assert "test_suite.py::test_chat[29] (failed): 3 differences" in summary
    closing = section[-1]
    assert f"{STALE - 1} passed only because vcrpy's matching ignores what changed" in closing
    assert "1 failed or errored on its own" in closing

    named = re.search(r"The whole report \((\d+) lines\): (\S+)", summary)
    assert named is not None, summary
    written = (pytester.path / named.group(2)).read_text()
    assert named.group(2) == ".agenttape/drift-report.txt"
    assert len(written.splitlines()) == int(named.group(1))
    for number in range(STALE):
        outcome = "failed" if number == STALE - 1 else "passed"
        assert (
            f"test_suite.py::test_chat[{number}]: its requests changed since "
            f"cassettes/test_suite/test_chat[{number}].yaml was recorded ({outcome})"
        ) in written
    assert written.splitlines()[-1] == closing


def test_a_string_changed_past_what_fits_is_shown_where_it_differs(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    _suite(pytester, monkeypatch, 2)
    result = _run(pytester, *AGENTTAPE)
    result.assert_outcomes(passed=1, failed=1)
    section = _section(result.stdout.str())
    (line,) = {line.strip() for line in section if "body.system" in line}
    assert line == (
        "request changed: request body.system: ...'f Acme Corp; answer briefly.', "
        "now ...'f Acme Corp; answer at length.'"
    )
    # A short report is shown whole, each test with how it ended, and says what is true.
    assert "test_suite.py::test_chat[0]: its requests changed since" in "\n".join(section)
    assert any(line.endswith("was recorded (passed)") for line in section)
    assert any(line.endswith("was recorded (failed)") for line in section)
    assert section[-1] == (
        "2 tests replay cassettes recorded for other requests: 1 passed only because vcrpy's "
        "matching ignores what changed (--agenttape-drift=fail makes such a test fail); 1 "
        "failed or errored on its own (the stale cassette may be why). Re-record with "
        "--record-mode=rewrite."
    )


def test_drift_fail_says_which_tests_failed_on_their_drift(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    _suite(pytester, monkeypatch, 2)
    result = _run(pytester, *AGENTTAPE, "--agenttape-drift=fail")
    result.assert_outcomes(failed=2)
    section = _section(result.stdout.str())
    assert any(line.endswith("was recorded (failed on its drift)") for line in section)
    assert "1 failed on it: --agenttape-drift=fail; 1 failed or errored on its own" in section[-1]
    assert not (Path(pytester.path) / ".agenttape").exists()  # short: shown whole, no file
