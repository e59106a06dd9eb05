"""Warnings agenttape gives during a test name the test's own lines, not agenttape's."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

pytest_plugins = ["pytester"]

PROJECT = """
    import agenttape
    import pytest

    FAULT = agenttape.fault("rate_limit", on="GET nowhere.invalid/x")

    @pytest.mark.agenttape(faults=[FAULT])
    def test_marker():
        pass

    @agenttape.use_cassette("decorated.msgpack", mode="all")
    def test_decorated():
        pass

    def test_with(tmp_path):
        with agenttape.use_cassette(tmp_path / "with.msgpack", mode="all"):
            pass
"""


def test_the_warning_summary_names_the_test_file_lines(pytester: pytest.Pytester) -> None:
    """Nothing recorded and a fault that never fired, from a cassette the marker, a decorator
    or a ``with`` held: each is blamed on that line of the test file."""
    pytester.makepyfile(test_project=PROJECT)
    pytester.makeini("[pytest]\naddopts = -p no:cacheprovider\n")
    result = pytester.runpytest_subprocess("-p", "agenttape", "--agenttape-mode=all")
    result.assert_outcomes(passed=3)
    summary = result.stdout.str().split("warnings summary", 1)[1]
    places = re.findall(r"^  (\S+):(\d+): (\w+): ", summary, re.MULTILINE)
    assert {Path(file).name for file, _, _ in places} == {"test_project.py"}, summary
    assert sorted((int(line), kind) for _, line, kind in places) == [
        (6, "AgentTapeWarning"),  # the marker's fault never fired
        (6, "UserWarning"),  # nothing recorded: the marker
        (10, "UserWarning"),  # the decorator
        (15, "UserWarning"),  # the with
    ]
