"""Converts vcrpy cassettes, read with vcrpy's own deserializer so every quirk of its format
(``!!binary`` bodies, header lists, the JSON serializer) is read exactly as vcrpy reads it."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from ._errors import AgentTapeError
from ._models import Headers, Interaction, Request, Response
from ._redaction import Redactor


class VcrImportError(AgentTapeError):
    """The file is not a vcrpy cassette this converter can read."""


def _headers(raw: Any) -> Headers:
    headers: Headers = []
    items = raw.items() if hasattr(raw, "items") else raw or []
    for name, values in items:
        for value in values if isinstance(values, (list, tuple)) else [values]:
            if isinstance(value, bytes):
                value = value.decode("latin-1")
            headers.append((str(name), str(value)))
    return headers


def _bytes(value: Any) -> bytes:
    if value is None:
        return b""
    if isinstance(value, str):
        return value.encode("utf-8")
    if hasattr(value, "read"):
        return bytes(value.read())
    if isinstance(value, (bytes, bytearray, memoryview)):
        return bytes(value)
    return b"".join(_bytes(part) for part in value)


def read_vcr(path: str | os.PathLike[str]) -> list[Interaction]:
    """Interactions of a vcrpy cassette (YAML, or JSON when the name ends in .json); the
    default redaction runs over them, as it does over anything agenttape writes."""
    try:
        from vcr.serialize import deserialize
        from vcr.serializers import jsonserializer, yamlserializer
    except ImportError:
        raise VcrImportError("import-vcr needs vcrpy: pip install 'agenttape[vcr]'") from None
    name = os.fspath(path)
    try:
        text = Path(path).read_text(encoding="utf-8")
    except FileNotFoundError:
        raise VcrImportError(f"{name}: no such file") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise VcrImportError(f"{name}: cannot be read as a vcrpy cassette ({exc})") from None
    serializer = jsonserializer if name.endswith(".json") else yamlserializer
    try:
        requests, responses = deserialize(text, serializer)[:2]
    except Exception as exc:
        reason = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise VcrImportError(f"{name}: not a vcrpy cassette ({reason})") from None
    redactor = Redactor()
    interactions = []
    for index, (vcr_request, vcr_response) in enumerate(zip(requests, responses, strict=True)):
        try:
            status = vcr_response["status"]
            body_field = vcr_response.get("body") or {}
            body = _bytes(body_field.get("string", vcr_response.get("content")))
            response = Response(
                status=int(status["code"]),
                reason=str(status.get("message") or ""),
                headers=_headers(vcr_response.get("headers")),
                body=body,
                chunks=[(len(body), 0.0)] if body else [],
            )
            request = Request(
                method=str(vcr_request.method).upper(),
                url=str(vcr_request.uri),
                headers=_headers(vcr_request.headers),
                body=_bytes(vcr_request.body),
            )
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise VcrImportError(f"{name}: interaction {index} is malformed ({exc!r})") from None
        interactions.append(
            Interaction(request=redactor.request(request), response=redactor.response(response))
        )
    return interactions
