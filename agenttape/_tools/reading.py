"""Reading a cassette as a person would: bodies decoded, server-sent events split, and the
LLM call parameters (as ``Interaction.llm`` reads them) laid out for printing.

Nothing here changes what is stored; every function works on copies of the recorded bytes.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any, Literal
from urllib.parse import urlsplit

from .._core import encoding
from .._core.encoding import encodings_of
from .._core.models import Headers, Interaction, Request, Response, first_header

JsonValue = Any


@dataclass(slots=True)
class Decoded:
    """A body made readable: ``data`` with content-encoding undone, and a note when it could
    not be (fully) undone."""

    data: bytes
    note: str = ""
    cut: bool = False  # the limit stopped decoding before the body's end


READ_LIMIT = 8 << 20
"""Decoded bytes shown of one body: a compressed body may inflate to gigabytes."""

READ_FLOOR = 32 << 20
READ_RATIO = 8
"""Decoded bytes one reading of a cassette may produce in all: ``READ_FLOOR``, or
``READ_RATIO`` times the file's size when that is more. A file of many small bombs cannot
make a command hold more than a small multiple of its size (plus the floor)."""

PARSE_FLOOR = 1 << 20
PARSE_RATIO = 64
"""A decoded body is parsed (JSON, events) when it is whole and no larger than
``PARSE_FLOOR`` or ``PARSE_RATIO`` times its stored size: parsing costs many times the text
(a list of empty objects, thirty times), and no real body compresses sixty-four fold."""

_budget: ContextVar[list[int] | None] = ContextVar("agenttape_read_budget", default=None)


@contextlib.contextmanager
def reading(*sizes: int) -> Iterator[None]:
    """Bounds what the bodies of the cassettes of ``sizes`` bytes may decode to while the
    block runs (``show``, ``export``, ``diff``)."""
    token = _budget.set([max(READ_FLOOR, READ_RATIO * sum(sizes))])
    try:
        yield
    finally:
        _budget.reset(token)


def decode_body(headers: Headers, body: bytes, *, limit: int | None = None) -> Decoded:
    """``body`` with its Content-Encoding undone (last applied first), within ``limit``
    (``READ_LIMIT`` unless given) and what is left of the reading's budget."""
    codings = encodings_of(headers)
    if not codings:
        return Decoded(body)
    budget = _budget.get()
    limit = READ_LIMIT if limit is None else limit
    if budget is not None:
        limit = min(limit, budget[0])
    if limit <= 0:
        note = "not decoded: the bodies before it used up what one reading decodes"
        return Decoded(body, f"{note}; shown as stored", cut=True)
    decoding = encoding.Decoding(codings, body, limit)
    data = b"".join(decoding)
    if budget is not None:
        budget[0] -= decoding.produced
    if decoding.error:
        return Decoded(body, f"{decoding.error}; shown as stored")
    return Decoded(data, encoding.note(decoding, len(data)), decoding.cut)


def parseable(body: bytes, decoded: Decoded) -> bool:
    """True when ``decoded`` (``body`` decoded) is worth parsing: see ``PARSE_FLOOR``."""
    size = len(decoded.data)
    return not decoded.cut and (size <= PARSE_FLOOR or size <= PARSE_RATIO * len(body))


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


def _reached_end_of_stream(response: Response) -> bool:
    if not is_sse(response.headers):
        return False
    decoded = decode_body(response.headers, response.body)
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
    if parseable(body, decoded):
        if is_sse(headers):
            return "sse", [event.as_dict() for event in parse_sse(data)], decoded.note
        is_json, document = parse_json(data)
        if is_json:
            return "json", document, decoded.note
    try:
        return "text", data.decode("utf-8"), decoded.note
    except UnicodeDecodeError:
        return "binary", data, decoded.note


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
