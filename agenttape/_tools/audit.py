"""Finds credentials left in cassettes: in URLs, headers and bodies, compressed ones included.

Uses the same credential shapes as default redaction, so whatever redaction would have removed
and did not (a cassette written before a rule existed, or by another tool) is reported.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from urllib.parse import parse_qsl, urlsplit

from .._core.models import Headers, Interaction
from .._core.secrets import REDACTED, SECRET_HEADERS, SECRET_PATTERNS, SECRET_QUERY_NAMES
from .reading import decode_body

_PATTERNS = tuple((kind, re.compile(pattern.encode())) for kind, pattern in SECRET_PATTERNS.items())
_GZIP_MAGIC = b"\x1f\x8b"


@dataclass(slots=True, frozen=True)
class Finding:
    index: int | None  # None: the cassette header
    where: str
    kind: str
    preview: str

    def describe(self) -> str:
        place = "header" if self.index is None else f"interaction {self.index}"
        return f"{place}: {self.where}: {self.kind} {self.preview}"


def mask(secret: str) -> str:
    """Enough of a secret to recognise it, never enough to use it."""
    if len(secret) <= 12:
        return f"{secret[:3]}… ({len(secret)} chars)"
    return f"{secret[:6]}…{secret[-4:]} ({len(secret)} chars)"


def scan(data: bytes) -> list[tuple[str, str]]:
    """(kind, match) for every credential shape in ``data``; overlapping shapes (an Anthropic
    key also looks like an OpenAI one) are reported once, by the most specific name."""
    found: list[tuple[str, str]] = []
    spans: list[tuple[int, int]] = []
    for kind, pattern in _PATTERNS:
        for match in pattern.finditer(data):
            start, end = match.span()
            if any(start < taken_end and taken_start < end for taken_start, taken_end in spans):
                continue
            spans.append((start, end))
            found.append((kind, match.group().decode("latin-1")))
    return found


def _body_variants(headers: Headers, body: bytes) -> list[tuple[str, bytes]]:
    """The body as stored and, when compressed, as decompressed."""
    variants = [("", body)]
    decoded = decode_body(headers, body)
    if decoded.data != body:
        variants.append((" (decompressed)", decoded.data))
    elif body[:2] == _GZIP_MAGIC:
        gzipped = decode_body([("content-encoding", "gzip")], body)
        if gzipped.data != body:
            variants.append((" (gzip, decompressed)", gzipped.data))
    return variants


def _headers(index: int, side: str, headers: Headers) -> list[Finding]:
    findings = []
    for name, value in headers:
        hits = scan(value.encode("latin-1"))
        for kind, secret in hits:
            findings.append(Finding(index, f"{side} header {name}", kind, mask(secret)))
        if not hits and name.lower() in SECRET_HEADERS and value and value != REDACTED:
            findings.append(
                Finding(index, f"{side} header {name}", "unredacted-secret-header", mask(value))
            )
    return findings


def audit_interaction(index: int, interaction: Interaction) -> list[Finding]:
    request, response = interaction.request, interaction.response
    findings = [
        Finding(index, "request url", kind, mask(secret))
        for kind, secret in scan(request.url.encode("utf-8", "surrogateescape"))
    ]
    for name, value in parse_qsl(urlsplit(request.url).query, keep_blank_values=True):
        if (
            name.lower() in SECRET_QUERY_NAMES
            and value
            and value != REDACTED
            and not scan(value.encode())
        ):
            findings.append(
                Finding(index, f"request url query {name}", "unredacted-secret-query", mask(value))
            )
    findings += _headers(index, "request", request.headers)
    for label, data in _body_variants(request.headers, request.body):
        findings += [Finding(index, f"request body{label}", k, mask(s)) for k, s in scan(data)]
    if response is not None:
        findings += _headers(index, "response", response.headers)
        for label, data in _body_variants(response.headers, response.body):
            findings += [Finding(index, f"response body{label}", k, mask(s)) for k, s in scan(data)]
    if interaction.error is not None:
        message = interaction.error.message.encode("utf-8", "replace")
        findings += [Finding(index, "error message", k, mask(s)) for k, s in scan(message)]
    return findings


def audit(header: dict[str, object], interactions: list[Interaction]) -> list[Finding]:
    text = json.dumps(header, default=str, ensure_ascii=False).encode()
    findings = [Finding(None, "tags and metadata", k, mask(s)) for k, s in scan(text)]
    for index, interaction in enumerate(interactions):
        findings += audit_interaction(index, interaction)
    return findings
