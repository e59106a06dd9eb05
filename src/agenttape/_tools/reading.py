"""Reading a cassette as a person would: bodies decoded, server-sent events split, and the
LLM call parameters (as ``Interaction.llm`` reads them) laid out for printing.

Nothing here changes what is stored; every function works on copies of the recorded bytes.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator
from contextvars import ContextVar
from typing import Any, Literal
from urllib.parse import urlsplit

from .._core import bodies
from .._core.bodies import (
    END_OF_STREAM_EVENTS,
    READ_LIMIT,
    Decoded,
    Event,
    is_sse,
    parse_json,
    parse_sse,
    reached_end_of_stream,
)
from .._core.models import Headers, Interaction, Request, first_header
from .._core.wire import grpc as grpc_wire

__all__ = [
    "BODY_END_TEXT",
    "END_OF_STREAM_EVENTS",
    "LLM_FIELDS",
    "PARSE_FLOOR",
    "PARSE_RATIO",
    "READ_FLOOR",
    "READ_LIMIT",
    "READ_RATIO",
    "BodyEnd",
    "Decoded",
    "Event",
    "JsonValue",
    "body_end",
    "decode_within_budget",
    "grpc_messages",
    "is_sse",
    "llm_fields",
    "model_of",
    "parse_json",
    "parse_sse",
    "parseable",
    "readable_body",
    "reading",
    "sse_text",
    "status_text",
    "where",
]

JsonValue = Any


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


def decode_within_budget(headers: Headers, body: bytes, *, limit: int | None = None) -> Decoded:
    """``body`` with its Content-Encoding undone (last applied first), within ``limit``
    (``READ_LIMIT`` unless given) and what is left of the reading's budget."""
    budget = _budget.get()
    bound = READ_LIMIT if limit is None else limit
    if budget is not None:
        bound = min(bound, budget[0])
    decoded = bodies.decode_body(headers, body, limit=bound)
    if budget is not None and decoded.data is not body:
        budget[0] -= len(decoded.data)
    return decoded


def parseable(body: bytes, decoded: Decoded) -> bool:
    """True when ``decoded`` (``body`` decoded) is worth parsing: see ``PARSE_FLOOR``."""
    size = len(decoded.data)
    return not decoded.cut and (size <= PARSE_FLOOR or size <= PARSE_RATIO * len(body))


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


def body_end(interaction: Interaction) -> BodyEnd | None:
    """How the response body ended; None when there was no response, or for a WebSocket
    session (whose end is its closing, see ``_tools.frames.ending``)."""
    response = interaction.response
    if response is None or interaction.frames is not None:
        return None
    if interaction.error is not None and interaction.error.kind != "raised":
        return "cut"  # a function boundary that raised returned its whole answer
    if not response.truncated:
        return "complete"
    return "closed_after_end" if reached_end_of_stream(response) else "closed_early"


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


def grpc_messages(headers: Headers, body: bytes) -> list[dict[str, Any]] | None:
    """The messages of a gRPC body (``content-type: application/grpc``) for reading, each
    ``{"size", "fields"}`` (the protobuf wire format read without a schema: field numbers as
    keys) or ``{"size", "hex"}``; None for any other body, or one that is not whole
    messages."""
    kind = first_header(headers, "content-type") if headers else None
    if kind is None or not kind.startswith(grpc_wire.CONTENT_TYPE):
        return None
    try:
        messages = grpc_wire.split(body, first_header(headers, "grpc-encoding"))
    except (ValueError, OSError, EOFError):
        return None
    shown: list[dict[str, Any]] = []
    for message in messages:
        fields = grpc_wire.decode_raw(message)
        if fields is None or (message and not fields):
            shown.append({"size": len(message), "hex": message.hex(" ")})
        else:
            shown.append({"size": len(message), "fields": fields})
    return shown


def readable_body(headers: Headers, body: bytes) -> tuple[str, JsonValue, str]:
    """(kind, value, note) for showing a body: kind is ``empty``, ``json``, ``sse``,
    ``grpc``, ``text`` or ``binary``; value is the document, the event dicts, the gRPC
    messages (``grpc_messages``), the text or the bytes."""
    decoded = decode_within_budget(headers, body)
    data = decoded.data
    if not data:
        return "empty", None, decoded.note
    messages = grpc_messages(headers, data)
    if messages is not None:
        return "grpc", messages, decoded.note
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
    """Host, path and query of a request, without credentials: the column ``show`` lists
    (requests that differ only in their query must not look the same)."""
    parts = urlsplit(request.url)
    host = parts.netloc.rpartition("@")[2]
    query = f"?{parts.query}" if parts.query else ""
    return f"{host}{parts.path or '/'}{query}"


def status_text(interaction: Interaction) -> str:
    """The status ``show`` lists: the code, how a body ended short, or the transport error;
    marked ``(injected)`` when a fault made it, never the network (SPEC §18)."""
    text = _status_text(interaction)
    return f"{text} (injected)" if interaction.injected is not None else text


def _status_text(interaction: Interaction) -> str:
    response, error = interaction.response, interaction.error
    if response is None:
        return error.kind if error is not None else "?"
    call = grpc_wire.summary(interaction)
    if call is not None:
        return f"grpc {grpc_wire.status_name(call[1])}"
    if interaction.frames is not None:  # a WebSocket session: how it ended
        if error is not None:
            return f"{response.status}, dropped"
        return f"{response.status}, open" if interaction.closed is None else str(response.status)
    end = body_end(interaction)
    if end == "cut":
        return f"{response.status}, cut"
    if end == "closed_early":
        return f"{response.status}, closed early"
    return str(response.status)
