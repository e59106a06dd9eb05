"""The common, well-formed interaction decoded with the fewest checks that still accept
exactly what ``checked_read`` accepts, and build the same result: loading a large cassette is
mostly this. Anything unusual is handed to ``checked_read``, which says what is wrong."""

from __future__ import annotations

from typing import Any, cast

from ..models import Failure, FailureKind, Headers, Interaction, Request, Response
from .bounded_msgpack import Invalid
from .checked_read import (
    ARRAYS,
    EARLIEST,
    LATEST,
    LONGEST_WAIT,
    NUMBERS,
    STATUSES,
    Header,
    latin1,
    session,
)

BYTES_PER_SHARED_PAIR = 64


class SharedPairs(dict[Header | str, Header | str]):
    """The header pairs and short words (methods, reasons, versions, boundaries) met so far
    in a file, each to be kept once. Most repeat from one entry to the next; the copies freed
    at once leave less memory held, fewer objects and pages to the allocator and the garbage
    collector. At most one is kept per BYTES_PER_SHARED_PAIR bytes of the file, so a file of
    all-different ones cannot make the table break the memory bound."""

    __slots__ = ("room",)

    def __init__(self, size: int) -> None:
        super().__init__()
        self.room = size // BYTES_PER_SHARED_PAIR


def shared(seen: SharedPairs, text: str) -> str:
    """``text``, or the equal string met before in the same file."""
    known = seen.get(text)
    if known is not None:
        return cast(str, known)
    if seen.room:
        seen.room -= 1
        seen[text] = text
    return text


def plain_headers(value: Any, seen: SharedPairs) -> Headers | None:
    """Header pairs with the checks inlined; None sends the caller to the checks that name
    what is wrong. A pair read as a tuple (the streaming reader) is replaced by the equal
    pair in ``seen``, if any; pairs read as lists (the whole-file reader) become tuples."""
    kind = type(value)
    if kind is tuple:
        # Sized exactly (a list grown from an iterator keeps spare room): one per interaction.
        pairs: list[Any] = list(value)
        try:
            pairs[:] = map(seen.get, value)
        except TypeError:  # an item that cannot be hashed is no header pair
            return None
        if None in pairs:
            for index, known in enumerate(pairs):
                if known is None:
                    pair = value[index]
                    if type(pair) is not tuple or len(pair) != 2:
                        return None
                    name, text = pair
                    if type(name) is not str or type(text) is not str:
                        return None
                    if not (name.isascii() and text.isascii()) and not (
                        latin1(name) and latin1(text)
                    ):
                        return None
                    if seen.room:
                        seen.room -= 1
                        seen[pair] = pair
                    pairs[index] = pair
        return pairs
    if kind is not list:
        return None
    for pair in value:
        if type(pair) is not list or len(pair) != 2:
            return None
        name, text = pair
        if type(name) is not str or type(text) is not str:
            return None
        if not (latin1(name) and latin1(text)):
            return None
    return [(name, text) for name, text in value]


def plain_seconds(value: Any) -> float | None:
    """What ``_duration`` accepts, as a float; None for anything else."""
    if type(value) not in NUMBERS:
        return None
    number = float(value)
    return number if 0 <= number <= LONGEST_WAIT else None


def plain_chunks(value: Any, body_size: int) -> list[tuple[int, float]] | None:
    """(size, offset) pairs whose sizes add up to no more than the body; pairs read as
    tuples that already hold a float offset are kept as they are."""
    if type(value) not in ARRAYS:
        return None
    chunks = []
    total = 0
    for chunk in value:
        if type(chunk) not in ARRAYS or len(chunk) != 2:
            return None
        size, offset = chunk
        if type(size) is not int or size < 0:
            return None
        if type(offset) is float and type(chunk) is tuple and 0 <= offset <= LONGEST_WAIT:
            chunks.append(chunk)
        else:
            seconds = plain_seconds(offset)
            if seconds is None:
                return None
            chunks.append((size, seconds))
        total += size
    return chunks if total <= body_size else None


def decode_plain(raw: Any, seen: SharedPairs) -> Interaction | None:
    """The common, well-formed interaction decoded with the fewest checks that still accept
    exactly what ``decode_interaction`` accepts, and build the same result; anything unusual
    returns None and goes through ``decode_interaction``, which says what is wrong."""
    if type(raw) is not dict:
        return None
    request = _request(raw.get("request"), seen)
    if request is None:
        return None
    response = None
    res = raw.get("response")
    if res is not None:
        response = _response(res, seen)
        if response is None:
            return None
    error = None
    err = raw.get("error")
    if err is not None:
        error = _failure(err)
        if error is None:
            return None
    if response is None and error is None:
        return None
    return _interaction(raw, request, response, error, seen)


