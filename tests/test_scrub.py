"""``agenttape redact`` on response bodies: streams keep their pieces, compressed bodies stay
compressed, and the result replays offline."""

from __future__ import annotations

import gzip
import json
import re
from collections.abc import Callable
from pathlib import Path

import httpx

import agenttape
from agenttape._core import meta
from agenttape._core.models import Interaction, Request, Response
from agenttape._core.wire import codec
from agenttape._tools.redact import _substitute
from tests.cli_support import assert_one_line_error, cli
from tests.servers import Seen, Server, gzip_reply, json_reply, sse_reply

KEY = "sk-ant-api03-" + "Q7" * 20
EVENTS = [
    b'data: {"text": "your new key is "}\n\n',
    f'data: {{"text": "{KEY[:20]}'.encode(),  # the key is split across two chunks
    f'{KEY[20:]}"}}\n\n'.encode(),
    b'data: {"text": " keep it safe"}\n\n',
]


def _app(seen: Seen) -> object:
    if seen.path == "/stream":
        return sse_reply(EVENTS)
    return gzip_reply(json.dumps({"key": KEY, "email": "ada@example.com"}).encode())


def test_substitute_moves_chunk_boundaries_with_the_text() -> None:
    data = b"aaaSECRETbbbSECRETcc"
    out, cuts = _substitute(data, re.compile(b"SECRET"), b"<redacted>", [2, 5, 10, 18, 19])
    assert out == b"aaa<redacted>bbb<redacted>cc"
    # before a match: unchanged; inside one: its replacement's end; after: shifted
    assert cuts == [2, 13, 14, 26, 27]


def test_redact_response_bodies_then_replay(tmp_path: Path, serve: Callable[..., Server]) -> None:
    server = serve(_app)
    path = tmp_path / "leak.msgpack"
    with agenttape.use_cassette(path, mode="all"), httpx.Client() as client:
        with client.stream("GET", f"{server.url}/stream") as response:
            response.read()
        client.get(f"{server.url}/account")
    server.stop()
    assert cli("audit", path).returncode == 1  # recording leaves response bodies as they came

    result = cli("redact", path, "--json-path", "email")
    assert result.returncode == 0, result.stderr
    assert cli("audit", path).returncode == 0

    stream, account = agenttape.load(path).interactions
    assert stream.response is not None and account.response is not None
    body = b"".join(EVENTS).replace(KEY.encode(), b"<redacted>")
    assert stream.response.body == body
    sizes = [size for size, _offset in stream.response.chunks]
    assert sizes == [
        len(EVENTS[0]),
        len(EVENTS[1]) - 20 + len(b"<redacted>"),
        len(EVENTS[2]) - (len(KEY) - 20),  # the rest of the key went with it
        len(EVENTS[3]),
    ]
    assert account.response.body[:2] == b"\x1f\x8b"  # still gzip
    assert json.loads(gzip.decompress(account.response.body)) == {
        "key": "<redacted>",
        "email": "<redacted>",
    }
    assert account.response.header("content-length") == str(len(account.response.body))

    with agenttape.use_cassette(path), httpx.Client() as client:
        with client.stream("GET", f"{server.url}/stream") as response:
            pieces = list(response.iter_raw())
        assert b"".join(pieces) == body
        assert [len(piece) for piece in pieces] == sizes
        assert client.get(f"{server.url}/account").json()["key"] == "<redacted>"


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
    path.chmod(0o644)
    result = cli(
        "redact", path, "--header", "x-org-id", "--header", "x-session", "--query", "sig",
        "--json-path", "user.email",
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert "redacted 1 of 1 interaction" in result.stdout
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
    assert path.stat().st_mode & 0o777 == 0o644
    again = cli("redact", path, "--header", "x-org-id")
    assert "nothing to redact" in again.stdout
    assert_one_line_error(cli("redact", path, "--regex", "("), "bad regex")


def test_redact_through_a_symlink_cleans_the_file_it_points_to(tmp_path: Path) -> None:
    target = tmp_path / "store" / "real.msgpack"
    target.parent.mkdir()
    body = json.dumps({"key": KEY}).encode()
    interaction = Interaction(
        Request("GET", "https://api.example.com/v1"), Response(200, body=body, chunks=[(9, 0.0)])
    )
    target.write_bytes(codec.encode(meta.new_header(), [interaction]))
    target.chmod(0o640)
    link = tmp_path / "link.msgpack"
    link.symlink_to(target)
    result = cli("redact", link)
    assert result.returncode == 0, result.stderr
    assert link.is_symlink() and link.resolve() == target
    assert KEY.encode() not in target.read_bytes()
    assert target.stat().st_mode & 0o777 == 0o640
    assert sorted(p.name for p in target.parent.iterdir()) == ["real.msgpack"]


def test_redact_a_body_stored_without_chunk_boundaries(tmp_path: Path) -> None:
    """A cassette written by another tool may keep a body and no chunk list."""
    path = tmp_path / "bare.msgpack"
    interaction = Interaction(Request("GET", "https://x.test/"), Response(200, body=KEY.encode()))
    path.write_bytes(codec.encode(meta.new_header(), [interaction]))
    result = cli("redact", path)
    assert result.returncode == 0, result.stderr
    (stored,) = agenttape.load(path).interactions
    assert stored.response is not None
    assert (stored.response.body, stored.response.chunks) == (b"<redacted>", [])


def test_a_key_across_the_pieces_of_a_large_compressed_body_is_redacted(tmp_path: Path) -> None:
    """A compressed body is rewritten piece by piece: a key where one piece ends and the next
    begins goes whole, and every other byte stays."""
    text = b"x" * ((1 << 20) - 10) + f" {KEY} ".encode() + b"y" * (1 << 20)
    body = gzip.compress(text)
    path = tmp_path / "large.msgpack"
    response = Response(
        200, headers=[("Content-Encoding", "gzip")], body=body, chunks=[(len(body), 0.0)]
    )
    path.write_bytes(
        codec.encode(meta.new_header(), [Interaction(Request("GET", "https://x.test/"), response)])
    )
    assert cli("redact", path).returncode == 0
    (stored,) = agenttape.load(path).interactions
    assert stored.response is not None
    assert gzip.decompress(stored.response.body) == text.replace(KEY.encode(), b"<redacted>")
