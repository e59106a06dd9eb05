"""``agenttape export``: lossless JSON and HAR 1.2."""

from __future__ import annotations

import base64
import json
from collections.abc import Callable
from pathlib import Path

import httpx

import agenttape
from tests.cli_support import (
    GZIP_DOCUMENT,
    cli,
)
from tests.servers import Server, json_reply


def test_export_json_keeps_every_byte(session: Path) -> None:

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


def test_every_export_is_strict_json_even_with_nan_and_infinity(
    serve: Callable[..., Server], tmp_path: Path
) -> None:
    """A NaN in a request body (``temperature``) or a tag is not a JSON number: strict readers
    (OTLP receivers among them) reject a bare ``NaN``; the exports write it as a string."""
    server = serve(lambda seen: json_reply({"choices": []}))
    cassette = tmp_path / "nan.msgpack"
    body = b'{"model": "gpt-4o-mini", "temperature": NaN, "top_p": Infinity, "messages": []}'
    with agenttape.use_cassette(
        cassette, mode="all", tags={"score": float("nan"), "ceiling": float("-inf")}
    ):
        httpx.post(f"{server.url}/v1/chat/completions", content=body)

    def strict(constant: str) -> None:
        raise ValueError(f"{constant} is not JSON")

    for form in ("json", "har", "otlp"):
        result = cli("export", cassette, "--format", form)
        assert result.returncode == 0, result.stderr
        document = json.loads(result.stdout, parse_constant=strict)
        assert document
    otlp = json.loads(cli("export", cassette, "--format", "otlp").stdout)
    spans = otlp["resourceSpans"][0]["scopeSpans"][0]["spans"]
    values = {
        attribute["key"]: attribute["value"] for span in spans for attribute in span["attributes"]
    }
    assert values["gen_ai.request.temperature"] == {"doubleValue": "NaN"}
    assert values["gen_ai.request.top_p"] == {"doubleValue": "Infinity"}
    assert values["agenttape.tag.score"] == {"doubleValue": "NaN"}
    assert values["agenttape.tag.ceiling"] == {"doubleValue": "-Infinity"}
