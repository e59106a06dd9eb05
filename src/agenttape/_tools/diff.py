"""Interaction-by-interaction difference of two runs, in the terms a person compares them:
the request as the matcher sees it, the status, and the body as read (JSON by field, a stream
of events by the text it spelled out)."""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from dataclasses import dataclass, field

from .._core import jsonpath
from .._core.matching.matcher import Matcher, json_differences, show_value
from .._core.models import Interaction, Response
from .._core.wire import grpc as grpc_wire
from . import frames, reading


@dataclass(slots=True)
class Pair:
    index: int
    a: Interaction | None
    b: Interaction | None
    differences: list[str] = field(default_factory=list)

    @property
    def label(self) -> str:
        request = (self.a or self.b).request  # type: ignore[union-attr]
        return f"#{self.index} {request.method} {request.url}"


def _outcome(interaction: Interaction) -> str:
    """The status and how the body ended; a stream the client closed after its end-of-stream
    event ended as one the server ended, as far as anyone reading it can tell."""
    if interaction.response is not None:
        status = interaction.response.status
        call = grpc_wire.summary(interaction)
        if call is not None:
            _method, code, details = call
            return f"grpc {grpc_wire.status_name(code)}" + (f" ({details})" if details else "")
        if interaction.error is not None:
            return f"{status}, then {interaction.error.kind} ({interaction.error.type})"
        if reading.body_end(interaction) == "closed_early":
            return f"{status}, closed early by the client"
        return str(status)
    assert interaction.error is not None
    return f"{interaction.error.kind} ({interaction.error.type})"


def _text_difference(where: str, want: str, got: str) -> str:
    position = next(
        (i for i, (x, y) in enumerate(zip(want, got, strict=False)) if x != y),
        min(len(want), len(got)),
    )
    start = max(0, position - 20)
    return (
        f"{where}: differs at character {position}: "
        f"expected {show_value(want[start : position + 40])}, got {show_value(got[start : position + 40])}"
    )


def _body_differences(a: Response, b: Response, ignore: tuple[str, ...]) -> list[str]:
    decoded_a, decoded_b = (
        reading.decode_within_budget(a.headers, a.body),
        reading.decode_within_budget(b.headers, b.body),
    )
    want, got = decoded_a.data, decoded_b.data
    if want == got:
        return []
    messages_a, messages_b = (
        reading.grpc_messages(a.headers, want),
        reading.grpc_messages(b.headers, got),
    )
    if messages_a is not None and messages_b is not None:
        found: list[str] = []
        json_differences("response messages", messages_a, messages_b, found)
        return found or [_bytes_difference(want, got)]
    if not (reading.parseable(a.body, decoded_a) and reading.parseable(b.body, decoded_b)):
        return [_bytes_difference(want, got)]
    if reading.is_sse(a.headers) and reading.is_sse(b.headers):
        want_text, got_text = (
            reading.sse_text(reading.parse_sse(want)),
            reading.sse_text(reading.parse_sse(got)),
        )
        if want_text == got_text:
            return []
        return [_text_difference("response stream text", want_text, got_text)]
    (want_json, want_doc), (got_json, got_doc) = reading.parse_json(want), reading.parse_json(got)
    if want_json and got_json:
        for path in ignore:
            jsonpath.delete(want_doc, path)
            jsonpath.delete(got_doc, path)
        differences: list[str] = []
        json_differences("response body", want_doc, got_doc, differences)
        return differences
    try:
        return [_text_difference("response body", want.decode(), got.decode())]
    except UnicodeDecodeError:
        return [_bytes_difference(want, got)]


def _bytes_difference(want: bytes, got: bytes) -> str:
    digest_a = hashlib.sha256(want).hexdigest()[:12]
    digest_b = hashlib.sha256(got).hexdigest()[:12]
    return (
        f"response body: expected {len(want)} bytes (sha256 {digest_a}), "
        f"got {len(got)} bytes (sha256 {digest_b})"
    )


def compare(a: list[Interaction], b: list[Interaction], ignore: Iterable[str] = ()) -> list[Pair]:
    """One Pair per position; ``ignore`` drops JSON paths from request and response bodies."""
    ignored = tuple(ignore)
    matcher = Matcher(ignore_json_fields=ignored)
    pairs = []
    for index in range(max(len(a), len(b))):
        left = a[index] if index < len(a) else None
        right = b[index] if index < len(b) else None
        pair = Pair(index, left, right)
        pairs.append(pair)
        if left is None or right is None:
            pair.differences.append("only in B" if left is None else "only in A")
            continue
        if left.boundary != right.boundary:
            pair.differences.append(f"boundary: expected {left.boundary!r}, got {right.boundary!r}")
        pair.differences += [
            f"request {line}" for line in matcher.differences(left.request, right.request)
        ]
        if _outcome(left) != _outcome(right):
            pair.differences.append(f"status: expected {_outcome(left)}, got {_outcome(right)}")
        if left.frames is not None or right.frames is not None:
            pair.differences += frames.differences(left, right, ignored)
        elif left.response is not None and right.response is not None:
            pair.differences += _body_differences(left.response, right.response, ignored)
    return pairs
