"""Reading a cassette as a person would: bodies decoded, server-sent events split, and the
LLM call parameters (as ``Interaction.llm`` reads them) laid out for printing.

Nothing here changes what is stored; every function works on copies of the recorded bytes.
"""

from __future__ import annotations

import json
import zlib
from dataclasses import dataclass, field
from typing import Any, Literal
from urllib.parse import urlsplit

from .._core.models import Headers, Interaction, Request, Response, first_header

JsonValue = Any


@dataclass(slots=True)
class Decoded:
    """A body made readable: ``data`` with content-encoding undone, and a note when it could
    not be (fully) undone. ``cut`` is True when decoding stopped at the ``limit`` asked for:
    ``data`` then holds the first ``limit`` bytes of the decoded body."""

    data: bytes
    note: str = ""
    cut: bool = False


def _inflate(data: bytes, wbits: int, limit: int | None) -> tuple[bytes, bool]:
    """Decompress as much as there is (at most ``limit`` + 1 bytes, so a small body that
    inflates to gigabytes costs no more than ``limit``); True when the stream was complete."""
    decompressor = zlib.decompressobj(wbits)
    if limit is not None:
        return decompressor.decompress(data, limit + 1), decompressor.eof
    out = decompressor.decompress(data)
    out += decompressor.flush()
    return out, decompressor.eof


def _undo(encoding: str, data: bytes, limit: int | None) -> tuple[bytes, str]:
    if encoding in ("gzip", "x-gzip"):
        out, complete = _inflate(data, 16 + zlib.MAX_WBITS, limit)
        return out, "" if complete else "gzip stream is incomplete; showing what decodes"
    if encoding == "deflate":
        try:
            out, complete = _inflate(data, zlib.MAX_WBITS, limit)
        except zlib.error:
            out, complete = _inflate(data, -zlib.MAX_WBITS, limit)
        return out, "" if complete else "deflate stream is incomplete; showing what decodes"
    if encoding == "br":
        try:
            import brotli  # type: ignore[import-not-found,unused-ignore]
        except ImportError:
            raise ValueError("br-encoded; install 'brotli' to read it") from None
        if limit is None:
            return bytes(brotli.decompress(data)), ""
        try:
            out = brotli.Decompressor().process(data, output_buffer_limit=limit + 1)
        except TypeError:
            raise ValueError("br-encoded; this brotli cannot decode within a size bound") from None
        return bytes(out), ""
    if encoding == "zstd":
        try:
            import zstandard  # type: ignore[import-not-found,unused-ignore]
        except ImportError:
            raise ValueError("zstd-encoded; install 'zstandard' to read it") from None
        if limit is None:
            return bytes(zstandard.ZstdDecompressor().decompressobj().decompress(data)), ""
        with zstandard.ZstdDecompressor().stream_reader(data) as reader:
            return bytes(reader.read(limit + 1)), ""
    if encoding in ("identity", ""):
        return data, ""
    raise ValueError(f"unknown content-encoding {encoding!r}")


def content_encodings(headers: Headers) -> list[str]:
    """The Content-Encoding codings in the order they were applied, lower-cased."""
    return [
        part.strip().lower()
        for part in (first_header(headers, "content-encoding") or "").split(",")
        if part.strip() and part.strip().lower() != "identity"
    ]


def decode_body(headers: Headers, body: bytes, *, limit: int | None = None) -> Decoded:
    """``body`` with its Content-Encoding undone (last applied first).

    With ``limit``, no step produces more than ``limit`` bytes: a decompression bomb costs
    ``limit`` bytes of memory, and the result says it was ``cut``.
    """
    data, notes, cut = body, [], False
    for encoding in reversed(content_encodings(headers)):
        try:
            data, note = _undo(encoding, data, limit)
        except (ValueError, zlib.error) as exc:
            return Decoded(data, f"{exc}; shown as stored")
        if limit is not None and len(data) > limit:
            data, cut = data[:limit], True
            notes.append(f"decoded only as far as its first {limit:,} bytes")
            break
        if note:
            notes.append(note)
    return Decoded(data, "; ".join(notes), cut)


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


BodyEnd = Literal["complete", "closed_after_end", "closed_early", "cut"]
"""How a recorded body ended: the server ended it (``complete``); the client closed it after
the stream's own end-of-stream event (``closed_after_end``: an OpenAI ``[DONE]``, an
Anthropic ``message_stop``; ended as far as anyone reading it can tell); the client closed it
before its end (``closed_early``: replay keeps it open); a transport error cut it (``cut``)."""

BODY_END_TEXT: dict[str, str] = {
    "complete": "ended by the server",
    "closed_after_end": "closed by the client after the end-of-stream event",
    "closed_early": "closed by the client before the server ended it (replay keeps it open)",
    "cut": "cut short by a transport error",
}

# Event types that end a stream of events (OpenAI Responses, Anthropic Messages).
END_OF_STREAM_EVENTS = frozenset(
    {"message_stop", "response.completed", "response.incomplete", "response.failed"}
)


