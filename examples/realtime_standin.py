"""A small local stand-in for OpenAI's WebSocket APIs: the Realtime API (``/v1/realtime``) and
the Responses API's WebSocket mode (``/v1/responses``).

It speaks the event protocol the real SDK expects and answers deterministically, so examples
and tests record honest cassettes from a real WebSocket server on 127.0.0.1 with no API key.

Realtime: ``session.created`` on connect; ``session.update`` -> ``session.updated``;
``conversation.item.create`` -> ``conversation.item.created``; ``response.create`` ->
``response.created``, the answer streamed as ``response.output_audio_transcript.delta`` and
``response.output_audio.delta`` (base64 PCM16, 24 kHz mono) or ``response.output_text.delta``
events, then ``response.done``.

Responses: each ``response.create`` streams ``response.created``,
``response.output_text.delta`` events and ``response.completed``; a ``previous_response_id``
continues that response, so several responses share one socket.

    python examples/realtime_standin.py --port 8766
"""

from __future__ import annotations

import argparse
import base64
import itertools
import json
import math
import struct
import threading
import time
from typing import Any

SAMPLE_RATE = 24_000
CHUNK_SAMPLES = 2_400  # 100 ms of audio per delta


def answer_for(question: str, previous: str | None = None) -> str:
    """The stand-in's spoken (or written) answer."""
    if previous:
        return f"Following up on {previous}: yes, the kettle ships today."
    if "kettle" in question.lower():
        return "Your kettle order 1017 ships today and arrives on Thursday."
    return f"You said: {question[:60]}"


def tone(words: str) -> bytes:
    """PCM16 audio standing in for ``words`` spoken: a 440 Hz tone, 60 ms per word."""
    samples = SAMPLE_RATE * 60 // 1000 * len(words.split())
    return b"".join(
        struct.pack("<h", int(8000 * math.sin(2 * math.pi * 440 * n / SAMPLE_RATE)))
        for n in range(samples)
    )


def _words(text: str) -> list[str]:
    parts = text.split(" ")
    return [part + (" " if index < len(parts) - 1 else "") for index, part in enumerate(parts)]


class _Realtime:
    """One Realtime session: the conversation so far and the ids it hands out."""

    def __init__(self, ids: itertools.count[int]) -> None:
        self.ids = ids
        self.session: dict[str, Any] = {
            "type": "realtime",
            "object": "realtime.session",
            "id": "sess_standin",
            "model": "gpt-realtime",
            "output_modalities": ["audio"],
        }
        self.items: list[dict[str, Any]] = []

    def event(self, kind: str, **fields: Any) -> str:
        return json.dumps({"type": kind, "event_id": f"event_{next(self.ids)}", **fields})

    def answer(self, event: dict[str, Any]) -> list[str]:
        kind = event.get("type")
        if kind == "session.update":
            self.session.update(event.get("session") or {})
            return [self.event("session.updated", session=self.session)]
        if kind == "conversation.item.create":
            item = {**(event.get("item") or {}), "id": f"item_{len(self.items) + 1}"}
            item.setdefault("object", "realtime.item")
            item.setdefault("status", "completed")
            previous = self.items[-1]["id"] if self.items else None
            self.items.append(item)
            return [self.event("conversation.item.created", previous_item_id=previous, item=item)]
        if kind == "response.create":
            return self._respond()
        return [self.event("error", error={"type": "invalid_request_error", "message": kind})]

    def _respond(self) -> list[str]:
        question = " ".join(
            part.get("text", "")
            for item in self.items
            if item.get("role") == "user"
            for part in item.get("content") or []
        )
        text = answer_for(question)
        response_id = f"resp_{next(self.ids)}"
        item_id = f"item_{len(self.items) + 1}"
        audio = "audio" in self.session.get("output_modalities", ["audio"])
        response = {"object": "realtime.response", "id": response_id, "status": "in_progress"}
        where = {"response_id": response_id, "item_id": item_id, "output_index": 0}
        out = [self.event("response.created", response=response)]
        delta_kind = (
            "response.output_audio_transcript.delta" if audio else "response.output_text.delta"
        )
        for word in _words(text):
            out.append(self.event(delta_kind, **where, content_index=0, delta=word))
        if audio:
            pcm = tone(text)
            for start in range(0, len(pcm), CHUNK_SAMPLES * 2):
                chunk = base64.b64encode(pcm[start : start + CHUNK_SAMPLES * 2]).decode("ascii")
                out.append(
                    self.event("response.output_audio.delta", **where, content_index=0, delta=chunk)
                )
            out.append(self.event("response.output_audio.done", **where, content_index=0))
            out.append(
                self.event(
                    "response.output_audio_transcript.done",
                    **where,
                    content_index=0,
                    transcript=text,
                )
            )
        else:
            out.append(self.event("response.output_text.done", **where, content_index=0, text=text))
        content = {
            "type": "output_audio" if audio else "output_text",
            ("transcript" if audio else "text"): text,
        }
        item = {"id": item_id, "object": "realtime.item", "type": "message", "role": "assistant",
                "status": "completed", "content": [content]}  # fmt: skip
        self.items.append(item)
        done = {**response, "status": "completed", "output": [item]}
        out.append(self.event("response.done", response=done))
        return out


