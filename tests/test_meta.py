from __future__ import annotations

import datetime as dt
import platform
import subprocess
import time
from importlib import metadata
from pathlib import Path
from typing import Any

import httpx
import pytest

import agenttape
from tests.servers import Reply


def _git(repo: Path, *args: str) -> str:
    return subprocess.run(
        ["git", "-c", "user.name=t", "-c", "user.email=t@example.com", *args],
        cwd=repo,
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()


@pytest.fixture
def repo(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    root = tmp_path / "project"
    root.mkdir()
    _git(root, "init", "-q")
    (root / "agent.py").write_text("print('v1')\n")
    _git(root, "add", "agent.py")
    _git(root, "commit", "-q", "-m", "first")
    monkeypatch.chdir(root)
    return root


def _record(path: Path, **options: Any) -> dict[str, Any]:
    with agenttape.use_cassette(path, mode="all", **options) as cassette:
        cassette.save()  # a recording that captures nothing writes no file by itself
    return agenttape.load(path).metadata


def test_header_holds_the_replay_kit(repo: Path) -> None:
    tags = {
        "user_id": "u_7710",
        "tenant_id": "t_3",
        "session_id": "s_1",
        "flags": {"new_planner": True, "ratio": 0.25},
        "attempts": [1, 2],
    }
    before = dt.datetime.now(dt.UTC)
    header = _record(repo / "cassettes" / "run.msgpack", tags=tags)
    after = dt.datetime.now(dt.UTC)

    assert header["agenttape_version"] == agenttape.__version__
    assert len(header["run_id"]) == 32 and int(header["run_id"], 16) >= 0
    assert before <= header["created_at"] <= after
    assert header["created_at"].tzinfo is not None
    assert header["python"] == platform.python_version()
    assert header["platform"] == platform.platform()
    for library in ("httpx", "httpx2", "openai", "anthropic"):
        assert header["libraries"][library] == metadata.version(library)
    assert header["git"] == {"commit": _git(repo, "rev-parse", "HEAD"), "dirty": False}
    assert header["tags"] == tags


def test_each_recording_gets_its_own_run_id(repo: Path) -> None:
    first = _record(repo / "a.msgpack")
    second = _record(repo / "a.msgpack")
    assert first["run_id"] != second["run_id"]


def test_dirty_work_tree_is_flagged(repo: Path) -> None:
    (repo / "agent.py").write_text("print('v2, not committed')\n")
    header = _record(repo / "run.msgpack")
    assert header["git"]["dirty"] is True
    assert header["git"]["commit"] == _git(repo, "rev-parse", "HEAD")


def test_git_state_is_the_one_the_process_started_recording_with(repo: Path) -> None:
    # Modules already imported do not change when their files do: the first reading is the
    # code that runs, and later cassettes of the process do not pay two git processes each.
    first = _record(repo / "a.msgpack")
    (repo / "agent.py").write_text("print('v2, edited while the process runs')\n")
    _git(repo, "commit", "-q", "-am", "second")
    second = _record(repo / "b.msgpack")
    assert second["git"] == first["git"] == {"commit": first["git"]["commit"], "dirty": False}
    assert first["git"]["commit"] != _git(repo, "rev-parse", "HEAD")


def test_outside_a_git_work_tree_there_is_no_git_entry(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    plain = tmp_path / "plain"
    plain.mkdir()
    monkeypatch.chdir(plain)
    monkeypatch.setenv("GIT_CEILING_DIRECTORIES", str(tmp_path))
    assert _record(plain / "run.msgpack")["git"] is None


def test_tags_that_cannot_be_written_are_refused_up_front(cassette_path: Path) -> None:
    with pytest.raises(TypeError, match="tags must be msgpack-serialisable"):
        agenttape.use_cassette(cassette_path, mode="all", tags={"client": object()})
    assert not cassette_path.exists()


def test_per_interaction_start_ttfb_and_duration(cassette_path: Path, serve: Any) -> None:
    server = serve(
        lambda seen: Reply(chunks=[b"first ", b"second ", b"third"], stall=0.05, delay=0.05)
    )
    before = time.time()
    with agenttape.use_cassette(cassette_path, mode="once"), httpx.stream("GET", server.url) as r:
        assert r.read() == b"first second third"
    after = time.time()
    interaction = agenttape.load(cassette_path).interactions[0]
    assert before <= interaction.started_at <= after
    assert interaction.started == dt.datetime.fromtimestamp(interaction.started_at, tz=dt.UTC)
    assert interaction.ttfb is not None and interaction.duration is not None
    assert interaction.response is not None
    offsets = [offset for _size, offset in interaction.response.chunks]
    # Stalled head, then a gap before each later chunk: the timings are ordered as they happened.
    assert 0 < interaction.ttfb <= offsets[0] <= interaction.duration
    assert offsets == sorted(offsets)
    assert offsets[-1] <= interaction.duration
    assert interaction.duration <= after - before
