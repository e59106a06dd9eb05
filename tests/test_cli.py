"""The ``agenttape`` command, run end to end as a separate process on real cassettes."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx

import agenttape
from tests.cli_support import (
    AGENTTAPE,
    GZIP_DOCUMENT,
    assert_one_line_error,
    cli,
    record_three_endings,
)
from tests.servers import Reply, Server


def test_show_lists_every_interaction_as_a_table(session: Path) -> None:
    result = cli("show", session)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0].startswith(f"{session}: 4 interactions, recorded ")
    assert lines[1].split() == list(
        ("n", "boundary", "method", "host+path", "status", "model", "bytes", "ms", "chunks")
    )
    rows = [line.split() for line in lines[2:]]
    cassette = agenttape.load(session)
    assert [row[0] for row in rows] == ["0", "1", "2", "3"]
    assert rows[0][1:6] == ["http", "POST", rows[0][3], "200", "gpt-4o-mini"]
    assert rows[0][3].endswith("/v1/chat/completions")
    assert rows[1][5] == "claude-sonnet-4-5" and rows[1][3].endswith("/v1/messages")
    assert rows[2][3].endswith("/orders/A-1") and rows[2][5] == "-"
    assert rows[3][4] == "connect_error"
    for row, interaction in zip(rows[:3], cassette.interactions, strict=False):
        assert interaction.response is not None
        assert int(row[6]) == len(interaction.response.body)
        assert int(row[8]) == len(interaction.response.chunks)
    assert len(cassette.interactions[1].response.chunks) > 3  # type: ignore[union-attr]


def test_show_one_interaction_decodes_bodies_for_reading(session: Path) -> None:
    stream = cli("show", session, "-i", "1")
    assert stream.returncode == 0, stream.stderr
    assert '"model": "claude-sonnet-4-5"' in stream.stdout  # request JSON pretty-printed
    assert 'llm provider "anthropic", model "claude-sonnet-4-5"' in stream.stdout
    assert "Response body (sse;" in stream.stdout
    assert "[0] event=message_start" in stream.stdout
    assert "authorization: <redacted>" in stream.stdout.lower()

    tool = cli("show", session, "-i", "2")
    assert "Content-Encoding: gzip" in tool.stdout
    assert "Response body (json;" in tool.stdout
    assert json.dumps(GZIP_DOCUMENT, indent=2) in "\n".join(
        line[2:] for line in tool.stdout.splitlines()
    )

    last = cli("show", session, "-i", "-1")
    assert "Transport error connect_error: ConnectError" in last.stdout


def test_show_json_is_for_machines(session: Path) -> None:
    table = json.loads(cli("show", session, "--json").stdout)
    assert table["header"]["run_id"] == agenttape.load(session).metadata["run_id"]
    assert [row["model"] for row in table["interactions"]] == [
        "gpt-4o-mini",
        "claude-sonnet-4-5",
        "",
        "",
    ]
    one = json.loads(cli("show", session, "-i", "2", "--json").stdout)
    assert one["response"]["body"]["kind"] == "json"
    assert one["response"]["body"]["value"] == GZIP_DOCUMENT
    events = json.loads(cli("show", session, "-i", "1", "--json").stdout)
    assert events["response"]["body"]["kind"] == "sse"
    assert events["response"]["body"]["value"][0]["event"] == "message_start"
    assert events["llm"]["stream"] is True


COMMANDS = (
    "show",
    "view",
    "diff",
    "export",
    "import-vcr",
    "redact",
    "audit",
    "run",
    "proxy",
    "runs",
    "index",
    "fetch",
    "textconv",
    "init-git",
    "merge-driver",
    "rerecord",
)


def test_every_command_has_help() -> None:
    for command in COMMANDS:
        result = cli(command, "--help")
        assert result.returncode == 0 and result.stdout.startswith("usage: agenttape " + command)
    module = subprocess.run(
        [sys.executable, "-m", "agenttape", "--help"], capture_output=True, text=True, check=True
    )
    assert "import-vcr" in module.stdout


def test_help_survives_python_dropping_docstrings() -> None:
    # PYTHONOPTIMIZE=2 (python -OO), which some container images set, removes docstrings.
    listed = cli("--help", env={"PYTHONOPTIMIZE": "2"}).stdout
    commands = listed[listed.index("positional arguments:") : listed.index("options:")]
    for command in COMMANDS:  # its help beside it, or below a long name
        assert re.search(rf"^    {command}( +|\n +)\w", commands, re.MULTILINE), command
    run = cli("run", "--help", env={"PYTHONOPTIMIZE": "2"}).stdout
    assert "Run COMMAND with every process it starts recording to or replaying" in run


def test_bad_usage_and_bad_files_give_one_line_and_exit_2(tmp_path: Path, session: Path) -> None:
    missing = tmp_path / "missing.msgpack"
    corrupt = tmp_path / "corrupt.msgpack"
    corrupt.write_bytes(session.read_bytes()[:-40])
    assert_one_line_error(cli("frobnicate"), "invalid choice")
    assert_one_line_error(cli(), "give a command")
    assert_one_line_error(cli("show"), "CASSETTE")
    assert_one_line_error(cli("show", session, "-i", "x"), "invalid int")
    assert_one_line_error(cli("show", session, "-i", "9"), "out of range")
    assert_one_line_error(cli("diff", session), "B")
    assert_one_line_error(cli("diff", session, session, "--ignore", "a["), "not a JSON path")
    assert_one_line_error(cli("export", session, "--format", "xml"), "invalid choice")
    assert_one_line_error(
        cli("run", "--mode", "recrod", "--", "true"),
        "argument --mode: 'recrod' is not a mode; the modes are none, once, new_episodes, all "
        "('record' is accepted for 'all'); did you mean 'all'?",
    )
    assert_one_line_error(
        cli("proxy", "--cassette", missing, env={"AGENTTAPE_MODE": "rewrite"}),
        "AGENTTAPE_MODE: 'rewrite' is not a mode; the modes are none, once, new_episodes, all "
        "('record' is accepted for 'all'); did you mean 'all'?",
    )
    assert_one_line_error(cli("run"), "give the command")
    for command in (
        ("show", missing),
        ("diff", session, missing),
        ("export", missing),
        ("redact", missing),
        ("audit", missing),
        ("import-vcr", missing, tmp_path / "out.msgpack"),
        ("run", "--cassette", missing, "--", "true"),
    ):
        result = cli(*command)
        assert_one_line_error(result, str(missing), "does not exist")
        assert result.stderr.startswith(f"agenttape {command[0]}: error: "), result.stderr
    har = tmp_path / "trace.har"
    har.write_text('{"log": {"version": "1.2", "entries": []}}')
    for command in (("show", har), ("export", har), ("redact", har), ("diff", session, har)):
        result = cli(*command)
        assert_one_line_error(result, str(har), "not an agenttape cassette", "JSON")
        assert result.stderr.startswith(f"agenttape {command[0]}: error: "), result.stderr
    audited = cli("audit", har)
    assert audited.returncode == 2 and "not an agenttape cassette" in audited.stderr
    assert "0 cassettes; 1 could not be read" in audited.stderr
    for command in (
        ("show", corrupt),
        ("diff", corrupt, session),
        ("export", corrupt),
        ("redact", corrupt),
    ):
        assert_one_line_error(cli(*command), str(corrupt), "truncated")
    audit = cli("audit", corrupt, session)
    assert (
        audit.returncode == 2 and str(corrupt) in audit.stderr and "Traceback" not in audit.stderr
    )
    assert corrupt.read_bytes() == session.read_bytes()[:-40]  # never overwritten


def test_show_survives_a_closed_pipe(session: Path) -> None:
    result = subprocess.run(
        f"'{AGENTTAPE}' show '{session}' -i 1 | head -1", shell=True, capture_output=True, text=True
    )
    assert result.stdout.startswith("#1 POST") and "Traceback" not in result.stderr


def test_plain_text_without_a_terminal_and_rich_on_one() -> None:
    import io

    from agenttape._tools.show import render_plain, render_rich

    rows = [{"n": 0, "boundary": "http", "method": "GET", "host+path": "h/p", "status": "200",
             "model": "", "bytes": 5, "ms": 1.5, "chunks": 1}]  # fmt: skip
    plain = io.StringIO()
    render_plain(rows, plain)
    assert plain.getvalue().splitlines()[1].split() == [
        "0",
        "http",
        "GET",
        "h/p",
        "200",
        "-",
        "5",
        "1.5",
        "1",
    ]
    fancy = io.StringIO()
    render_rich(rows, "title", fancy)
    assert "h/p" in fancy.getvalue() and "┃" in fancy.getvalue()


def test_a_reply_with_no_response_body(tmp_path: Path, serve: Callable[..., Server]) -> None:
    server = serve(lambda seen: Reply(status=204))
    path = tmp_path / "empty.msgpack"
    with agenttape.use_cassette(path, mode="all"):
        httpx.delete(f"{server.url}/item/1")
    shown = cli("show", path, "-i", "0")
    assert shown.returncode == 0 and "Response HTTP/1.1 204 No Content" in shown.stdout


def _on_a_terminal(code: str, session: Path) -> str:
    """Run ``code`` with its standard output on a pseudo-terminal; return what it printed."""
    import pty

    leader, follower = pty.openpty()
    process = subprocess.Popen(
        [sys.executable, "-c", code, str(session)],
        stdout=follower,
        stderr=subprocess.PIPE,
        env={**os.environ, "COLUMNS": "160"},
    )
    os.close(follower)
    chunks = []
    while True:
        try:
            data = os.read(leader, 65536)
        except OSError:
            break
        if not data:
            break
        chunks.append(data)
    process.wait(timeout=60)
    os.close(leader)
    return b"".join(chunks).decode()


def test_rich_table_on_a_terminal_and_plain_text_without_rich(session: Path) -> None:
    show = (
        "import sys; from agenttape._tools.cli import main; sys.exit(main(['show', sys.argv[1]]))"
    )
    fancy = _on_a_terminal(show, session)
    assert "┃" in fancy and "gpt-4o-mini" in fancy
    without_rich = _on_a_terminal("import sys; sys.modules['rich'] = None; " + show, session)
    assert "┃" not in without_rich and "gpt-4o-mini" in without_rich
    assert without_rich.splitlines()[1].split()[:3] == ["n", "boundary", "method"]


# -- runs / fetch: the runs a Recorder kept ------------------------------------------------------


def test_runs_lists_by_tag_and_fetch_copies_one_out_to_replay(
    tmp_path: Path, serve: Callable[..., Server]
) -> None:
    server = serve(lambda seen: Reply(status=500 if "bad" in seen.path else 200, chunks=[b"{}"]))
    store = tmp_path / "runs"
    with agenttape.Recorder(store, keep="all") as recorder:
        for user_id, path in (("u_1", "/fine"), ("u_7710", "/bad/order"), ("u_2", "/fine")):
            with recorder.run(user_id=user_id, tenant_id="t_3"):
                httpx.get(server.url + path)

    listed = cli("runs", store, "--tag", "user_id=u_7710")
    assert listed.returncode == 0, listed.stderr
    header, row = listed.stdout.splitlines()
    assert header.split()[:7] == ["created", "(UTC)", "run", "id", "status", "n", "size"]
    run_id = row.split()[2]
    assert row.split()[3:5] == ["failed", "1"] and row.endswith("user_id=u_7710 tenant_id=t_3")
    assert len(cli("runs", store, "--since", "1h").stdout.splitlines()) == 4
    errors = json.loads(cli("runs", store, "--errors", "--json").stdout)
    assert [(r["run_id"], r["reasons"]) for r in errors] == [
        (run_id, [f"HTTP 500 from GET {server.url}/bad/order"])
    ]
    assert cli("runs", store, "--tag", "user_id=nobody").stdout == "no runs\n"

    out = tmp_path / "cassettes" / "r.msgpack"
    fetched = cli("fetch", store, run_id, out)
    assert fetched.returncode == 0 and str(out) in fetched.stdout
    server.stop()
    with agenttape.use_cassette(out, mode="none"):
        assert httpx.get(server.url + "/bad/order").status_code == 500


def test_runs_and_fetch_usage_errors_are_one_line(tmp_path: Path) -> None:
    store = tmp_path / "runs"
    (store / "2026-11-20").mkdir(parents=True)
    (store / "2026-11-20" / "r_bad.msgpack").write_bytes(b"\x81\xa9agenttape")
    assert_one_line_error(cli("runs", store, "--since", "yesterday"), "neither a duration")
    assert_one_line_error(cli("runs", store, "--tag", "user_id"), "KEY=VALUE")
    assert_one_line_error(cli("runs", tmp_path / "nowhere"), "does not exist")
    assert_one_line_error(cli("fetch", store, "../x", tmp_path / "o.msgpack"), "not a run id")
    assert_one_line_error(cli("fetch", store, "r_none", tmp_path / "o.msgpack"), "agenttape runs")
    assert_one_line_error(cli("fetch", store, "r_bad", tmp_path / "o.msgpack"), "r_bad.msgpack")
    assert not (tmp_path / "o.msgpack").exists()
    listed = cli("runs", store)
    assert listed.returncode == 0 and "unreadable" in listed.stdout


def test_show_export_and_diff_tell_how_a_body_ended(
    tmp_path: Path, standin: Any, serve: Callable[..., Server]
) -> None:
    path = tmp_path / "endings.msgpack"
    record_three_endings(path, standin, serve)
    stored = agenttape.load(path).interactions
    assert [i.response.truncated for i in stored if i.response] == [True, True, True]

    table = cli("show", path)
    assert table.returncode == 0, table.stderr
    rows = table.stdout.splitlines()[2:]
    assert [row.split("  200")[1].split("  ")[0] for row in rows] == ["", ", closed early", ", cut"]

    detail = cli("show", path, "-i", "0").stdout
    assert "(body closed by the client after the end-of-stream event)" in detail
    assert "replay keeps it open" in cli("show", path, "-i", "1").stdout
    assert "(body cut short by a transport error)" in cli("show", path, "-i", "2").stdout

    exported = json.loads(cli("export", path).stdout)
    ends = [entry["response"]["body_end"] for entry in exported["interactions"]]
    assert ends == ["closed_after_end", "closed_early", "cut"]
    har = json.loads(cli("export", path, "--format", "har").stdout)
    assert [e["response"]["_bodyEnd"] for e in har["log"]["entries"]] == ends
