"""The ``agenttape`` command, run end to end as a separate process on real cassettes."""

from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import anthropic
import httpx
import openai
import pytest
from llm_standin import StandIn

import agenttape
from agenttape import _format, _meta
from agenttape._models import Interaction, Request, Response
from tests.servers import Reply, Server, gzip_reply, json_reply, refused_port, sse_reply

AGENTTAPE = Path(sys.executable).parent / "agenttape"
GZIP_DOCUMENT = {"order": "A-1", "items": [{"sku": "X", "qty": 2}]}


def cli(
    *args: str | Path, cwd: Path | None = None, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    environment = {**os.environ, **(env or {})}
    return subprocess.run(
        [str(AGENTTAPE), *map(str, args)],
        capture_output=True,
        text=True,
        cwd=cwd,
        env=environment,
        timeout=60,
    )


def assert_one_line_error(result: subprocess.CompletedProcess[str], *words: str) -> None:
    assert result.returncode == 2, result
    assert "Traceback" not in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1, result.stderr
    for word in words:
        assert word in result.stderr


@dataclass
class World:
    """What the agent talks to: the LLM stand-in, a gzip tool server, and a port that is down."""

    standin: StandIn
    tool: Server
    down: int


@pytest.fixture
def world(standin: StandIn, serve: Callable[..., Server]) -> World:
    tool = serve(lambda seen: gzip_reply(json.dumps(GZIP_DOCUMENT).encode()))
    return World(standin, tool, refused_port())


def record_session(path: Path, world: World, note: str) -> None:
    """A small agent run: OpenAI chat, Anthropic stream, a gzip tool call, a refused port."""
    base = world.standin.url
    with agenttape.use_cassette(path, mode="all"), warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # the model's end-of-life notice
        client = openai.OpenAI(base_url=f"{base}/v1", api_key="sk-test-key-1234567890abcdefgh")
        client.chat.completions.create(
            model="gpt-4o-mini",
            temperature=0.2,
            seed=7,
            messages=[{"role": "user", "content": f"where is my order {note}"}],
        )
        claude = anthropic.Anthropic(base_url=base, api_key="sk-ant-test-1234567890abcdefghijkl")
        with claude.messages.stream(
            model="claude-sonnet-4-5",
            max_tokens=64,
            messages=[{"role": "user", "content": f"hello {note}"}],
        ) as stream:
            stream.until_done()
        httpx.get(f"{world.tool.url}/orders/A-1")
        with pytest.raises(httpx.ConnectError):
            httpx.get(f"http://127.0.0.1:{world.down}/down")


@pytest.fixture
def session(tmp_path: Path, world: World) -> Path:
    path = tmp_path / "session.msgpack"
    record_session(path, world, "A-1")
    world.tool.stop()
    return path


def test_show_lists_every_interaction_as_a_table(session: Path) -> None:
    result = cli("show", session)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0].startswith(f"{session}: 4 interaction(s), recorded ")
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


def test_diff_exit_code_says_whether_runs_differ(tmp_path: Path, world: World) -> None:
    session = tmp_path / "session.msgpack"
    record_session(session, world, "A-1")
    same = cli("diff", session, session)
    assert same.returncode == 0, same.stdout
    assert "no differences in 4 interaction(s)" in same.stdout

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
    assert "2 of 4 interaction(s) differ" in out


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


def test_export_json_keeps_every_byte(session: Path) -> None:
    import base64

    document = json.loads(cli("export", session, "--format", "json").stdout)
    cassette = agenttape.load(session)
    for entry, interaction in zip(document["interactions"], cassette.interactions, strict=True):
        if interaction.response is None:
            assert entry["error"]["kind"] == "connect_error"
            continue
        body = entry["response"]["body"]
        raw = body["text"].encode() if "text" in body else base64.b64decode(body["base64"])
        assert raw == interaction.response.body
        assert [tuple(c) for c in entry["response"]["chunks"]] == interaction.response.chunks
    gzip_entry = document["interactions"][2]["response"]["body"]
    assert "base64" in gzip_entry and gzip_entry["decoded"]["value"] == GZIP_DOCUMENT


