"""``agenttape import-vcr`` on cassettes recorded by vcrpy itself, then replayed offline."""

from __future__ import annotations

import gzip
import json
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest
import requests
import vcr

import agenttape
from agenttape._tools.vcr import VcrImportError, check_yaml, may_hold_anchor
from tests.cli_support import assert_one_line_error, cli, run_bounded
from tests.servers import Reply, Seen, Server, gzip_reply, json_reply

BINARY = bytes(range(256)) * 4
PAYLOAD = json.dumps({"order": "A-1", "status": "shipped", "note": "é ✓"}).encode()
VCRPY = tuple(int(part) for part in vcr.__version__.split(".")[:2])


def app(seen: Seen) -> Reply:
    if seen.path == "/gzip":
        return gzip_reply(PAYLOAD)
    if seen.path == "/binary":
        return Reply(headers=[("Content-Type", "application/octet-stream")], chunks=[BINARY])
    if seen.path == "/upload":
        return json_reply({"received": len(seen.body), "first": seen.body[:4].hex()})
    return json_reply({"page": dict(seen.query).get("page")})


def test_vcrpy_httpx_cassettes_convert_byte_exact_and_replay_offline(
    tmp_path: Path, serve: Callable[..., Server]
) -> None:
    server = serve(app)
    source = tmp_path / "vcr_cassette.yaml"
    with vcr.VCR(record_mode="all").use_cassette(str(source)), httpx.Client() as client:
        page = client.get(f"{server.url}/items?page=2").json()
        compressed = client.get(f"{server.url}/gzip")
        binary = client.get(f"{server.url}/binary")
    assert compressed.content == PAYLOAD and binary.content == BINARY
    assert "!!binary" in source.read_text()  # vcrpy kept the raw gzip and binary bytes

    target = tmp_path / "converted.msgpack"
    result = cli("import-vcr", source, target)
    assert result.returncode == 0, result.stderr
    assert "converted 3 interactions" in result.stdout and "note:" not in result.stdout
    server.stop()

    cassette = agenttape.load(target)
    stored = cassette.interactions[1].response
    assert stored is not None
    assert stored.body == gzip.compress(PAYLOAD, mtime=0)  # still compressed, byte for byte
    assert ("content-encoding", "gzip") in [(k.lower(), v) for k, v in stored.headers]
    assert cassette.interactions[2].response.body == BINARY  # type: ignore[union-attr]
    assert cassette.metadata["imported_from"]["format"] == "vcrpy"

    with agenttape.use_cassette(target) as tape, httpx.Client() as client:
        assert client.get(f"{server.url}/items?page=2").json() == page
        assert client.get(f"{server.url}/gzip").content == PAYLOAD
        assert client.get(f"{server.url}/binary").content == BINARY
        assert tape.all_played


@pytest.mark.skipif(
    VCRPY < (8, 0),
    reason="vcrpy before 8.0 decodes an httpx request body as UTF-8 (httpx_stubs."
    "_make_vcr_request) and cannot record a binary one; 8.0 reads it as bytes through httpcore",
)
def test_a_binary_httpx_upload_vcrpy_recorded_converts_byte_exact(
    tmp_path: Path, serve: Callable[..., Server]
) -> None:
    server = serve(app)
    source = tmp_path / "upload.yaml"
    with vcr.VCR(record_mode="all").use_cassette(str(source)), httpx.Client() as client:
        upload = client.post(f"{server.url}/upload", content=BINARY[:300]).json()
    target = tmp_path / "converted.msgpack"
    assert cli("import-vcr", source, target).returncode == 0
    server.stop()

    (interaction,) = agenttape.load(target).interactions
    assert interaction.request.body == BINARY[:300]
    with agenttape.use_cassette(target) as tape, httpx.Client() as client:
        assert client.post(f"{server.url}/upload", content=BINARY[:300]).json() == upload
        assert tape.all_played


