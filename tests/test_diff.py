"""``agenttape diff``: two runs compared interaction by interaction."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import httpx
from llm_standin import StandIn

import agenttape
from agenttape._tools.diff import compare
from tests.cli_support import (
    cli,
    make_world,
    record_session,
    record_three_endings,
)
from tests.servers import Server, json_reply, sse_reply


def test_diff_exit_code_says_whether_runs_differ(
    tmp_path: Path, standin: StandIn, serve: Callable[..., Server]
) -> None:
    world = make_world(standin, serve)
    session = tmp_path / "session.msgpack"
    record_session(session, world, "A-1")
    same = cli("diff", session, session)
    assert same.returncode == 0, same.stdout
    assert "no differences in 4 interactions" in same.stdout

    other = tmp_path / "other.msgpack"
    record_session(other, world, "B-2")
    result = cli("diff", session, other)
    assert result.returncode == 1
    out = result.stdout
    assert (
        "request body.messages[0].content: expected 'where is my order A-1', got 'where is my order B-2'"
        in out
    )
    assert "response body.choices[0].message.content: expected" in out
    assert "response stream text: differs at character" in out
    assert "#2 GET" not in out and "#3 GET" not in out  # the same tool call and refused port
    assert "2 of 4 interactions differ" in out


def _sse_cassettes(
    tmp_path: Path, serve: Callable[..., Server], runs: list[list[bytes]]
) -> list[Path]:
    """One cassette per run of the same streamed request; the server answers run by run."""
    replies = iter(runs)
    server = serve(lambda seen: sse_reply(next(replies)))
    paths = []
    for number in range(len(runs)):
        path = tmp_path / f"run{number}.msgpack"
        with agenttape.use_cassette(path, mode="all"):
            httpx.post(f"{server.url}/v1/chat/completions", json={"model": "m", "stream": True})
        paths.append(path)
    server.stop()
    return paths


def _delta(text: str, ident: str) -> bytes:
    payload = {"id": ident, "choices": [{"index": 0, "delta": {"content": text}}]}
    return f"data: {json.dumps(payload)}\n\n".encode()


def test_diff_compares_streams_by_joined_text(tmp_path: Path, serve: Callable[..., Server]) -> None:
    a, b, c = _sse_cassettes(
        tmp_path,
        serve,
        [
            [_delta("Hel", "x1"), _delta("lo", "x1"), b"data: [DONE]\n\n"],
            # other ids, other chunk boundaries, the same text
            [_delta("H", "y9") + _delta("ello", "y9") + b"data: [DONE]\n\n"],
            [_delta("Help", "x1"), b"data: [DONE]\n\n"],
        ],
    )
    assert cli("diff", a, b).returncode == 0
    result = cli("diff", a, c)
    assert result.returncode == 1
    assert (
        "response stream text: differs at character 3: expected 'Hello', got 'Help'"
        in result.stdout
    )


def test_diff_ignores_json_paths_on_request(tmp_path: Path, serve: Callable[..., Server]) -> None:
    server = serve(lambda seen: json_reply({"id": seen.json()["n"], "answer": 42}))
    paths = []
    for n in (1, 2):
        path = tmp_path / f"{n}.msgpack"
        with agenttape.use_cassette(path, mode="all"):
            httpx.post(f"{server.url}/ask", json={"n": n, "q": "same"})
        paths.append(path)
    assert cli("diff", *paths).returncode == 1
    ignored = cli("diff", *paths, "--ignore", "n", "--ignore", "id")
    assert ignored.returncode == 0, ignored.stdout


def test_diff_reports_interactions_only_one_run_made(
    tmp_path: Path, serve: Callable[..., Server]
) -> None:
    server = serve(lambda seen: json_reply({"path": seen.path}))
    short, long = tmp_path / "short.msgpack", tmp_path / "long.msgpack"
    with agenttape.use_cassette(short, mode="all"):
        httpx.get(f"{server.url}/a")
    with agenttape.use_cassette(long, mode="all"):
        httpx.get(f"{server.url}/a")
        httpx.get(f"{server.url}/b")
    result = cli("diff", short, long, "--all")
    assert result.returncode == 1
    assert f"#0 GET {server.url}/a: same" in result.stdout
    assert f"#1 GET {server.url}/b\n    only in B" in result.stdout
    assert cli("diff", long, short).stdout.count("only in A") == 1


def test_a_stream_closed_after_its_end_is_no_difference_one_closed_early_is(
    tmp_path: Path, standin: StandIn, serve: Callable[..., Server]
) -> None:
    path = tmp_path / "endings.msgpack"
    record_three_endings(path, standin, serve)
    after_end, early, _cut = agenttape.load(path).interactions
    assert after_end.response is not None and early.response is not None
    read_to_the_end = replace(after_end, response=replace(after_end.response, truncated=False))
    left_open = replace(early, response=replace(early.response, truncated=False))
    assert compare([after_end], [read_to_the_end])[0].differences == []
    assert compare([early], [left_open])[0].differences == [
        "status: expected 200, closed early by the client, got 200"
    ]
