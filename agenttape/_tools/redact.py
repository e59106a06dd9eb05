"""Redacting a cassette already on disk (``agenttape redact``).

Requests get the same redaction as at record time. Response headers lose secret values, and
response bodies (which recording never touches) lose credential-shaped runs, the user's
regexes and JSON paths: running the command is the user asking. A compressed body is
decompressed, redacted and compressed again; chunk boundaries move with the text around them
so a stream still replays in the same pieces.
"""

from __future__ import annotations

import gzip
import json
import re
import zlib
from bisect import bisect_right

from .._core import jsonpath
from .._core.models import Interaction, Response, first_header
from .._core.redaction import Redactor
from .._core.secrets import REDACTED, SECRET_REGEX

_REDACTED = REDACTED.encode()
_DEFAULT = re.compile(SECRET_REGEX.pattern.encode())


def _substitute(
    data: bytes, pattern: re.Pattern[bytes], cuts: list[int]
) -> tuple[bytes, list[int]]:
    """``data`` with every match replaced, and ``cuts`` (chunk boundaries) moved along: a
    boundary inside a match lands at the end of its replacement."""
    pieces: list[bytes] = []
    spans: list[tuple[int, int, int]] = []  # old start, old end, new end
    last, length = 0, 0
    for match in pattern.finditer(data):
        start, end = match.span()
        if start == end:
            continue
        pieces.append(data[last:start])
        length += start - last
        pieces.append(_REDACTED)
        length += len(_REDACTED)
        spans.append((start, end, length))
        last = end
    if not spans:
        return data, cuts
    pieces.append(data[last:])
    starts = [span[0] for span in spans]
    moved = []
    for cut in cuts:
        index = bisect_right(starts, cut - 1) - 1  # the last match starting before the cut
        if index < 0:
            moved.append(cut)
            continue
        start, end, new_end = spans[index]
        moved.append(new_end if cut < end else new_end + (cut - end))
    return b"".join(pieces), moved


def _encode(encoding: str, data: bytes) -> bytes:
    if encoding in ("gzip", "x-gzip"):
        return gzip.compress(data, mtime=0)
    return zlib.compress(data)


def _decode(encoding: str, data: bytes) -> bytes | None:
    if encoding in ("", "identity"):
        return data
    try:
        if encoding in ("gzip", "x-gzip"):
            return gzip.decompress(data)
        if encoding == "deflate":
            return zlib.decompress(data)
    except (OSError, EOFError, zlib.error):
        return None
    return None


def _json_paths(data: bytes, paths: tuple[str, ...]) -> bytes:
    if not paths or data.lstrip()[:1] not in (b"{", b"["):
        return data
    try:
        document = json.loads(data)
    except (ValueError, RecursionError):
        return data
    changed = False
    for path in paths:
        changed = jsonpath.replace(document, path, REDACTED) or changed
    if not changed:
        return data
    return json.dumps(document, ensure_ascii=False, separators=(",", ":")).encode()


def _rechunk(response: Response, body: bytes, cuts: list[int] | None) -> None:
    """Set the new body; ``cuts`` are its chunk boundaries, or None to spread the chunks
    evenly (after recompression, old boundaries mean nothing)."""
    chunks = response.chunks
    if cuts is None:
        count = len(chunks)
        cuts = [round(len(body) * (i + 1) / count) for i in range(count - 1)] if count else []
    ends = [*cuts, len(body)] if chunks else []
    sizes = [end - start for start, end in zip([0, *cuts], ends, strict=True)]
    response.chunks = [
        (size, offset) for size, (_old, offset) in zip(sizes, chunks, strict=True) if size
    ]
    if response.header("content-length") is not None and len(body) != len(response.body):
        response.headers = [
            (name, str(len(body)) if name.lower() == "content-length" else value)
            for name, value in response.headers
        ]
    response.body = body


def _response_body(response: Response, redactor: Redactor) -> None:
    encoding = (first_header(response.headers, "content-encoding") or "").strip().lower()
    data = _decode(encoding, response.body)
    if data is None:
        return  # an encoding this cannot undo and redo (br, zstd, a cut-short stream)
    cuts: list[int] = []
    total = 0
    for size, _offset in response.chunks[:-1]:
        total += size
        cuts.append(total)
    for pattern in (_DEFAULT, *(re.compile(p.pattern.encode()) for p in redactor.patterns)):
        data, cuts = _substitute(data, pattern, cuts)
    rewritten = _json_paths(data, redactor.json_paths)
    if rewritten is not data:
        data, cuts = rewritten, []  # re-serialised: no boundary survives
    original = response.body if not encoding else _decode(encoding, response.body)
    if data == original:
        return
    if encoding:
        _rechunk(response, _encode(encoding, data), None)
    else:
        _rechunk(response, data, cuts if len(cuts) == len(response.chunks) - 1 else None)


def redact(interaction: Interaction, redactor: Redactor) -> bool:
    """Redact one interaction in place; True when anything changed."""
    before = (
        interaction.request,
        interaction.response and (list(interaction.response.headers), interaction.response.body),
    )
    interaction.request = redactor.request(interaction.request)
    response = interaction.response
    if response is not None:
        response.headers = [
            (name, redactor._text(value))
            for name, value in redactor.response_headers(response.headers)
        ]
        _response_body(response, redactor)
    after = (interaction.request, response and (response.headers, response.body))
    return before != after