def test_vcrpy_json_serializer_cassettes(tmp_path: Path, serve: Callable[..., Server]) -> None:
    server = serve(app)
    source = tmp_path / "cassette.json"
    with vcr.VCR(serializer="json", record_mode="all").use_cassette(str(source)):
        page = requests.get(f"{server.url}/items?page=3").json()
        upload = requests.post(f"{server.url}/upload", json={"q": "é"}).json()
    target = tmp_path / "converted.msgpack"
    assert cli("import-vcr", source, target).returncode == 0
    server.stop()
    with agenttape.use_cassette(target), httpx.Client() as client:
        assert client.get(f"{server.url}/items?page=3").json() == page
        assert client.post(f"{server.url}/upload", json={"q": "é"}).json() == upload


def test_vcrpy_requests_cassettes_with_bodies_vcrpy_decompressed(
    tmp_path: Path, serve: Callable[..., Server]
) -> None:
    """vcrpy over urllib3 2 stores a gzip body decompressed under a Content-Encoding: gzip
    header; the converter drops that header so a client does not decompress twice."""
    server = serve(app)
    source = tmp_path / "requests.yaml"
    with vcr.VCR(record_mode="all").use_cassette(str(source)):
        session = requests.Session()
        compressed = session.get(f"{server.url}/gzip")
        binary = session.get(f"{server.url}/binary")
    assert compressed.content == PAYLOAD and binary.content == BINARY
    target = tmp_path / "converted.msgpack"
    result = cli("import-vcr", source, target)
    assert result.returncode == 0, result.stderr
    assert "already decompressed" in result.stdout
    server.stop()

    stored = agenttape.load(target).interactions[0].response
    assert stored is not None and stored.body == PAYLOAD
    assert ("Content-Length", str(len(PAYLOAD))) in stored.headers
    assert all(k.lower() != "content-encoding" for k, _ in stored.headers)
    with agenttape.use_cassette(target), httpx.Client() as client:
        assert client.get(f"{server.url}/gzip").content == PAYLOAD
        assert client.get(f"{server.url}/binary").content == BINARY


def test_import_vcr_rejects_what_is_not_a_vcrpy_cassette(tmp_path: Path) -> None:
    not_vcr = tmp_path / "other.yaml"
    not_vcr.write_text("just: [a, list]\n")
    broken = tmp_path / "broken.yaml"
    broken.write_text("interactions: [\n")
    out = tmp_path / "out.msgpack"
    assert_one_line_error(cli("import-vcr", not_vcr, out), str(not_vcr), "not a vcrpy cassette")
    assert_one_line_error(cli("import-vcr", broken, out), str(broken), "not a vcrpy cassette")
    assert not out.exists()
    out.write_bytes(b"keep me")
    good = tmp_path / "good.yaml"
    good.write_text("interactions: []\nversion: 1\n")
    assert_one_line_error(cli("import-vcr", good, out), "exists", "--force")
    assert out.read_bytes() == b"keep me"
    assert cli("import-vcr", good, out, "--force").returncode == 0
    assert agenttape.load(out).interactions == []


def laughs(levels: int) -> str:
    """A vcrpy cassette whose response header stands for 9**levels copies of a word: under
    1 KB of YAML, gigabytes once its aliases are expanded (billion laughs)."""
    anchors = ["&a0 [lol, lol, lol, lol, lol, lol, lol, lol, lol]"]
    anchors += [f"&a{n} [{', '.join([f'*a{n - 1}'] * 9)}]" for n in range(1, levels + 1)]
    return (
        "interactions:\n"
        f"- laughs: [{', '.join(anchors)}]\n"
        "  request: {body: null, headers: {}, method: GET, uri: 'http://127.0.0.1/'}\n"
        "  response:\n"
        "    status: {code: 200, message: OK}\n"
        f"    headers: {{X-Laughs: *a{levels}}}\n"
        "    body: {string: ok}\n"
        "version: 1\n"
    )


