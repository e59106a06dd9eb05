"""Redacting a cassette already on disk (``agenttape redact``).

Requests get the same redaction as at record time. Response headers lose secret values, and
response bodies (which recording never touches) lose credential-shaped runs, the values of
credential JSON keys, the user's regexes and JSON paths: running the command is the user
asking. A compressed body is decoded, redacted and encoded again as a stream, within a
bound; chunk boundaries move with the text around them so a stream still replays in the
same pieces.
"""

from __future__ import annotations

import json
import re
from bisect import bisect_right

from .._core import encoding, jsonpath
from .._core.encoding import encodings_of, recodable
from .._core.errors import AgentTapeError
from .._core.models import Interaction, Response
from .._core.redaction import REDACT_LIMIT, Redactor
from .._core.secrets import REDACTED
from .._core.substitution import Replacement, TooLarge, rewrite_encoded

_REDACTED = REDACTED.encode()

JSON_PATH_LIMIT = 64 << 20
"""Decoded bytes of a compressed body that ``--json-path`` rules parse: a JSON path needs the
document whole."""


class BodyTooLarge(AgentTapeError):
    """A compressed body inflates to more than redaction reads: nothing is written."""


def _substitute(
    data: bytes, pattern: re.Pattern[bytes], replacement: Replacement, cuts: list[int]
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
        new = replacement if isinstance(replacement, bytes) else replacement(match)
        if new == match.group():
            continue
        pieces.append(data[last:start])
        length += start - last
        pieces.append(new)
        length += len(new)
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
    if chunks:  # a body recorded without chunk boundaries keeps none
        if cuts is None:
            count = len(chunks)
            cuts = [round(len(body) * (i + 1) / count) for i in range(count - 1)]
        ends = [*cuts, len(body)]
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


def _encoded_body(response: Response, codings: list[str], redactor: Redactor) -> bytes:
    """The compressed body redacted: rules as a stream, then JSON paths on the whole
    document when there are any."""
    body = rewrite_encoded(response.body, codings, redactor.rules(), REDACT_LIMIT)
    if not redactor.json_paths:
        return body
    decoding = encoding.Decoding(codings, body, JSON_PATH_LIMIT)
    data = b"".join(decoding)
    if decoding.cut:
        raise TooLarge(f"inflates to more than the {JSON_PATH_LIMIT >> 20} MiB a JSON path reads")
    if decoding.error or decoding.incomplete:
        return body
    rewritten = _json_paths(data, redactor.json_paths)
    return body if rewritten is data else encoding.encode(codings, rewritten)


def _response_body(response: Response, redactor: Redactor) -> None:
    codings = [coding for coding in encodings_of(response.headers) if coding != "identity"]
    if codings:
        if recodable(codings):  # else br, zstd: nothing here could encode it again
            body = _encoded_body(response, codings, redactor)
            if body is not response.body:
                _rechunk(response, body, None)
        return
    data = response.body
    cuts: list[int] = []
    total = 0
    for size, _offset in response.chunks[:-1]:
        total += size
        cuts.append(total)
    for rule in redactor.rules():
        data, cuts = _substitute(data, rule.pattern, rule.replacement, cuts)
    rewritten = _json_paths(data, redactor.json_paths)
    if rewritten is not data:
        data, cuts = rewritten, []  # re-serialised: no boundary survives
    if data != response.body:
        _rechunk(response, data, cuts if len(cuts) == len(response.chunks) - 1 else None)


def redact(index: int, interaction: Interaction, redactor: Redactor) -> bool:
    """Redact interaction ``index`` in place; True when anything changed. Raises
    BodyTooLarge when a compressed body inflates to more than can be read."""
    before = (
        interaction.request,
        interaction.response and (list(interaction.response.headers), interaction.response.body),
    )
    interaction.request = redactor.request(interaction.request)
    response = interaction.response
    if response is not None:
        response.headers = [
            (name, redactor.text(value))
            for name, value in redactor.response_headers(response.headers)
        ]
        try:
            _response_body(response, redactor)
        except TooLarge as exc:
            raise BodyTooLarge(
                f"interaction {index}: the response body {exc}, too much to redact "
                "(a decompression bomb?); nothing was written"
            ) from None
    after = (interaction.request, response and (response.headers, response.body))
    return _frames(interaction, redactor) or before != after


def _frames(interaction: Interaction, redactor: Redactor) -> bool:
    """A WebSocket session's frames, both ways, redacted as bodies are: the frames of a
    realtime session carry instructions, transcripts and tool results in JSON."""
    changed = False
    for frame in interaction.frames or ():
        if frame.opcode not in ("text", "continuation", "binary"):
            continue
        data = frame.payload
        for rule in redactor.rules():
            data, _cuts = _substitute(data, rule.pattern, rule.replacement, [])
        data = _json_paths(data, redactor.json_paths)
        if data != frame.payload:
            frame.payload = data
            changed = True
    return changed
