"""Finds credentials left in cassettes: in URLs, headers and bodies, compressed ones included.

Uses the same credential shapes as default redaction, so whatever redaction would have removed
and did not (a cassette written before a rule existed, or by another tool) is reported.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from dataclasses import dataclass
from urllib.parse import unquote_plus, urlsplit

from .._core.encoding import Decoding, encodings_of, gathered
from .._core.models import Headers, Interaction, first_header
from .._core.redaction import credential_fields
from .._core.secrets import (
    JSON_SECRET_REGEX,
    REDACTED,
    SECRET_HEADERS,
    SECRET_PATTERNS,
    SECRET_QUERY_NAMES,
    may_hold_json_field,
    may_hold_secret,
)

_PATTERNS = tuple((kind, re.compile(pattern.encode())) for kind, pattern in SECRET_PATTERNS.items())
_GZIP_MAGIC = b"\x1f\x8b"

SCAN_LIMIT = 64 << 20
"""Decompressed bytes scanned of one body. A body that inflates to more (a decompression
bomb, or a download no agent needs to keep) is reported, not scanned to its end."""

SCAN_FLOOR = 256 << 20
SCAN_RATIO = 64
"""Decompressed bytes scanned in one cassette: ``SCAN_FLOOR``, or ``SCAN_RATIO`` times its
size when that is more, so a file of many small bombs takes bounded time too."""

OVERLAP = 1 << 16
"""Bytes of one decompressed piece scanned again with the next, so a credential that spans
two pieces is found whole (none is this long)."""
_RUN = 1 << 20  # decompressed bytes scanned at a time
_CONTEXT = 64  # bytes before a piece that the patterns' look-behind may need

TOO_LARGE = "too-large-to-scan"
FIELD = "unredacted-secret-field"
_REDACTED = REDACTED.encode()


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
    return [(kind, data[start:end].decode("latin-1")) for kind, start, end in _spans(data, 0)]


def _spans(data: bytes, position: int) -> list[tuple[str, int, int]]:
    """(kind, start, end) of every credential shape in ``data`` from ``position`` on; the
    patterns still see the bytes before ``position`` (their look-behind)."""
    found: list[tuple[str, int, int]] = []
    if may_hold_secret(data):  # the common text: a few fast scans, no full regex
        for kind, pattern in _PATTERNS:
            for match in pattern.finditer(data, position):
                start, end = match.span()
                if not any(start < t_end and t_start < end for _k, t_start, t_end in found):
                    found.append((kind, start, end))
    if may_hold_json_field(data):
        for match in JSON_SECRET_REGEX.finditer(data, position):
            group = 1 if match.group(1) is not None else 2
            start, end = match.span(group)
            value = data[start:end]
            overlaps = any(start < t_end and t_start < end for _k, t_start, t_end in found)
            if value and value != _REDACTED and not overlaps:
                found.append((FIELD, start, end))
    return found


class _Scanner:
    """Scans decompressed bodies piece by piece, within the cassette's budget (see
    ``SCAN_FLOOR``): memory stays at a piece and its overlap whatever a body inflates to."""

    def __init__(self, size: int) -> None:
        self.left = max(SCAN_FLOOR, SCAN_RATIO * size)

    def body(self, index: int, side: str, headers: Headers, body: bytes) -> list[Finding]:
        where = f"{side} body"
        findings = [Finding(index, where, k, mask(s)) for k, s in scan(body)]
        findings += _fields(index, where, headers, body)
        codings = encodings_of(headers)
        label = " (decompressed)"
        if not codings and body[:2] == _GZIP_MAGIC:
            codings, label = ["gzip"], " (gzip, decompressed)"
        if not codings or codings == ["identity"]:
            return findings
        limit = min(SCAN_LIMIT, self.left)
        decoding = Decoding(codings, body, limit)
        hits = _scan_pieces(gathered(decoding, _RUN))
        self.left -= decoding.produced
        if decoding.error:
            return findings
        findings += [Finding(index, where + label, k, mask(s)) for k, s in hits]
        if decoding.cut:
            findings.append(
                Finding(
                    index,
                    where + label,
                    TOO_LARGE,
                    f"(inflates to more than the {decoding.limit >> 20} MiB scanned; "
                    f"{len(body)} bytes stored)",
                )
            )
        return findings


def _scan_pieces(pieces: Iterable[bytes]) -> list[tuple[str, str]]:
    """``scan`` over a stream: each piece is scanned with the end of the one before, and a
    credential is reported once, by where it starts."""
    found: list[tuple[str, str]] = []
    # ``carry`` holds the end of the stream so far, from ``offset`` in the stream; from
    # ``fresh`` on, its matches are still to be decided; ``reported``: where the last
    # reported match ended, in the stream.
    carry, offset, fresh, reported = b"", 0, 0, 0
    for piece in pieces:
        window = carry + piece
        # Decided now: what starts before the overlap; the rest waits for the next piece.
        decided = max(len(window) - OVERLAP, fresh)
        for kind, start, end in _spans(window, fresh):
            if start < decided and offset + start >= reported:
                found.append((kind, window[start:end].decode("latin-1")))
                reported = offset + end
        keep = max(decided - _CONTEXT, 0)
        carry, offset, fresh = window[keep:], offset + keep, decided - keep
    for kind, start, end in _spans(carry, fresh):
        if offset + start >= reported:
            found.append((kind, carry[start:end].decode("latin-1")))
            reported = offset + end
    return found


def _fields(index: int, where: str, headers: Headers, body: bytes) -> list[Finding]:
    """Credential fields of a form-encoded or multipart body left as they were: named so, or
    holding a credential's shape once decoded (``password=…``, ``q=Bearer%20…``)."""
    content_type = first_header(headers, "content-type")
    if content_type is None:
        return []
    findings = []
    for name, start, end in credential_fields(body, content_type):
        value = body[start:end]
        if scan(value):
            continue  # reported with the body's shapes already
        hits = scan(unquote_plus(value.decode("latin-1")).encode("latin-1", "replace"))
        for kind, secret in hits or [(FIELD, value.decode("latin-1"))]:
            findings.append(Finding(index, f"{where} field {name}", kind, mask(secret)))
    return findings