def body_end(interaction: Interaction) -> BodyEnd | None:
    """How the response body ended; None when there was no response."""
    response = interaction.response
    if response is None:
        return None
    if interaction.error is not None and interaction.error.kind != "raised":
        return "cut"  # a function boundary that raised returned its whole answer
    if not response.truncated:
        return "complete"
    return "closed_after_end" if _reached_end_of_stream(response) else "closed_early"


# Bytes a body is decoded to, at most, to read how it ended: bounds what a compressed body
# that inflates to gigabytes can cost.
END_READ_LIMIT = 64 * 1024 * 1024


def _reached_end_of_stream(response: Response) -> bool:
    if not is_sse(response.headers):
        return False
    decoded = decode_body(response.headers, response.body, limit=END_READ_LIMIT)
    if decoded.cut:
        return False  # its end was never read
    data = decoded.data
    if not data.endswith((b"\n\n", b"\r\n\r\n", b"\r\r")):
        return False  # the last event was never dispatched
    events = parse_sse(data)
    if not events:
        return False
    last = events[-1]
    if last.data == "[DONE]" or last.event in END_OF_STREAM_EVENTS:
        return True
    return isinstance(last.data, dict) and last.data.get("type") in END_OF_STREAM_EVENTS


def _text_pieces(document: JsonValue) -> list[str]:
    """The generated text an LLM streaming event carries (OpenAI, Anthropic, Gemini)."""
    if not isinstance(document, dict):
        return []
    pieces: list[str] = []
    for choice in document.get("choices") or []:
        if isinstance(choice, dict):
            delta = choice.get("delta") or choice.get("message") or {}
            content = delta.get("content") if isinstance(delta, dict) else None
            if isinstance(content, str):
                pieces.append(content)
            elif isinstance(choice.get("text"), str):
                pieces.append(choice["text"])
    delta = document.get("delta")
    if isinstance(delta, dict) and isinstance(delta.get("text"), str):
        pieces.append(delta["text"])  # Anthropic content_block_delta
    elif isinstance(delta, str) and str(document.get("type", "")).endswith("text.delta"):
        pieces.append(delta)  # OpenAI Responses API
    for candidate in document.get("candidates") or []:
        content = candidate.get("content") if isinstance(candidate, dict) else None
        parts = content.get("parts") if isinstance(content, dict) else None
        for part in parts if isinstance(parts, list) else []:
            if isinstance(part, dict) and isinstance(part.get("text"), str):
                pieces.append(part["text"])
    return pieces


def sse_text(events: list[Event]) -> str:
    """The text a stream spelled out: the LLM deltas joined, or else every data field."""
    pieces = [piece for event in events for piece in _text_pieces(event.data)]
    if pieces:
        return "".join(pieces)
    return "\n".join(
        event.data if isinstance(event.data, str) else json.dumps(event.data, sort_keys=True)
        for event in events
        if event.data != "[DONE]"
    )


def readable(headers: Headers, body: bytes) -> tuple[str, JsonValue, str]:
    """(kind, value, note) for showing a body: kind is ``empty``, ``json``, ``sse``,
    ``text`` or ``binary``; value is the document, the event dicts, the text or the bytes."""
    decoded = decode_body(headers, body)
    data = decoded.data
    if not data:
        return "empty", None, decoded.note
    if is_sse(headers):
        return "sse", [event.as_dict() for event in parse_sse(data)], decoded.note
    is_json, document = parse_json(data)
    if is_json:
        return "json", document, decoded.note
    try:
        return "text", data.decode("utf-8"), decoded.note
    except UnicodeDecodeError:
        return "binary", data, decoded.note


def where(request: Request) -> str:
    """Host and path of a request, without credentials or query: the column ``show`` lists."""
    parts = urlsplit(request.url)
    host = parts.netloc.rpartition("@")[2]
    return f"{host}{parts.path or '/'}"


def status_text(interaction: Interaction) -> str:
    """The status ``show`` lists: the code, how a body ended short, or the transport error."""
    response, error = interaction.response, interaction.error
    if response is None:
        return error.kind if error is not None else "?"
    end = body_end(interaction)
    if end == "cut":
        return f"{response.status}, cut"
    if end == "closed_early":
        return f"{response.status}, closed early"
    return str(response.status)


# -- LLM call parameters ----------------------------------------------------------------------

LLM_FIELDS = ("provider", "model", "temperature", "top_p", "seed", "stream", "max_tokens")


def llm_fields(interaction: Interaction) -> dict[str, Any] | None:
    """``interaction.llm`` as the plain dict ``show`` and ``export`` print, or None when the
    interaction is not an LLM call; a view, not a second reader, so the three never disagree."""
    call = interaction.llm
    if call is None:
        return None
    return {name: getattr(call, name) for name in LLM_FIELDS}


def model_of(interaction: Interaction) -> str:
    """The model ``show`` lists for an interaction; empty when it is not an LLM call."""
    call = interaction.llm
    return call.model or "" if call is not None else ""