def hidden_laughs(levels: int) -> str:
    """``laughs`` with every anchor where a check looking for one after a space, a line's
    start or a flow indicator misses it: behind a byte order mark at a line's start, which
    libyaml skips there. The request's URL holds the harmless kind of ``&``."""
    lines = ["a0:", "\ufeff&a0 [lol, lol, lol, lol, lol, lol, lol, lol, lol]"]
    for n in range(1, levels + 1):
        lines += [f"a{n}:", f"\ufeff&a{n} [{', '.join([f'*a{n - 1}'] * 9)}]"]
    return "\n".join(lines) + (
        "\ninteractions:\n"
        "- request: {body: null, headers: {}, method: GET, uri: 'http://127.0.0.1/?a=1&b=2'}\n"
        "  response:\n"
        "    status: {code: 200, message: OK}\n"
        f"    headers: {{X-Laughs: *a{levels}}}\n"
        "    body: {string: ok}\n"
        "version: 1\n"
    )


def test_import_vcr_refuses_a_yaml_alias_bomb_in_bounded_time_and_memory(tmp_path: Path) -> None:
    source = tmp_path / "laughs.yaml"
    source.write_text(laughs(9))
    assert source.stat().st_size < 1024
    target = tmp_path / "out.msgpack"
    result = run_bounded("import-vcr", source, target)
    assert result.seconds < 30 and result.peak < 128 << 20, result
    assert_one_line_error(result, "laughs.yaml", "alias bomb")
    assert not target.exists()


def test_import_vcr_converts_a_cassette_whose_aliases_are_few(tmp_path: Path) -> None:
    """vcrpy writes an alias for an object it met twice: that is no bomb."""
    source = tmp_path / "shared.yaml"
    source.write_text(laughs(2))
    result = cli("import-vcr", source, tmp_path / "out.msgpack")
    assert result.returncode == 0, result.stderr
    (interaction,) = agenttape.load(tmp_path / "out.msgpack").interactions
    assert interaction.response is not None
    assert len([v for k, v in interaction.response.headers if k == "X-Laughs"]) == 9


def test_anchors_a_byte_order_mark_hides_are_still_held_to_the_bounds() -> None:
    """libyaml reads them as anchors (vcrpy's loader expands them), so the check walks the
    file and refuses the bomb naming it."""
    from vcr.serialize import deserialize
    from vcr.serializers import yamlserializer

    _requests, responses = deserialize(hidden_laughs(2), yamlserializer)
    laughs_header = responses[0]["headers"]["X-Laughs"]
    assert [len(row) for row in laughs_header] == [9] * 9
    with pytest.raises(VcrImportError, match=r"^hidden\.yaml: .*alias bomb"):
        check_yaml(hidden_laughs(9), "hidden.yaml")


@pytest.mark.parametrize(
    "text",
    [
        "&a [1]\n",
        "a: &a [1]\n",
        "a: [&a 1, *a]\n",
        "a: {&a b: 1}\n",
        'a: {"b":&a 1}\n',
        "a:\n- &a 1\n",
        "a:\n\t&a 1\n",
        "a:\n\ufeff&a [1]\n",
        "a: b\x85&a c\n",
        "a: x, &a 1\n",
        "a: !!str &a b\n",
        "a: 'q' &_ b\n",
    ],
)
def test_an_ampersand_that_may_start_an_anchor_sends_the_file_to_the_full_check(
    text: str,
) -> None:
    assert may_hold_anchor(text)


@pytest.mark.parametrize(
    "text",
    [
        "uri: 'https://x.test/?a=1&b=2&C3=x'\n",
        "body: {string: 'Q & A: x &, y &] z&'}\n",
        "a: b\n",
    ],
)
def test_a_file_whose_ampersands_cannot_start_an_anchor_is_not_walked(text: str) -> None:
    assert not may_hold_anchor(text)
