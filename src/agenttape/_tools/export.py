"""Cassettes as JSON for reading and as HAR 1.2 for browser devtools and HAR viewers."""

from __future__ import annotations

import base64
import datetime as _dt
import json
import math
from collections.abc import Callable
from http.cookies import CookieError, SimpleCookie
from typing import Any
from urllib.parse import parse_qsl, urlsplit

from .._core.models import Headers, Interaction, Request, Response, first_header
from .._core.text import counted, iso
from .._core.wire import grpc as grpc_wire
from .._version import __version__
from . import frames
from .reading import body_end, decode_within_budget, llm_fields, readable_body


def jsonable(value: Any) -> Any:
    """Header metadata made JSON-safe: datetimes as ISO 8601, bytes as base64."""
    if isinstance(value, dict):
        return {str(key): jsonable(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [jsonable(item) for item in value]
    if isinstance(value, _dt.datetime):
        return value.isoformat()
    if isinstance(value, bytes):
        return {"base64": base64.b64encode(value).decode("ascii")}
    return value


_NON_FINITE = {"nan": "NaN", "inf": "Infinity", "-inf": "-Infinity"}


def finite(value: Any) -> Any:
    """``value`` with every NaN or infinite float written as the string proto3's JSON mapping
    (and OTLP/JSON) reads (``"NaN"``, ``"Infinity"``, ``"-Infinity"``): JSON has no such
    numbers, and a strict reader rejects a bare ``NaN``."""
    if isinstance(value, float):
        return value if math.isfinite(value) else _NON_FINITE[repr(value)]
    if isinstance(value, dict):
        return {key: finite(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [finite(item) for item in value]
    return value


def dumps(document: Any, **options: Any) -> str:
    """Strict JSON text of an export: never a bare ``NaN`` or ``Infinity``."""
    return json.dumps(finite(document), allow_nan=False, **options)


def _body(headers: Headers, body: bytes) -> dict[str, Any]:
    """The stored bytes losslessly (text when they are UTF-8), plus a readable form when the
    body is compressed, JSON or a stream of events."""
    out: dict[str, Any] = {"size": len(body)}
    try:
        out["text"] = body.decode("utf-8")
    except UnicodeDecodeError:
        out["base64"] = base64.b64encode(body).decode("ascii")
    kind, value, note = readable_body(headers, body)
    if kind in ("json", "sse", "grpc") or (kind == "text" and "text" not in out):
        out["decoded"] = {"kind": kind, "value": value}
    if note:
        out["note"] = note
    return out


def exchange_json(
    interaction: Interaction, body: Callable[[Headers, bytes], dict[str, Any]]
) -> dict[str, Any]:
    """What was sent and what came back, each body rendered by ``body``; shared by the JSON
    export and ``agenttape show -i N --json``."""
    request, response, error = interaction.request, interaction.response, interaction.error
    out: dict[str, Any] = {
        "llm": llm_fields(interaction),
        "request": {
            "headers": [list(pair) for pair in request.headers],
            "body": body(request.headers, request.body),
        },
        "response": None,
        "error": None,
    }
    if response is not None:
        out["response"] = {
            "status": response.status,
            "reason": response.reason,
            "http_version": response.http_version,
            "headers": [list(pair) for pair in response.headers],
            "body": body(response.headers, response.body),
            "chunks": [list(chunk) for chunk in response.chunks],
            "truncated": response.truncated,
            "body_end": body_end(interaction),
        }
        if response.trailers:
            out["response"]["trailers"] = [list(pair) for pair in response.trailers]
        call = grpc_wire.summary(interaction)
        if call is not None:
            method, code, details = call
            out["grpc"] = {
                "method": method,
                "status": code,
                "status_name": grpc_wire.status_name(code),
                "details": details,
            }
    if error is not None:
        out["error"] = {"kind": error.kind, "type": error.type, "message": error.message}
    return out


def to_json(header: dict[str, Any], interactions: list[Interaction]) -> dict[str, Any]:
    entries = []
    for index, interaction in enumerate(interactions):
        request = interaction.request
        exchange = exchange_json(interaction, _body)
        exchange["request"] = {"method": request.method, "url": request.url, **exchange["request"]}
        entry = {
            "index": index,
            "boundary": interaction.boundary,
            "started_at": iso(interaction.started_at),
            "ttfb": interaction.ttfb,
            "duration": interaction.duration,
            **exchange,
        }
        if interaction.frames is not None:
            entry["websocket"] = frames.as_json(interaction)
        entries.append(entry)
    return {"header": jsonable(header), "interactions": entries}


# -- HAR 1.2 (http://www.softwareishard.com/blog/har-12-spec/) --------------------------------


def _har_headers(headers: Headers) -> list[dict[str, str]]:
    return [{"name": name, "value": value} for name, value in headers]


def _request_cookies(headers: Headers) -> list[dict[str, str]]:
    cookies = []
    for name, value in headers:
        if name.lower() == "cookie":
            for part in value.split(";"):
                key, equals, item = part.strip().partition("=")
                if equals:
                    cookies.append({"name": key, "value": item})
    return cookies


def _response_cookies(headers: Headers) -> list[dict[str, Any]]:
    cookies: list[dict[str, Any]] = []
    for name, value in headers:
        if name.lower() != "set-cookie":
            continue
        jar: SimpleCookie = SimpleCookie()
        try:
            jar.load(value)
        except CookieError:
            continue
        for morsel in jar.values():
            cookie: dict[str, Any] = {"name": morsel.key, "value": morsel.value}
            for attribute in ("path", "domain", "expires"):
                if morsel[attribute]:
                    cookie[attribute] = morsel[attribute]
            cookie["httpOnly"] = bool(morsel["httponly"])
            cookie["secure"] = bool(morsel["secure"])
            cookies.append(cookie)
    return cookies


def _har_entry(index: int, interaction: Interaction) -> dict[str, Any]:
    response, error = interaction.response, interaction.error
    http_version = response.http_version if response is not None else "HTTP/1.1"
    har_response = (
        _no_response(http_version) if response is None else _har_response(interaction, response)
    )
    if error is not None:
        har_response["_error"] = f"{error.kind}: {error.type}: {error.message}"
    wait = max(0.0, (interaction.ttfb or 0.0) * 1000)
    receive = max(0.0, (interaction.duration or 0.0) * 1000 - wait)
    entry: dict[str, Any] = {
        "startedDateTime": iso(interaction.started_at),
        "time": wait + receive,
        "request": _har_request(interaction.request, http_version),
        "response": har_response,
        "cache": {},
        "timings": {
            "blocked": -1,
            "dns": -1,
            "connect": -1,
            "ssl": -1,
            "send": 0,
            "wait": wait,
            "receive": receive,
        },
        "_index": index,
    }
    if response is not None and response.chunks:
        entry["_chunks"] = [list(chunk) for chunk in response.chunks]
    if interaction.frames is not None:
        entry["_resourceType"] = "websocket"
        entry["_webSocketMessages"] = frames.har_messages(interaction)
    return entry


def _har_request(request: Request, http_version: str) -> dict[str, Any]:
    """The request as HAR has it; a body that is not UTF-8 as base64."""
    har_request: dict[str, Any] = {
        "method": request.method,
        "url": request.url,
        "httpVersion": http_version,
        "cookies": _request_cookies(request.headers),
        "headers": _har_headers(request.headers),
        "queryString": [
            {"name": name, "value": value}
            for name, value in parse_qsl(urlsplit(request.url).query, keep_blank_values=True)
        ],
        "headersSize": -1,
        "bodySize": len(request.body),
    }
    if request.body:
        post: dict[str, Any] = {"mimeType": first_header(request.headers, "content-type") or ""}
        try:
            post["text"] = request.body.decode("utf-8")
        except UnicodeDecodeError:
            post["text"] = base64.b64encode(request.body).decode("ascii")
            post["_encoding"] = "base64"
        har_request["postData"] = post
    return har_request


def _har_response(interaction: Interaction, response: Response) -> dict[str, Any]:
    """The response as HAR has it, plus what HAR has no field for (trailers, a truncated
    body, how the body ended) under ``_`` names."""
    har_response: dict[str, Any] = {
        "status": response.status,
        "statusText": response.reason,
        "httpVersion": response.http_version,
        "cookies": _response_cookies(response.headers),
        "headers": _har_headers(response.headers),
        "content": _har_content(response),
        "redirectURL": first_header(response.headers, "location") or "",
        "headersSize": -1,
        "bodySize": len(response.body),
    }
    if response.trailers:
        har_response["_trailers"] = _har_headers(response.trailers)
    if response.truncated:
        har_response["_truncated"] = True
    har_response["_bodyEnd"] = body_end(interaction)
    return har_response


def _har_content(response: Response) -> dict[str, Any]:
    """The body decoded (gzip, br…) within budget: HAR's ``content`` holds it readable."""
    readable = decode_within_budget(response.headers, response.body)
    decoded = readable.data
    content: dict[str, Any] = {
        "size": len(decoded),
        "mimeType": first_header(response.headers, "content-type") or "x-unknown",
    }
    if readable.note:
        content["comment"] = readable.note
    if len(decoded) != len(response.body):
        content["compression"] = len(decoded) - len(response.body)
    if decoded:
        try:
            content["text"] = decoded.decode("utf-8")
        except UnicodeDecodeError:
            content["text"] = base64.b64encode(decoded).decode("ascii")
            content["encoding"] = "base64"
    return content


def _no_response(http_version: str) -> dict[str, Any]:
    """An exchange that got no response (an error): HAR still wants a response object."""
    return {
        "status": 0,
        "statusText": "",
        "httpVersion": http_version,
        "cookies": [],
        "headers": [],
        "content": {"size": 0, "mimeType": "x-unknown"},
        "redirectURL": "",
        "headersSize": -1,
        "bodySize": -1,
    }


def to_har(header: dict[str, Any], interactions: list[Interaction], name: str) -> dict[str, Any]:
    """HAR 1.2; only ``http`` interactions become entries (a function boundary has no HTTP
    request to show), each keeping its cassette index in ``_index``."""
    entries = [
        _har_entry(index, interaction)
        for index, interaction in enumerate(interactions)
        if interaction.boundary == "http"
    ]
    skipped = len(interactions) - len(entries)
    comment = f"agenttape cassette {name}, run {header.get('run_id', '?')}"
    if skipped:
        comment += f"; {counted(skipped, 'function-boundary interaction')} not shown"
    return {
        "log": {
            "version": "1.2",
            "creator": {"name": "agenttape", "version": __version__},
            "entries": entries,
            "comment": comment,
        }
    }
