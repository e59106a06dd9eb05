"""Converts vcrpy cassettes, read with vcrpy's own deserializer so every quirk of its format
(``!!binary`` bodies, header lists, the JSON serializer) is read exactly as vcrpy reads it."""

from __future__ import annotations

import os
import re
import zlib
from pathlib import Path
from typing import Any

from .._core.errors import AgentTapeError
from .._core.models import Headers, Interaction, Request, Response, first_header
from .._core.redaction import Redactor


class VcrImportError(AgentTapeError):
    """The file is not a vcrpy cassette this converter can read."""


ALIAS_FLOOR = 1 << 20
ALIAS_RATIO = 8
"""What a YAML file may stand for once its aliases are expanded: ``ALIAS_RATIO`` times its
own size, at least ``ALIAS_FLOOR`` (nodes plus scalar characters). vcrpy writes an alias
only for an object it met twice; a file past this is an alias bomb (billion laughs), where
a few hundred bytes stand for gigabytes."""

SCALAR_LIMIT = 64 << 20
"""The most characters one YAML scalar may hold (a body, a binary one's base64 included):
past it a cassette is refused, before its parser builds a copy of the value per step."""

# An ``&`` that may start an anchor: one followed by a space, a line break, a flow indicator or
# nothing never does (an anchor's name is at least one character, and none of those). Led by
# the literal, so the regex engine finds each by its fast scan.
_AMPERSAND = re.compile(r"&[^ \t\r\n,\[\]{}]")


def may_hold_anchor(text: str) -> bool:
    """False only when ``text`` provably holds no YAML anchor, so it has no alias to expand
    either: every ``&`` in it stands right after an ASCII letter or digit (a URL's
    ``?a=1&b=2``), where it is inside a scalar or a tag, or right after an anchor's or
    alias's name, which the parser refuses. Where an anchor may start is not listed (a
    space, a line break, a flow indicator, a byte order mark at a line's start, and
    whatever a parser may add): any other ``&`` counts as one."""
    for match in _AMPERSAND.finditer(text):
        start = match.start()
        before = text[start - 1] if start else ""
        if not (before.isascii() and before.isalnum()):
            return True
    return False


def not_a_cassette(name: str, error: Exception, hint: str = "") -> VcrImportError:
    """The refusal of a file its deserializer could not read, naming the file and where the
    parser stopped."""
    import yaml

    if isinstance(error, yaml.MarkedYAMLError):
        where = f" at line {error.problem_mark.line + 1}" if error.problem_mark else ""
        reason = "; ".join(filter(None, (error.context, error.problem))) + where
    else:
        reason = str(error).splitlines()[0] if str(error) else type(error).__name__
    return VcrImportError(f"{name}: not a vcrpy cassette ({reason}){hint}")


def check_yaml(text: str, name: str) -> None:
    """Refuses a YAML file whose aliases expand past ``ALIAS_FLOOR`` or which holds a scalar
    past ``SCALAR_LIMIT``; reads its events once, never building the document, so the check
    takes time and memory in proportion to the file. A file that provably holds no anchor
    (``may_hold_anchor``) and has no room for such a scalar is not walked. Nesting is the
    parser's to bound (libyaml stops at 1000 levels, the pure-Python loader at the
    interpreter's recursion limit): the deserializer's error, named with ``not_a_cassette``."""
    if len(text) <= SCALAR_LIMIT and not may_hold_anchor(text):
        return
    import yaml

    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    limit = max(ALIAS_FLOOR, ALIAS_RATIO * len(text))
    expanded: dict[str, int] = {}  # anchor -> what its node stands for, aliases expanded
    open_nodes: list[tuple[str | None, list[int]]] = []  # collections not yet ended
    total = 0

    def count(size: int) -> None:
        nonlocal total
        total += size
        if total > limit:
            raise VcrImportError(
                f"{name}: its YAML aliases stand for more than {limit} nodes and characters "
                f"(an alias bomb?); not read"
            )
        if open_nodes:
            open_nodes[-1][1][0] += size

    try:
        for event in yaml.parse(text, Loader=loader):
            if isinstance(event, yaml.ScalarEvent):
                if len(event.value) > SCALAR_LIMIT:
                    raise VcrImportError(
                        f"{name}: holds a YAML scalar of {len(event.value)} characters, more "
                        f"than the {SCALAR_LIMIT} a cassette may hold; not read"
                    )
                count(1 + len(event.value))
                if event.anchor:
                    expanded[event.anchor] = 1 + len(event.value)
            elif isinstance(event, yaml.AliasEvent):
                size = expanded.get(event.anchor)
                if size is None:
                    raise VcrImportError(
                        f"{name}: alias *{event.anchor} refers to a node that is not complete "
                        "(a recursive alias); not read"
                    )
                count(size)
            elif isinstance(event, yaml.CollectionStartEvent):
                count(1)
                open_nodes.append((event.anchor, [1]))
            elif isinstance(event, yaml.CollectionEndEvent):
                anchor, (size,) = open_nodes.pop()
                if anchor:
                    expanded[anchor] = size
                if open_nodes:  # already in ``total``, item by item: now in its parent
                    open_nodes[-1][1][0] += size
    except yaml.YAMLError:
        return  # not YAML: the deserializer says so