class _Responses:
    """One Responses WebSocket: responses by id, so ``previous_response_id`` continues one."""

    def __init__(self, ids: itertools.count[int]) -> None:
        self.ids = ids
        self.texts: dict[str, str] = {}

    def answer(self, event: dict[str, Any]) -> list[str]:
        if event.get("type") != "response.create":
            error = {
                "type": "invalid_request_error",
                "message": f"unknown event {event.get('type')}",
            }
            return [json.dumps({"type": "error", "sequence_number": 0, "error": error})]
        previous = event.get("previous_response_id")
        if previous is not None and previous not in self.texts:
            error = {"type": "invalid_request_error", "message": f"unknown response {previous}"}
            return [json.dumps({"type": "error", "sequence_number": 0, "error": error})]
        raw = event.get("input")
        question = raw if isinstance(raw, str) else json.dumps(raw)
        text = answer_for(question, self.texts.get(previous) and previous)
        response_id = f"resp_{next(self.ids)}"
        self.texts[response_id] = text
        sequence = itertools.count()
        response = {
            "id": response_id,
            "object": "response",
            "created_at": 1_763_750_000,
            "model": event.get("model", "gpt-5"),
            "status": "in_progress",
            "previous_response_id": previous,
            "output": [],
        }

        def emit(kind: str, **fields: Any) -> str:
            return json.dumps({"type": kind, "sequence_number": next(sequence), **fields})

        out = [emit("response.created", response=response)]
        item_id = f"msg_{response_id}"
        for word in _words(text):
            out.append(
                emit(
                    "response.output_text.delta",
                    item_id=item_id,
                    output_index=0,
                    content_index=0,
                    delta=word,
                )
            )
        message = {"id": item_id, "type": "message", "role": "assistant", "status": "completed",
                   "content": [{"type": "output_text", "text": text, "annotations": []}]}  # fmt: skip
        out.append(
            emit(
                "response.completed",
                response={**response, "status": "completed", "output": [message]},
            )
        )
        return out


class RealtimeStandIn:
    """The stand-in on 127.0.0.1 (port 0: a free one). Give an SDK ``base_url`` (``http://…/v1``)
    or ``websocket_base_url`` (``ws://…/v1``)."""

    def __init__(self, port: int = 0, event_delay: float = 0.0) -> None:
        from websockets.sync.server import serve

        self.event_delay = event_delay  # between streamed events, as a model generating them
        self._ids = itertools.count(1)
        self._server = serve(self._handle, "127.0.0.1", port, max_size=None)
        self.port: int = self._server.socket.getsockname()[1]
        self.base_url = f"http://127.0.0.1:{self.port}/v1"
        self.websocket_base_url = f"ws://127.0.0.1:{self.port}/v1"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()

    def _handle(self, ws: Any) -> None:
        path = ws.request.path.partition("?")[0].rstrip("/")
        speaker: _Realtime | _Responses
        if path.endswith("/realtime"):
            speaker = _Realtime(self._ids)
            ws.send(speaker.event("session.created", session=speaker.session))
        elif path.endswith("/responses"):
            speaker = _Responses(self._ids)
        else:
            ws.close(4004, f"no WebSocket API at {path}")
            return
        for message in ws:
            try:
                event = json.loads(message)
            except ValueError:
                ws.close(1003, "events are JSON text")
                return
            for number, reply in enumerate(speaker.answer(event)):
                if number and self.event_delay:
                    time.sleep(self.event_delay)
                ws.send(reply)

    def stop(self) -> None:
        self._server.shutdown()
        self._thread.join(5)

    def __enter__(self) -> RealtimeStandIn:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, default=8766)
    parser.add_argument("--event-delay", type=float, default=0.0)
    args = parser.parse_args()
    standin = RealtimeStandIn(args.port, args.event_delay)
    print(f"stand-in WebSocket APIs on {standin.websocket_base_url} (realtime, responses)")
    try:
        threading.Event().wait()
    except KeyboardInterrupt:
        standin.stop()


if __name__ == "__main__":
    main()
