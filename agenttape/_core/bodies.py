"""Response bodies as a reader of them sees them: content-encoding undone, server-sent
events split, and whether a stream of events reached its own end.

Kept in the core because replay asks the last question too: a body the client closed after
its end-of-stream event ends there on replay, one closed before it stays open.
"""

from __future__ import annotations

import json
import zlib
from dataclasses import dataclass, field
from typing import Any

from .models import Headers, Response, first_header

JsonValue = Any


@dataclass(slots=True)
class Decoded:
    """A body made readable: ``data`` with content-encoding undone, and a note when it could
    not be (fully) undone."""

    data: bytes
    note: str = ""


def _inflate(data: bytes, wbits: int) -> tuple[bytes, bool]:
    """Decompress as much as there is; True when the stream was complete."""
    decompressor = zlib.decompressobj(wbits)
    out = decompressor.decompress(data)
    out += decompressor.flush()
    return out, decompressor.eof


def _undo(encoding: str, data: bytes) -> tuple[bytes, str]:
    if encoding in ("gzip", "x-gzip"):
        out, complete = _inflate(data, 16 + zlib.MAX_WBITS)
        return out, "" if complete else "gzip stream is incomplete; showing what decodes"
    if encoding == "deflate":
        try:
            out, complete = _inflate(data, zlib.MAX_WBITS)
        except zlib.error:
            out, complete = _inflate(data, -zlib.MAX_WBITS)
        return out, "" if complete else "deflate stream is incomplete; showing what decodes"
    if encoding == "br":
        try:
            import brotli  # type: ignore[import-not-found,unused-ignore]
        except ImportError:
            raise ValueError("br-encoded; install 'brotli' to read it") from None
        return bytes(brotli.decompress(data)), ""
    if encoding == "zstd":
        try:
            import zstandard  # type: ignore[import-not-found,unused-ignore]
        except ImportError:
            raise ValueError("zstd-encoded; install 'zstandard' to read it") from None
        return bytes(zstandard.ZstdDecompressor().decompressobj().decompress(data)), ""
    if encoding in ("identity", ""):
        return data, ""
    raise ValueError(f"unknown content-encoding {encoding!r}")


def decode_body(headers: Headers, body: bytes) -> Decoded:
    """``body`` with its Content-Encoding undone (last applied first)."""
    encodings = [
        part.strip().lower()
        for part in (first_header(headers, "content-encoding") or "").split(",")
        if part.strip()
    ]
    data, notes = body, []
    for encoding in reversed(encodings):
        try:
            data, note = _undo(encoding, data)
        except (ValueError, zlib.error) as exc:
            return Decoded(data, f"{exc}; shown as stored")
        if note:
            notes.append(note)
    return Decoded(data, "; ".join(notes))


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


def reached_end_of_stream(response: Response) -> bool:
    """Whether an event-stream body ends with a dispatched end-of-stream event: an OpenAI
    ``data: [DONE]``, an Anthropic ``message_stop``, a Responses ``response.completed``."""
    if not is_sse(response.headers):
        return False
    data = decode_body(response.headers, response.body).data
    if not data.endswith((b"\n\n", b"\r\n\r\n", b"\r\r")):
        return False  # the last event was never dispatched
    events = parse_sse(data)
    if not events:
        return False
    last = events[-1]
    if last.data == "[DONE]" or last.event in END_OF_STREAM_EVENTS:
        return True
    return isinstance(last.data, dict) and last.data.get("type") in END_OF_STREAM_EVENTS
