"""``agenttape textconv`` and ``agenttape init-git``: cassettes reviewable in git, with the
real git."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Callable
from pathlib import Path

from llm_standin import StandIn

from agenttape._core import meta
from agenttape._core.models import Closed, Frame, Interaction, Request, Response
from agenttape._core.wire import codec
from tests.cli_support import assert_one_line_error, cli, make_world, record_session
from tests.servers import Server

GIT_ENV = {
    "GIT_AUTHOR_NAME": "t",
    "GIT_AUTHOR_EMAIL": "t@example.com",
    "GIT_COMMITTER_NAME": "t",
    "GIT_COMMITTER_EMAIL": "t@example.com",
    "GIT_CONFIG_GLOBAL": os.devnull,
    "GIT_CONFIG_NOSYSTEM": "1",
}
PAD = " " * 9
"""Before a message's content: the body's two, then the JSON's six."""


def git(repo: Path, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["git", *args],
        cwd=repo,
        capture_output=True,
        text=True,
        env={**os.environ, **GIT_ENV},
        check=check,
        timeout=60,
    )


def make_repo(path: Path) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    git(path, "init", "-q", "-b", "main")
    return path


def test_text_is_stable_sorted_redacted_and_decoded(
    tmp_path: Path, standin: StandIn, serve: Callable[..., Server]
) -> None:
    path = tmp_path / "session.msgpack"
    record_session(path, make_world(standin, serve), "A-1")
    first, second = cli("textconv", path), cli("textconv", path)
    assert first.returncode == 0, first.stderr
    assert first.stdout == second.stdout  # the same cassette, the same bytes
    text = first.stdout
    assert text.startswith("agenttape cassette: 4 interactions, recorded ")
    blocks = text.split("\n=== ")[1:]
    assert [block.split("\n")[0].split()[:2] for block in blocks] == [
        ["#0", "http"],
        ["#1", "http"],
        ["#2", "http"],
        ["#3", "http"],
    ]
    chat = blocks[0]
    assert "> authorization: <redacted>" in chat
    assert "sk-test-key" not in text
    assert f'>{PAD}"content": "where is my order A-1",' in chat  # keys sorted: content, role
    assert chat.index('"messages"') < chat.index('"model"') < chat.index('"seed"')
    assert "< response body (json;" in chat and "sha256 " in chat
    stream = blocks[1]
    assert "< response body (sse;" in stream
    assert "<   [0] event=message_start " in stream
    tool = blocks[2]
    assert "< Content-Encoding: gzip" in tool and '"order": "A-1"' in tool
    assert "! connect_error: ConnectError:" in blocks[3]
    assert " ms" not in text  # no timings: they change on every recording


def test_secrets_in_an_imported_cassette_are_redacted_and_frames_shown(tmp_path: Path) -> None:
    # Written as an older tool might have left it: the key in a header, frames with JSON.
    path = tmp_path / "imported.msgpack"
    interactions = [
        Interaction(
            Request(
                "POST",
                "https://api.test/v1/x",
                [("Authorization", "Bearer sk-live-abcdefghijklmnopqrstuvwx")],
                b'{"z": 1, "a": 2}',
            ),
            Response(200, "OK", headers=[("Content-Type", "application/json")], body=b"[]"),
        ),
        Interaction(
            Request("GET", "wss://api.test/v1/realtime"),
            Response(101, "Switching Protocols", headers=[("Upgrade", "websocket")]),
            frames=[
                Frame("client", "text", b'{"type":"hello","a":1}', 0.5),
                Frame("server", "binary", b"\x00\xff", 0.75),
            ],
            closed=Closed(1000, "done", "client"),
        ),
    ]
    path.write_bytes(codec.encode(meta.new_header(), interactions))
    text = cli("textconv", path).stdout
    assert "> Authorization: <redacted>" in text and "sk-live" not in text
    assert '>     "a": 2,\n>     "z": 1\n' in text
    assert '~ [0] -> text {"a": 1, "type": "hello"}' in text
    assert "~ [1] <- binary 2 bytes 00 ff" in text
    assert "~ websocket: 2 frames, closed by the client with 1000 'done'" in text


def test_textconv_of_a_missing_file_is_one_line(tmp_path: Path) -> None:
    assert_one_line_error(cli("textconv", tmp_path / "missing.msgpack"), "does not exist")


def test_git_diff_and_log_show_a_rerecorded_cassette_as_text(
    tmp_path: Path, standin: StandIn, serve: Callable[..., Server]
) -> None:
    repo = make_repo(tmp_path / "repo")
    cassettes = repo / "tests" / "cassettes"
    cassettes.mkdir(parents=True)
    cassette = cassettes / "session.msgpack"
    world = make_world(standin, serve)
    record_session(cassette, world, "A-1")
    git(repo, "add", ".")
    git(repo, "commit", "-q", "-m", "record")
    record_session(cassette, world, "B-2")

    before = git(repo, "diff").stdout
    assert "Binary files a/tests/cassettes/session.msgpack and" in before

    setup = cli("init-git", cassettes, cwd=repo)
    assert setup.returncode == 0, setup.stderr
    assert (cassettes / ".gitattributes").read_text() == (
        "*.msgpack diff=agenttape merge=agenttape\n"
    )
    assert cli("init-git", cassettes, cwd=repo).stdout.count("wrote") == 0  # idempotent
    after = git(repo, "diff").stdout
    assert "Binary files" not in after
    assert f'->{PAD}"content": "where is my order A-1",' in after
    assert f'+>{PAD}"content": "where is my order B-2",' in after

    git(repo, "add", ".")
    git(repo, "commit", "-q", "-m", "re-record")
    log = git(repo, "log", "-p", "-1", "--", str(cassette)).stdout
    assert f'+>{PAD}"content": "where is my order B-2",' in log


def test_a_merge_of_two_recordings_keeps_ours_and_reports_the_conflict(
    tmp_path: Path, standin: StandIn, serve: Callable[..., Server]
) -> None:
    repo = make_repo(tmp_path / "repo")
    cassette = repo / "session.msgpack"
    world = make_world(standin, serve)
    record_session(cassette, world, "A-1")
    assert cli("init-git", cwd=repo).returncode == 0
    git(repo, "add", ".")
    git(repo, "commit", "-q", "-m", "record")
    git(repo, "checkout", "-q", "-b", "theirs")
    record_session(cassette, world, "T-3")
    git(repo, "commit", "-q", "-am", "theirs")
    git(repo, "checkout", "-q", "main")
    record_session(cassette, world, "O-4")
    git(repo, "commit", "-q", "-am", "ours")
    ours = cassette.read_bytes()

    merge = git(repo, "merge", "theirs", check=False)
    assert merge.returncode != 0
    assert "CONFLICT" in merge.stdout
    assert "was changed on both sides; kept ours" in merge.stderr
    assert cassette.read_bytes() == ours
    assert git(repo, "diff", "--name-only", "--diff-filter=U").stdout.split() == ["session.msgpack"]


def test_init_git_outside_a_repository_is_one_line(tmp_path: Path) -> None:
    result = cli("init-git", tmp_path, env={"GIT_CEILING_DIRECTORIES": str(tmp_path.parent)})
    assert_one_line_error(result, "not a git repository")
