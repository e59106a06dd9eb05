"""``agenttape rerecord --review``: a re-recording walked cassette by cassette, driven through
standard input and once in a real terminal (tmux)."""

from __future__ import annotations

import os
import shutil
import subprocess
import time
import uuid
from pathlib import Path

import httpx
import pytest

import agenttape
from tests.cli_support import AGENTTAPE, cli
from tests.servers import Server
from tests.test_verdict import FIRST, Provider, again, record


def rerecorded(tmp_path: Path) -> dict[str, Path]:
    """Four re-recorded cassettes: only benign changes, a changed request, a new answer
    shape, and one whose re-recording failed (the new one kept beside it)."""
    app = Provider()
    folder = tmp_path / "cassettes"
    paths = {name: folder / f"{name}.msgpack" for name in ("a_benign", "b_request", "c_shape")}
    with Server(app) as server:
        for path in paths.values():
            record(path, server, FIRST)
        record(paths["a_benign"], server, again())
        record(paths["b_request"], server, again(model="m2"))
        app.reshaped = True
        record(paths["c_shape"], server, again())
        down = folder / "d_down.msgpack"
        record(down, server, FIRST)
    with (
        pytest.warns(agenttape.AgentTapeWarning),
        agenttape.use_cassette(down, mode="all"),
        pytest.raises(httpx.ConnectError),
    ):
        httpx.post(f"{server.url}/v1/chat/completions", json=FIRST)
    paths["d_down"] = down
    return paths


def review(folder: Path, answers: str, *flags: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(AGENTTAPE), "rerecord", "--review", *flags, str(folder)],
        input=answers,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_accept_keeps_the_new_and_reject_restores_the_old(tmp_path: Path) -> None:
    paths = rerecorded(tmp_path)
    folder = paths["a_benign"].parent
    old_b = paths["b_request"].with_name("b_request.previous.msgpack").read_bytes()
    new_c = paths["c_shape"].read_bytes()
    new_d = paths["d_down"].with_name("d_down.new.msgpack").read_bytes()
    result = review(folder, "r\na\na\n", "--accept-benign")
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert (
        "[1/4] " in out and "a_benign.msgpack: benign (2 benign)\n  accepted: nothing worse" in out
    )
    assert "b_request.msgpack: request changed" in out
    assert "      request changed: request body.model: 'm', now 'm2'" in out
    assert "c_shape.msgpack: response shape changed" in out
    assert "d_down.msgpack: request changed" in out  # its second call was never made
    assert "answer: status 200, now no answer: connect_error" in out
    assert out.endswith("accepted 3, rejected 1, skipped 0\n")
    assert paths["b_request"].read_bytes() == old_b
    assert paths["c_shape"].read_bytes() == new_c
    assert paths["d_down"].read_bytes() == new_d
    assert sorted(p.name for p in folder.iterdir()) == [
        "a_benign.msgpack",
        "b_request.msgpack",
        "c_shape.msgpack",
        "d_down.msgpack",
    ]


def test_without_accept_benign_every_change_is_asked_and_the_end_of_input_skips(
    tmp_path: Path,
) -> None:
    paths = rerecorded(tmp_path)
    folder = paths["a_benign"].parent
    before = {p.name: p.read_bytes() for p in folder.iterdir()}
    result = review(folder, "d\ns\n")
    out = result.stdout
    assert out.count("accept the new recording (a)") == 3  # a_benign twice (d), b_request once
    assert '+>     "model": "m2"' not in out  # the diff shown was a_benign's
    assert '->             "id": "call_abc123456",' in out
    assert out.endswith("accepted 0, rejected 0, skipped 4\n")
    assert {p.name: p.read_bytes() for p in folder.iterdir()} == before


def test_rerecord_without_review_is_one_line(tmp_path: Path) -> None:
    result = cli("rerecord", tmp_path)
    assert result.returncode == 2 and "give --review" in result.stderr


@pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed")
def test_the_review_in_a_real_terminal(tmp_path: Path) -> None:
    paths = rerecorded(tmp_path)
    folder = paths["a_benign"].parent
    old_b = paths["b_request"].with_name("b_request.previous.msgpack").read_bytes()
    session = f"agenttape-review-{uuid.uuid4().hex[:8]}"
    tmux = ["tmux", "-L", session]
    command = f"{AGENTTAPE} rerecord --review --accept-benign {folder}; sleep 30"
    subprocess.run([*tmux, "new-session", "-d", "-s", session, "-x", "160", "-y", "60", command],
                   check=True, env={**os.environ, "TERM": "xterm-256color"})  # fmt: skip

    def screen() -> str:
        return subprocess.run(
            [*tmux, "capture-pane", "-p", "-t", session], capture_output=True, text=True
        ).stdout

    def wait_for(text: str) -> str:
        deadline = time.monotonic() + 60
        while text not in (shown := screen()):
            assert time.monotonic() < deadline, shown
            time.sleep(0.2)
        return shown

    try:
        wait_for("(q)?")
        subprocess.run([*tmux, "send-keys", "-t", session, "r", "Enter"], check=True)
        wait_for("c_shape.msgpack: response shape changed")
        subprocess.run([*tmux, "send-keys", "-t", session, "s", "Enter"], check=True)
        wait_for("d_down.msgpack")
        subprocess.run([*tmux, "send-keys", "-t", session, "q", "Enter"], check=True)
        shown = wait_for("accepted 1, rejected 1, skipped 2")
        assert "rejected: " in shown and "b_request.msgpack holds the old recording again" in shown
    finally:
        subprocess.run([*tmux, "kill-server"], check=False)
    assert paths["b_request"].read_bytes() == old_b
