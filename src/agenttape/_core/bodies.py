"""Response bodies as a reader of them sees them: content-encoding undone (within a bound),
server-sent events split, and whether a stream of events reached its own end.

Kept in the core because replay asks the last question too: a body the client closed after
its end-of-stream event ends there on replay, one closed before it stays open.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from .encoding import Decoding, encodings_of, note
from .models import Headers, Response, first_header

JsonValue = Any

READ_LIMIT = 8 << 20
"""Decoded bytes of one body, unless a caller asks for another bound: a compressed body of a
few KiB may inflate to gigabytes."""

END_READ_LIMIT = 64 << 20
"""Decoded bytes read to tell how a stream ended; a stream that inflates to more is taken as
not having reached its end."""


@dataclass(slots=True)
class Decoded:
    """A body made readable: ``data`` with content-encoding undone, a note when it could not
    be (fully) undone, and ``cut`` when the bound stopped decoding before the body's end."""

    data: bytes
    note: str = ""
    cut: bool = False


def decode_body(headers: Headers, body: bytes, *, limit: int = READ_LIMIT) -> Decoded:
    """``body`` with its Content-Encoding undone (last applied first), at most ``limit``
    decoded bytes."""
    codings = encodings_of(headers)
    if not codings:
        return Decoded(body)
    if limit <= 0:
        note_text = "not decoded: the bodies before it used up what one reading decodes"
        return Decoded(body, f"{note_text}; shown as stored", cut=True)
    decoding = Decoding(codings, body, limit)
    data = b"".join(decoding)
    if decoding.error:
        return Decoded(body, f"{decoding.error}; shown as stored")
    return Decoded(data, note(decoding, len(data)), decoding.cut)


def is_sse(headers: Headers) -> bool:
    content_type = (first_header(headers, "content-type") or "").lower()
    return content_type.startswith("text/event-stream")


def parse_json(data: bytes | str) -> tuple[bool, JsonValue]:
    """(True, document) when ``data`` is JSON; (False, None) otherwise."""
    text = data.strip()
    if not text or text[:1] not in ("{", "[", b"{", b"["):
        return False, None
    try:
        return True, json.loads(text)
    except (ValueError, RecursionError):
        return False, None


@dataclass(slots=True)
class Event:
    """One server-sent event; ``data`` holds the JSON document when the data is JSON."""

    data: JsonValue
    event: str | None = None
    id: str | None = None
    extra: dict[str, str] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        if self.event is not None:
            out["event"] = self.event
        if self.id is not None:
            out["id"] = self.id
        out.update(self.extra)
        out["data"] = self.data
        return out


def parse_sse(data: bytes) -> list[Event]:
    """Split a text/event-stream body into events, as the WHATWG parser does."""
    text = data.decode("utf-8", "replace").replace("\r\n", "\n").replace("\r", "\n")
    events = []
    for block in text.split("\n\n"):
        lines: list[str] = []
        event = Event(data=None)
        seen = False
        for line in block.split("\n"):
            if not line or line.startswith(":"):
                continue
            name, _colon, value = line.partition(":")
            value = value[1:] if value.startswith(" ") else value
            seen = True
            if name == "data":
                lines.append(value)
            elif name == "event":
                event.event = value
            elif name == "id":
                event.id = value
            else:
                event.extra[name] = value
        if not seen:
            continue
        joined = "\n".join(lines)
        is_json, document = parse_json(joined)
        event.data = document if is_json else joined
        events.append(event)
    return events


# Event types that end a stream of events (OpenAI Responses, Anthropic Messages).
END_OF_STREAM_EVENTS = frozenset(
    {"message_stop", "response.completed", "response.incomplete", "response.failed"}
)

_TAIL = 1 << 20


def _tail(data: bytes) -> bytes:
    """The events at the end of a stream: the last ``_TAIL`` bytes from an event boundary
    on, so a stream of a million events is not parsed to read its last one."""
    if len(data) <= _TAIL:
        return data
    tail = data[-_TAIL:]
    starts = [tail.find(boundary) for boundary in (b"\n\n", b"\r\r")]
    found = [start for start in starts if start != -1]
    return tail[min(found) :] if found else tail


def reached_end_of_stream(response: Response) -> bool:
    """Whether an event-stream body ends with a dispatched end-of-stream event: an OpenAI
    ``data: [DONE]``, an Anthropic ``message_stop``, a Responses ``response.completed``."""
    if not is_sse(response.headers):
        return False
    decoded = decode_body(response.headers, response.body, limit=END_READ_LIMIT)
    data = decoded.data
    if decoded.cut or not data.endswith((b"\n\n", b"\r\n\r\n", b"\r\r")):
        return False  # the last event was never dispatched, or its end is not known
    events = parse_sse(_tail(data))
    if not events:
        return False
    last = events[-1]
    if last.data == "[DONE]" or last.event in END_OF_STREAM_EVENTS:
        return True
    return isinstance(last.data, dict) and last.data.get("type") in END_OF_STREAM_EVENTS
