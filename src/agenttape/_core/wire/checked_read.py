"""Interactions read with every field checked, as a damaged or hand-made cassette is: the
error names the field that is wrong, and the reader never trusts a length or a time it was
not shown to be sane."""

from __future__ import annotations

from typing import Any, cast

from ..models import (
    OPCODE_NUMBERS,
    Closed,
    Direction,
    Failure,
    FailureKind,
    Frame,
    Headers,
    Interaction,
    Opcode,
    Request,
    Response,
)
from .bounded_msgpack import Invalid

DIRECTIONS: frozenset[str] = frozenset(("client", "server"))
EARLIEST, LATEST = -62135596800.0, 253402300799.0  # 0001-01-01 and 9999-12-31, UTC
LONGEST_WAIT = 7 * 24 * 3600.0
"""The longest a recorded time (first byte, total, a chunk's offset) may be: realtime replay
waits for these, and a file must not make it wait for ever (1e9 s) or fail (1e300 s)."""
STATUSES = range(100, 1000)
"""A status line holds three digits; anything else is no status a library can be handed."""
NUMBERS = (int, float)
ARRAYS = (list, tuple)
Header = tuple[str, str]


def latin1(text: str) -> bool:
    """True when each character is one byte, as on the wire: headers, reason phrases and
    versions are read as Latin-1, and a library is handed them encoded so."""
    return text.isascii() or max(text) <= "\xff"


def expect(value: Any, kind: type | tuple[type, ...], what: str) -> Any:
    if not isinstance(value, kind) or (isinstance(value, bool) and kind is not bool):
        if kind == ARRAYS:
            expected = "array"
        elif isinstance(kind, type):
            expected = kind.__name__
        else:
            expected = "/".join(k.__name__ for k in kind)
        raise Invalid(f"{what} is {type(value).__name__}, expected {expected}")
    return value


def _optional_number(value: Any, what: str) -> float | None:
    if value is None:
        return None
    return _duration(expect(value, (int, float), what), what)


def _duration(value: int | float, what: str) -> float:
    """Seconds that replay may wait for: a finite, non-negative number."""
    number = float(value)
    if not 0 <= number <= LONGEST_WAIT:
        raise Invalid(
            f"{what} is {number!r}, expected a number of seconds from 0 to {LONGEST_WAIT:.0f} "
            "(a week)"
        )
    return number


def _moment(value: Any) -> float:
    """A Unix time that converts to a datetime (years 1 to 9999)."""
    if value is None:
        return 0.0
    number = float(expect(value, (int, float), "started_at"))
    if not EARLIEST <= number <= LATEST:
        raise Invalid(f"started_at is {number!r}, not a time")
    return number


def _headers(value: Any, what: str) -> Headers:
    headers = []
    for pair in expect(value, ARRAYS, what):
        if (
            not isinstance(pair, ARRAYS)
            or len(pair) != 2
            or not isinstance(pair[0], str)
            or not isinstance(pair[1], str)
        ):
            raise Invalid(f"{what} holds {pair!r}, expected [name, value] strings")
        for text in pair:
            if not latin1(text):
                raise Invalid(
                    f"{what} holds {pair!r}: {_outside_latin1(text)}, which no header carries "
                    "(headers are bytes, read as Latin-1)"
                )
        headers.append((pair[0], pair[1]))
    return headers


def _outside_latin1(text: str) -> str:
    character = next(c for c in text if c > "\xff")
    return f"U+{ord(character):04X} is outside Latin-1"


def _wire_text(value: Any, what: str) -> str:
    """A reason phrase or HTTP version: a string of one-byte characters."""
    text: str = expect(value, str, what)
    if not latin1(text):
        raise Invalid(f"{what} is {text!r}: {_outside_latin1(text)}")
    return text


def _chunks(value: Any, body: bytes, side: str) -> list[tuple[int, float]]:
    """A body's ``[size, offset]`` pieces, adding up to no more than the body."""
    chunks = []
    total = 0
    for chunk in expect(value, ARRAYS, f"{side}.chunks"):
        if (
            not isinstance(chunk, ARRAYS)
            or len(chunk) != 2
            or not isinstance(chunk[0], int)
            or not isinstance(chunk[1], (int, float))
            or chunk[0] < 0
        ):
            raise Invalid(f"{side}.chunks holds {chunk!r}, expected [size, offset]")
        total += chunk[0]
        chunks.append((chunk[0], _duration(chunk[1], f"{side}.chunks offset")))
    if total > len(body):
        raise Invalid(f"{side}.chunks add up to {total} bytes but the body has {len(body)}")
    return chunks


