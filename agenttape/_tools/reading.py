"""Reading a cassette as a person would: bodies decoded, server-sent events split, and the
LLM call parameters (as ``Interaction.llm`` reads them) laid out for printing.

Nothing here changes what is stored; every function works on copies of the recorded bytes.
"""

from __future__ import annotations

import json
from typing import Any, Literal

from .._core.bodies import (
    END_OF_STREAM_EVENTS,
    Decoded,
    Event,
    decode_body,
    is_sse,
    parse_json,
    parse_sse,
    reached_end_of_stream,
)
from .._core.models import Headers, Interaction

__all__ = [
    "END_OF_STREAM_EVENTS",
    "Decoded",
    "Event",
    "decode_body",
    "is_sse",
    "parse_json",
    "parse_sse",
]

JsonValue = Any


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
    """How the response body ended; None when there was no response."""
    response = interaction.response
    if response is None:
        return None
    if interaction.error is not None:
        return "cut"
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