def _query(index: int, where: str, url: str) -> list[Finding]:
    """A URL's query as redaction reads it: values decoded (an encoded credential escapes a
    scan of the URL as written), and the values of secret names."""
    findings = []
    for pair in urlsplit(url).query.split("&"):
        raw_name, equals, raw = pair.partition("=")
        if not equals or not raw or raw == REDACTED:
            continue
        name, value = unquote_plus(raw_name), unquote_plus(raw)
        place = f"{where} query {name}"
        if value != raw:
            known = {secret for _kind, secret in scan(raw.encode("utf-8", "surrogateescape"))}
            for kind, secret in scan(value.encode("utf-8", "surrogateescape")):
                if secret not in known:
                    findings.append(Finding(index, f"{place} (decoded)", kind, mask(secret)))
        if (
            name.lower() in SECRET_QUERY_NAMES
            and value != REDACTED
            and not scan(value.encode("utf-8", "surrogateescape"))
        ):
            findings.append(Finding(index, place, "unredacted-secret-query", mask(value)))
    return findings


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
        if name.lower() in ("location", "content-location"):
            findings += _query(index, f"{side} header {name}", value)
    return findings


def audit_interaction(index: int, interaction: Interaction, scanner: _Scanner) -> list[Finding]:
    request, response = interaction.request, interaction.response
    findings = [
        Finding(index, "request url", kind, mask(secret))
        for kind, secret in scan(request.url.encode("utf-8", "surrogateescape"))
    ]
    findings += _query(index, "request url", request.url)
    findings += _headers(index, "request", request.headers)
    findings += scanner.body(index, "request", request.headers, request.body)
    if response is not None:
        findings += _headers(index, "response", response.headers)
        findings += _headers(index, "response trailer", response.trailers)
        findings += scanner.body(index, "response", response.headers, response.body)
    for number, frame in enumerate(interaction.frames or ()):
        where = f"websocket frame {number} ({frame.direction})"
        findings += [Finding(index, where, k, mask(s)) for k, s in scan(frame.payload)]
    if interaction.error is not None:
        message = interaction.error.message.encode("utf-8", "replace")
        findings += [Finding(index, "error message", k, mask(s)) for k, s in scan(message)]
    return findings


def audit(
    header: dict[str, object], interactions: list[Interaction], size: int = 0
) -> list[Finding]:
    """Every finding in a cassette of ``size`` bytes (what bounds the decompressed bytes
    scanned, see ``SCAN_FLOOR``)."""
    text = json.dumps(header, default=str, ensure_ascii=False).encode()
    findings = [Finding(None, "tags and metadata", k, mask(s)) for k, s in scan(text)]
    scanner = _Scanner(size)
    for index, interaction in enumerate(interactions):
        findings += audit_interaction(index, interaction, scanner)
    return findings