def _request(req: Any, seen: SharedPairs) -> Request | None:
    if type(req) is not dict:
        return None
    method, url, body = req.get("method"), req.get("url"), req.get("body")
    request_headers = plain_headers(req.get("headers"), seen)
    if (
        type(method) is not str
        or type(url) is not str
        or type(body) is not bytes
        or request_headers is None
    ):
        return None
    request = Request(shared(seen, method), url, request_headers, body)
    raw_sent = req.get("chunks")
    if raw_sent is not None:
        sent = plain_chunks(raw_sent, len(body))
        if sent is None:
            return None
        request.chunks = sent
    return request


def _response(res: Any, seen: SharedPairs) -> Response | None:
    if type(res) is not dict:
        return None
    status = res.get("status")
    reason = res.get("reason", "")
    http_version = res.get("http_version", "HTTP/1.1")
    response_body = res.get("body")
    response_headers = plain_headers(res.get("headers"), seen)
    if (
        type(status) is not int
        or status not in STATUSES
        or type(reason) is not str
        or type(http_version) is not str
        or not (latin1(reason) and latin1(http_version))
        or type(response_body) is not bytes
        or response_headers is None
    ):
        return None
    chunks = _response_chunks(res.get("chunks", ()), len(response_body))
    if chunks is None:
        return None
    trailers = res.get("trailers")
    if trailers is not None:
        trailers = plain_headers(trailers, seen)
        if trailers is None:
            return None
    return Response(
        status,
        shared(seen, reason),
        shared(seen, http_version),
        response_headers,
        response_body,
        chunks,
        bool(res.get("truncated", False)),
        () if trailers is None else trailers,
    )


def _response_chunks(raw_chunks: Any, body_size: int) -> list[tuple[int, float]] | None:
    """The common body, read in one piece, without a call: the same checks as
    ``plain_chunks``."""
    if type(raw_chunks) is tuple and len(raw_chunks) == 1:
        (only,) = raw_chunks
        if (
            type(only) is tuple
            and len(only) == 2
            and type(only[0]) is int
            and type(only[1]) is float
            and 0 <= only[0] <= body_size
            and 0 <= only[1] <= LONGEST_WAIT
        ):
            return [only]
    return plain_chunks(raw_chunks, body_size)


def _failure(err: Any) -> Failure | None:
    if type(err) is not dict:
        return None
    kind, type_name, message = err.get("kind"), err.get("type"), err.get("message", "")
    if type(kind) is not str or type(type_name) is not str or type(message) is not str:
        return None
    # A kind this version does not know replays as the library's generic transport error.
    return Failure(kind=cast(FailureKind, kind), type=type_name, message=message)


def _seconds(value: Any) -> float | None:
    """A recorded time as a float, the common float without a call."""
    if type(value) is float and 0 <= value <= LONGEST_WAIT:
        return value
    return plain_seconds(value)


def _interaction(
    raw: dict[str, Any],
    request: Request,
    response: Response | None,
    error: Failure | None,
    seen: SharedPairs,
) -> Interaction | None:
    boundary = raw.get("boundary", "http")
    started, ttfb, duration = raw.get("started_at"), raw.get("ttfb"), raw.get("duration")
    started_at = 0.0 if started is None else float(started) if type(started) in NUMBERS else None
    ttfb_seconds = None if ttfb is None else _seconds(ttfb)
    duration_seconds = None if duration is None else _seconds(duration)
    frames = closed = None
    if "frames" in raw or "closed" in raw:
        try:
            frames, closed = session(raw)
        except Invalid:
            return None
    injected = raw.get("injected")
    if (
        (injected is not None and type(injected) is not str)
        or type(boundary) is not str
        or started_at is None
        or not EARLIEST <= started_at <= LATEST
        or (ttfb is not None and ttfb_seconds is None)
        or (duration is not None and duration_seconds is None)
    ):
        return None
    return Interaction(
        request,
        response,
        error,
        shared(seen, boundary),
        started_at,
        ttfb_seconds,
        duration_seconds,
        frames,
        closed,
        injected,
    )