def _headers(raw: Any) -> Headers:
    headers: list[tuple[str, str]] = []
    items = raw.items() if hasattr(raw, "items") else raw or []
    for name, values in items:
        for value in values if isinstance(values, (list, tuple)) else [values]:
            if isinstance(value, bytes):
                value = value.decode("latin-1")
            headers.append((_as_sent(str(name)), _as_sent(str(value))))
    return headers


def _as_sent(text: str) -> str:
    """A header one character per byte, as every cassette holds headers: text vcrpy kept
    past Latin-1 is taken as the UTF-8 bytes a client sends for it."""
    if text.isascii() or max(text) <= "\xff":
        return text
    return text.encode("utf-8", "surrogateescape").decode("latin-1")


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


def _already_decoded(headers: Headers, body: bytes) -> bool:
    """True when the headers say gzip/deflate but the body is not: vcrpy with urllib3 2
    stores ``response.data``, which urllib3 has already decompressed."""
    encoding = (first_header(headers, "content-encoding") or "").strip().lower()
    if not body or encoding not in ("gzip", "x-gzip", "deflate"):
        return False
    if encoding != "deflate":
        return body[:2] != b"\x1f\x8b"
    for wbits in (zlib.MAX_WBITS, -zlib.MAX_WBITS):
        try:
            zlib.decompressobj(wbits).decompress(body[:64])
            return False
        except zlib.error:
            continue
    return True


def _drop_encoding(headers: Headers) -> Headers:
    """Headers that describe the decoded body vcrpy kept, so clients do not decode it again
    (its Content-Length is then fitted to it, as every body's is)."""
    return [(name, value) for name, value in headers if name.lower() != "content-encoding"]


_BODILESS_STATUS = frozenset((204, 304))


def _fit_length(headers: Headers, body: bytes, method: str, status: int) -> Headers:
    """Headers whose Content-Length is the length of the body as stored: a project's
    serializer that rebuilds a body (JSON from its parsed form) gives it another length than
    the one recorded, and vcrpy hands a client the whole body whatever the header says. An
    answer that has no body by its nature (HEAD, 1xx, 204, 304) keeps its length. One framed
    by Transfer-Encoding has none: a hook that wrote a Content-Length beside it (a server
    never sends both) made a head aiohttp's parser refuses, where vcrpy's stubs parse no
    head, and Transfer-Encoding decides the framing (RFC 9112, 6.3)."""
    if method == "HEAD" or status < 200 or status in _BODILESS_STATUS:
        return headers
    if first_header(headers, "transfer-encoding") is not None:
        return [(name, value) for name, value in headers if name.lower() != "content-length"]
    length = str(len(body))
    if all(value.strip() == length for name, value in headers if name.lower() == "content-length"):
        return headers
    return [
        (name, length if name.lower() == "content-length" else value) for name, value in headers
    ]


def load_serializer(spec: str) -> Any:
    """A project's own vcrpy serializer named ``module:attribute`` (an object or module with
    ``serialize`` and ``deserialize``), imported as the project's conftest would."""
    module_name, _, attribute = spec.partition(":")
    if not module_name or not attribute:
        raise VcrImportError(f"--serializer takes module:attribute, got {spec!r}")
    import importlib
    import sys

    if "" not in sys.path and os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())  # the project's own modules, as pytest finds them
    try:
        serializer: Any = importlib.import_module(module_name)
        for name in attribute.split("."):
            serializer = getattr(serializer, name)
    except (ImportError, AttributeError) as exc:
        raise VcrImportError(f"cannot import the serializer {spec}: {exc}") from None
    if not callable(getattr(serializer, "deserialize", None)):
        raise VcrImportError(f"{spec} has no deserialize(); it is not a vcrpy serializer")
    return serializer