def decode_interaction(raw: Any) -> Interaction:
    raw = expect(raw, dict, "interaction")
    req = expect(raw.get("request"), dict, "request")
    request_body = expect(req.get("body"), bytes, "request.body")
    sent = req.get("chunks")
    request = Request(
        method=expect(req.get("method"), str, "request.method"),
        url=expect(req.get("url"), str, "request.url"),
        headers=_headers(req.get("headers"), "request.headers"),
        body=request_body,
        chunks=() if sent is None else _chunks(sent, request_body, "request"),
    )
    response = None
    if raw.get("response") is not None:
        res = expect(raw["response"], dict, "response")
        body = expect(res.get("body"), bytes, "response.body")
        chunks = _chunks(res.get("chunks", []), body, "response")
        status = expect(res.get("status"), int, "response.status")
        if status not in STATUSES:
            raise Invalid(f"response.status is {status}, expected three digits (100 to 999)")
        response = Response(
            status=status,
            reason=_wire_text(res.get("reason", ""), "response.reason"),
            http_version=_wire_text(res.get("http_version", "HTTP/1.1"), "response.http_version"),
            headers=_headers(res.get("headers"), "response.headers"),
            body=body,
            chunks=chunks,
            truncated=bool(res.get("truncated", False)),
            trailers=(
                _headers(res["trailers"], "response.trailers")
                if res.get("trailers") is not None
                else ()
            ),
        )
    error = None
    if raw.get("error") is not None:
        err = expect(raw["error"], dict, "error")
        error = Failure(
            kind=cast(FailureKind, expect(err.get("kind"), str, "error.kind")),
            type=expect(err.get("type"), str, "error.type"),
            message=expect(err.get("message", ""), str, "error.message"),
        )
    if response is None and error is None:
        raise Invalid("has neither a response nor an error")
    frames, closed = session(raw)
    return Interaction(
        request=request,
        response=response,
        error=error,
        boundary=expect(raw.get("boundary", "http"), str, "boundary"),
        started_at=_moment(raw.get("started_at")),
        ttfb=_optional_number(raw.get("ttfb"), "ttfb"),
        duration=_optional_number(raw.get("duration"), "duration"),
        frames=frames,
        closed=closed,
        injected=(
            expect(raw["injected"], str, "injected") if raw.get("injected") is not None else None
        ),
    )


def session(raw: dict[str, Any]) -> tuple[list[Frame] | None, Closed | None]:
    """A WebSocket session's frames and ending; (None, None) for any other interaction."""
    frames = None
    if raw.get("frames") is not None:
        frames = []
        for index, item in enumerate(expect(raw["frames"], ARRAYS, "frames")):
            frames.append(_frame(item, index))
    closed = None
    if raw.get("closed") is not None:
        end = expect(raw["closed"], dict, "closed")
        code = end.get("code")
        if code is not None and (type(code) is not int or not 0 <= code <= 0xFFFF):
            raise Invalid(f"closed.code is {code!r}, expected a close code (0 to 65535) or nil")
        by = end.get("by", "server")
        if by not in DIRECTIONS:
            raise Invalid(f"closed.by is {by!r}, expected 'client' or 'server'")
        closed = Closed(code, expect(end.get("reason", ""), str, "closed.reason"), by)
    return frames, closed


def _frame(item: Any, index: int) -> Frame:
    what = f"frames[{index}]"
    if type(item) not in ARRAYS or len(item) not in (4, 5):
        raise Invalid(f"{what} is {item!r}, expected [direction, opcode, payload, offset]")
    direction, opcode, payload, offset = item[:4]
    fin = item[4] if len(item) == 5 else True
    if direction not in DIRECTIONS:
        raise Invalid(f"{what} direction is {direction!r}, expected 'client' or 'server'")
    if opcode not in OPCODE_NUMBERS:
        raise Invalid(f"{what} opcode is {opcode!r}, expected one of {', '.join(OPCODE_NUMBERS)}")
    if type(payload) is not bytes:
        raise Invalid(f"{what} payload is {type(payload).__name__}, expected bin")
    if type(fin) is not bool:
        raise Invalid(f"{what} fin is {fin!r}, expected a bool")
    seconds = _duration(expect(offset, (int, float), f"{what} offset"), f"{what} offset")
    return Frame(cast(Direction, direction), cast(Opcode, opcode), payload, seconds, fin)
