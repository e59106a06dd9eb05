"""The worked example of docs/rehearse-failures.md: a retry bug that every recorded run hides
and one injected fault shows."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest
from retry_budget import run

import agenttape
from tests.test_examples import run_example

ANSWER = "Thank you for your message! Glad to help with: Where is my order 1042?"


def test_the_recorded_run_passes() -> None:
    assert run.replay() == ANSWER


def test_a_retry_after_within_the_budget_is_retried() -> None:
    short = agenttape.fault("rate_limit", on="POST /v1/chat/completions", nth=1, retry_after=0.05)
    assert run.replay(faults=[short]) == ANSWER


def test_one_fault_finds_the_bug_and_the_fix_answers() -> None:
    shipped = hashlib.sha256(run.CASSETTE.read_bytes()).hexdigest()
    with pytest.raises(AttributeError, match="'NoneType' object has no attribute 'choices'") as bug:
        run.replay(faults=[run.LONG_WAIT])
    (note,) = bug.value.__notes__
    assert note.startswith("agenttape: injected fault") and "rate_limit(retry_after=30)" in note
    fixed = run.replay(faults=[run.LONG_WAIT], fixed=True)
    assert fixed == "The assistant is busy; please ask again in 30 seconds."
    assert hashlib.sha256(run.CASSETTE.read_bytes()).hexdigest() == shipped


def test_recorded_then_replayed_with_the_fault(tmp_path: Path) -> None:
    path = tmp_path / "support.msgpack"
    live, port = run.record(path, port=0)
    assert live == ANSWER
    with pytest.raises(AttributeError):
        run.replay(path, port, faults=[run.LONG_WAIT])
    assert run.replay(path, port, faults=[run.LONG_WAIT], fixed=True).startswith("The assistant")


def test_the_example_runs_offline_without_a_key() -> None:
    before = run.CASSETTE.read_bytes()
    result = run_example("examples/retry_budget/run.py")
    assert result.returncode == 0, result.stderr
    assert f"replayed: {ANSWER}" in result.stdout
    assert "with a 30-second retry-after: AttributeError" in result.stdout
    assert "agenttape: injected fault" in result.stdout
    assert "fixed, with a 30-second retry-after: The assistant is busy" in result.stdout
    assert run.CASSETTE.read_bytes() == before