def interaction_of(
    vcr_request: Any, vcr_response: Any, redactor: Redactor
) -> tuple[Interaction, bool]:
    """One interaction from vcrpy's request and response dict, the bytes as vcrpy stored
    them, the Content-Length fitted to the body (``_fit_length``); True beside it when the
    body was stored already decompressed (its Content-Encoding is then dropped)."""
    status = vcr_response["status"]
    body_field = vcr_response.get("body") or {}
    body = _bytes(body_field.get("string", vcr_response.get("content")))
    headers = _headers(vcr_response.get("headers"))
    decoded = _already_decoded(headers, body)
    if decoded:
        headers = _drop_encoding(headers)
    request = request_of(vcr_request)
    headers = _fit_length(headers, body, request.method, int(status["code"]))
    response = Response(
        status=int(status["code"]),
        reason=str(status.get("message") or ""),
        headers=redactor.response_headers(headers),
        body=body,
        chunks=[(len(body), 0.0)] if body else [],
    )
    return Interaction(request=redactor.request(request), response=response), decoded


def request_of(vcr_request: Any) -> Request:
    """vcrpy's request in agenttape's model."""
    return Request(
        method=str(vcr_request.method).upper(),
        url=str(vcr_request.uri),
        headers=_headers(vcr_request.headers),
        body=_bytes(vcr_request.body),
    )


def vcr_request_of(request: Request) -> Any:
    """agenttape's request as vcrpy's, as vcrpy's stubs build it: the body as bytes, the
    headers one value per name (repeated ones joined by a comma, as httpx gives them)."""
    from vcr.request import Request as VcrRequest

    headers: dict[str, str] = {}
    for name, value in request.headers:
        known = headers.get(name)
        headers[name] = value if known is None else f"{known}, {value}"
    return VcrRequest(request.method, request.url, request.body, headers)


def vcr_response_of(interaction: Interaction) -> dict[str, Any]:
    """An interaction's response as vcrpy's dict: what ``vcr.responses`` holds."""
    response = interaction.response
    if response is None:  # a transport error: vcrpy has no word for one
        return {"status": {"code": 0, "message": ""}, "headers": {}, "body": {"string": b""}}
    headers: dict[str, list[str]] = {}
    for name, value in response.headers:
        headers.setdefault(name, []).append(value)
    return {
        "status": {"code": response.status, "message": response.reason},
        "headers": headers,
        "body": {"string": response.body},
    }


def read_vcr(path: str | os.PathLike[str], serializer: Any = None) -> tuple[list[Interaction], int]:
    """Interactions of a vcrpy cassette (YAML, or JSON when the name ends in .json, or
    through ``serializer``, a project's own), and how many response bodies vcrpy had stored
    already decompressed (their Content-Encoding is dropped). The default redaction runs
    over them, as over anything agenttape writes."""
    try:
        from vcr.serialize import deserialize
        from vcr.serializers import jsonserializer, yamlserializer
    except ImportError:
        raise VcrImportError("import-vcr needs vcrpy: pip install vcrpy") from None
    name = os.fspath(path)
    try:
        text = Path(path).read_text(encoding="utf-8")
    except FileNotFoundError:
        raise VcrImportError(f"vcrpy cassette {name} does not exist") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise VcrImportError(f"{name}: cannot be read as a vcrpy cassette ({exc})") from None
    if serializer is None:
        serializer = jsonserializer if name.endswith(".json") else yamlserializer
    if serializer is not jsonserializer:
        check_yaml(text, name)
    try:
        requests, responses = deserialize(text, serializer)[:2]
    except Exception as exc:
        hint = ""
        if serializer in (jsonserializer, yamlserializer):
            hint = "; a project that registers its own serializer names it with --serializer"
        raise not_a_cassette(name, exc, hint) from None
    redactor = Redactor()
    interactions = []
    decoded = 0
    for index, (vcr_request, vcr_response) in enumerate(zip(requests, responses, strict=True)):
        try:
            interaction, was_decoded = interaction_of(vcr_request, vcr_response, redactor)
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise VcrImportError(f"{name}: interaction {index} is malformed ({exc!r})") from None
        interactions.append(interaction)
        decoded += was_decoded
    return interactions, decoded