def _check_har(har: dict[str, object]) -> None:
    """The required fields and types of HAR 1.2 (softwareishard.com/blog/har-12-spec)."""

    def need(obj: object, key: str, kind: type | tuple[type, ...]) -> object:
        assert isinstance(obj, dict), obj
        assert key in obj, f"missing {key} in {list(obj)}"
        assert isinstance(obj[key], kind), (key, obj[key])
        return obj[key]

    def pairs(items: object) -> None:
        assert isinstance(items, list)
        for item in items:
            need(item, "name", str)
            need(item, "value", str)

    log = need(har, "log", dict)
    assert need(log, "version", str) == "1.2"
    creator = need(log, "creator", dict)
    need(creator, "name", str)
    need(creator, "version", str)
    entries = need(log, "entries", list)
    assert isinstance(entries, list) and entries
    for entry in entries:
        need(entry, "startedDateTime", str)
        assert "T" in entry["startedDateTime"]
        need(entry, "time", (int, float))
        request = need(entry, "request", dict)
        for key, kind in (("method", str), ("url", str), ("httpVersion", str)):
            need(request, key, kind)
        for key in ("cookies", "headers", "queryString"):
            need(request, key, list)
        pairs(request["headers"])  # type: ignore[index]
        pairs(request["queryString"])  # type: ignore[index]
        need(request, "headersSize", int)
        need(request, "bodySize", int)
        if "postData" in request:  # type: ignore[operator]
            need(request["postData"], "mimeType", str)  # type: ignore[index]
            need(request["postData"], "text", str)  # type: ignore[index]
        response = need(entry, "response", dict)
        need(response, "status", int)
        need(response, "statusText", str)
        need(response, "httpVersion", str)
        need(response, "cookies", list)
        pairs(need(response, "headers", list))
        content = need(response, "content", dict)
        need(content, "size", int)
        need(content, "mimeType", str)
        need(response, "redirectURL", str)
        need(response, "headersSize", int)
        need(response, "bodySize", int)
        need(entry, "cache", dict)
        timings = need(entry, "timings", dict)
        for key in ("send", "wait", "receive"):
            assert need(timings, key, (int, float)) >= 0  # type: ignore[operator]
        total = sum(v for v in timings.values() if v != -1)  # type: ignore[union-attr]
        assert abs(total - entry["time"]) < 1e-6


def test_export_har_is_valid_har_1_2(session: Path, tmp_path: Path) -> None:
    out = tmp_path / "session.har"
    result = cli("export", session, "--format", "har", "-o", out)
    assert result.returncode == 0, result.stderr
    har = json.loads(out.read_text())
    _check_har(har)
    entries = har["log"]["entries"]
    assert len(entries) == 4
    openai_entry, _stream, tool, refused = entries
    assert openai_entry["request"]["postData"]["mimeType"] == "application/json"
    assert json.loads(openai_entry["request"]["postData"]["text"])["model"] == "gpt-4o-mini"
    assert json.loads(tool["response"]["content"]["text"]) == GZIP_DOCUMENT
    assert tool["response"]["content"]["compression"] > -100
    assert tool["response"]["bodySize"] == len(
        agenttape.load(session).interactions[2].response.body
    )  # type: ignore[union-attr]
    assert refused["response"]["status"] == 0 and refused["response"]["_error"].startswith(
        "connect_error"
    )


def test_redact_in_place_atomically(tmp_path: Path, serve: Callable[..., Server]) -> None:
    server = serve(lambda seen: json_reply({"ok": True}, headers=[("X-Session", "s-42")]))
    path = tmp_path / "c.msgpack"
    with agenttape.use_cassette(path, mode="all"):
        httpx.post(
            f"{server.url}/users?sig=abc&page=2",
            json={"user": {"email": "ada@example.com", "name": "Ada"}},
            headers={"X-Org-Id": "org-7"},
        )
    before = agenttape.load(path).interactions[0]
    result = cli(
        "redact", path, "--header", "x-org-id", "--header", "x-session", "--query", "sig",
        "--json-path", "user.email",
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert "redacted 1 of 1 interaction(s)" in result.stdout
    after = agenttape.load(path).interactions[0]
    assert ("X-Org-Id", "<redacted>") in after.request.headers
    assert "sig=%3Credacted%3E" in after.request.url or "sig=<redacted>" in after.request.url
    assert "page=2" in after.request.url
    assert json.loads(after.request.body) == {"user": {"email": "<redacted>", "name": "Ada"}}
    assert after.response is not None and before.response is not None
    assert ("X-Session", "<redacted>") in after.response.headers
    assert after.response.body == before.response.body
    assert after.response.chunks == before.response.chunks
    assert sorted(p.name for p in tmp_path.iterdir()) == ["c.msgpack"]  # no temporary left
    again = cli("redact", path, "--header", "x-org-id")
    assert "nothing to redact" in again.stdout
    assert_one_line_error(cli("redact", path, "--regex", "("), "bad regex")


def _crafted(path: Path, interactions: list[Interaction]) -> None:
    """A cassette written by another tool or an older version: no redaction ran over it."""
    path.write_bytes(_format.encode(_meta.new_header(), interactions))


SECRETS = {
    "openai-key": "sk-proj-" + "a1B2c3D4" * 5,
    "anthropic-key": "sk-ant-api03-" + "Zz9Yy8Xx" * 5,
    "aws-access-key-id": "AKIA" + "ABCDEFGHIJKLMNOP",
    "google-api-key": "AIza" + "S" * 35,
    "github-token": "ghp_" + "q" * 36,
    "slack-token": "xoxb-" + "1234567890-abcdef",
    "bearer-token": "Bearer " + "eyJhbGciOiJIUzI1NiJ9.payload.signature",
    "private-key": "-----BEGIN RSA PRIVATE KEY-----",
}


def test_audit_finds_every_credential_shape_and_exits_1(tmp_path: Path) -> None:
    gz = gzip.compress(json.dumps({"token": SECRETS["github-token"]}).encode())
    interactions = [
        Interaction(
            Request("GET", f"https://example.com/v1/x?key={SECRETS['google-api-key']}&page=1"),
            Response(200, headers=[("X-Amz-Key", SECRETS["aws-access-key-id"])], body=b"{}"),
        ),
        Interaction(
            Request(
                "POST",
                "https://api.example.com/v1/messages",
                headers=[("Authorization", SECRETS["bearer-token"])],
                body=json.dumps(
                    {"k": SECRETS["anthropic-key"], "o": SECRETS["openai-key"]}
                ).encode(),
            ),
            Response(
                200,
                headers=[("Content-Encoding", "gzip"), ("Content-Type", "application/json")],
                body=gz,
            ),
        ),
        Interaction(
            Request("POST", "https://hooks.example.com/", body=SECRETS["slack-token"].encode()),
            Response(200, body=f"{SECRETS['private-key']}\nMIIE...".encode()),
        ),
    ]
    dirty = tmp_path / "cassettes" / "dirty.msgpack"
    dirty.parent.mkdir()
    _crafted(dirty, interactions)
    result = cli("audit", tmp_path / "cassettes")
    assert result.returncode == 1, result
    out = result.stdout
    for kind in SECRETS:
        assert f" {kind} " in out, (kind, out)
    assert "response body (decompressed): github-token ghp_qq" in out
    assert "request header Authorization: bearer-token" in out
    for secret in SECRETS.values():
        assert secret not in out + result.stderr  # masked, never printed whole
    assert "secret(s) found in 1 cassette(s)" in result.stderr


def test_audit_is_clean_on_recorded_cassettes(session: Path) -> None:
    result = cli("audit", session)
    assert result.returncode == 0, result.stdout
    assert "0 secret(s) found in 1 cassette(s)" in result.stdout


def test_redact_then_audit_is_clean(tmp_path: Path) -> None:
    path = tmp_path / "old.msgpack"
    _crafted(
        path,
        [
            Interaction(
                Request(
                    "POST",
                    "https://api.example.com/v1?api_key=plain-value",
                    headers=[
                        ("x-api-key", "plain-value"),
                        ("Authorization", SECRETS["bearer-token"]),
                    ],
                    body=json.dumps({"key": SECRETS["openai-key"]}).encode(),
                ),
                Response(200, headers=[("Set-Cookie", "session=abc")], body=b"ok"),
            )
        ],
    )
    found = cli("audit", path)
    assert found.returncode == 1
    assert "unredacted-secret-query" in found.stdout and "unredacted-secret-header" in found.stdout
    assert cli("redact", path).returncode == 0
    assert cli("audit", path).returncode == 0


def test_every_command_has_help() -> None:
    for command in ("show", "diff", "export", "import-vcr", "redact", "audit", "run"):
        result = cli(command, "--help")
        assert result.returncode == 0 and result.stdout.startswith("usage: agenttape " + command)
    module = subprocess.run(
        [sys.executable, "-m", "agenttape", "--help"], capture_output=True, text=True, check=True
    )
    assert "import-vcr" in module.stdout


def test_bad_usage_and_bad_files_give_one_line_and_exit_2(tmp_path: Path, session: Path) -> None:
    missing = tmp_path / "missing.msgpack"
    corrupt = tmp_path / "corrupt.msgpack"
    corrupt.write_bytes(session.read_bytes()[:-40])
    assert_one_line_error(cli("frobnicate"), "invalid choice")
    assert_one_line_error(cli("show"), "CASSETTE")
    assert_one_line_error(cli("show", session, "-i", "x"), "invalid int")
    assert_one_line_error(cli("show", session, "-i", "9"), "out of range")
    assert_one_line_error(cli("diff", session), "B")
    assert_one_line_error(cli("export", session, "--format", "xml"), "invalid choice")
    assert_one_line_error(cli("run", "--mode", "sometimes", "--", "true"), "invalid choice")
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
        assert_one_line_error(cli(*command), str(missing))
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

    from agenttape._cli import render_plain, render_rich

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
