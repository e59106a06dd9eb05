"""A small local stand-in for the OpenAI and Anthropic HTTP APIs.

It speaks the wire format the real SDKs expect (chat completions, messages, both streamed as
server-sent events) and answers deterministically, so examples and tests record honest
cassettes from a real server on 127.0.0.1 with no API key. Given OpenAI ``tools``, it calls the
first one (arguments from the user's words) and then answers from what the tool returned. ``rate_limit_first=N`` answers the
first N requests with a 429, as a provider at peak time does.

    python examples/llm_standin.py --port 8765
"""

from __future__ import annotations

import argparse
import itertools
import json
import re
import time
from typing import Any

from standin_server import JSONHandler, LocalServer

CREATED = 1_763_750_000
NEGATIVE_WORDS = re.compile(
    r"\b(broken|damaged|late|never|refund|terrible|worst|angry|wrong|missing|cracked)\b", re.I
)


def compose(messages: list[dict[str, Any]], system: str = "") -> str:
    """The stand-in's answer: classify when asked to, else a support reply."""
    texts = [system] + [_text(m.get("content")) for m in messages if m.get("role") == "system"]
    instructions = " ".join(texts).lower()
    user = next(
        (_text(m.get("content")) for m in reversed(messages) if m.get("role") == "user"), ""
    )
    if messages and messages[-1].get("role") == "tool":
        return _from_tool(_text(messages[-1].get("content")))
    if "sentiment" in instructions and "classify" in instructions:
        return "negative" if NEGATIVE_WORDS.search(user) else "positive"
    if "negative" in instructions:
        return (
            "I'm sorry your order let you down. I've arranged a replacement at no cost, "
            "and it ships today with tracking sent to your email."
        )
    return f"Thank you for your message! Glad to help with: {user[:80]}"


def choose_tool(body: dict[str, Any], number: int) -> dict[str, Any] | None:
    """An OpenAI tool call when tools are offered and the user spoke last: the first tool, each
    parameter set to the enum value the user mentions (else the first one, or their words)."""
    tools, messages = body.get("tools") or [], body.get("messages") or []
    if not tools or not messages or messages[-1].get("role") != "user":
        return None
    function = tools[0].get("function", {})
    user = _text(messages[-1].get("content"))
    arguments = {}
    for name, schema in (function.get("parameters", {}).get("properties") or {}).items():
        options = schema.get("enum") or []
        mentioned = [o for o in options if str(o).lower() in user.lower()]
        arguments[name] = (mentioned or options or [user])[0]
    return {
        "id": f"call_standin_{number}",
        "type": "function",
        "function": {"name": function.get("name"), "arguments": json.dumps(arguments)},
    }


def _from_tool(content: str) -> str:
    try:
        found = json.loads(content)
    except ValueError:
        return f"Here is what I found: {content}"
    if isinstance(found, dict) and found:
        facts = ", ".join(f"{key.replace('_', ' ')} {value}" for key, value in found.items())
        return f"Here is what I found: {facts}."
    return "I could not find anything matching that."


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return " ".join(part.get("text", "") for part in content if isinstance(part, dict))
    return ""


def _words(text: str) -> list[str]:
    return re.findall(r"\S+\s*", text) or [text]


class _Handler(JSONHandler):
    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)) or b"{}")
        standin = self.server.owner
        number = next(standin.counter)
        if number < standin.rate_limit_first:
            return self._rate_limited()
        if self.path.endswith("/chat/completions"):
            self._openai(body, number)
        elif self.path.endswith("/messages"):
            self._anthropic(body, number)
        else:
            self.send_json(
                404, {"error": {"message": f"no route {self.path}", "type": "not_found"}}
            )

    def _rate_limited(self) -> None:
        payload = {"error": {"message": "Rate limit reached", "type": "rate_limit_error"}}
        self.send_json(429, payload, (("retry-after", self.server.owner.retry_after),))

    def _events(self, events: list[bytes]) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        for event in events:
            self.wfile.write(f"{len(event):x}\r\n".encode() + event + b"\r\n")
            self.wfile.flush()
            if self.server.owner.chunk_delay:
                time.sleep(self.server.owner.chunk_delay)
        self.wfile.write(b"0\r\n\r\n")

    def _openai(self, body: dict[str, Any], number: int) -> None:
        model = body.get("model", "gpt-4o-mini")
        call = choose_tool(body, number)
        text = "" if call else compose(body.get("messages", []))
        ident = f"chatcmpl-standin-{number}"
        message: dict[str, Any] = {"role": "assistant", "content": text, "refusal": None}
        if call:
            message.update(content=None, tool_calls=[call])
        if not body.get("stream"):
            usage = {
                "prompt_tokens": 20,
                "completion_tokens": len(_words(text)),
                "total_tokens": 20 + len(_words(text)),
            }
            return self.send_json(
                200,
                {
                    "id": ident,
                    "object": "chat.completion",
                    "created": CREATED,
                    "model": model,
                    "choices": [
                        {
                            "index": 0,
                            "message": message,
                            "logprobs": None,
                            "finish_reason": "tool_calls" if call else "stop",
                        }
                    ],
                    "usage": usage,
                },
            )

        def chunk(delta: dict[str, Any], finish: str | None = None) -> bytes:
            payload = {
                "id": ident,
                "object": "chat.completion.chunk",
                "created": CREATED,
                "model": model,
                "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
            }
            return f"data: {json.dumps(payload)}\n\n".encode()

        events = [chunk({"role": "assistant", "content": ""})]
        events += [chunk({"content": word}) for word in _words(text)]
        events += [chunk({}, "stop"), b"data: [DONE]\n\n"]
        self._events(events)

    def _anthropic(self, body: dict[str, Any], number: int) -> None:
        model = body.get("model", "claude-sonnet-4-6")
        text = compose(body.get("messages", []), _text(body.get("system", "")))
        ident = f"msg_standin_{number}"
        message = {
            "id": ident,
            "type": "message",
            "role": "assistant",
            "model": model,
            "content": [{"type": "text", "text": text}],
            "stop_reason": "end_turn",
            "stop_sequence": None,
            "usage": {"input_tokens": 20, "output_tokens": len(_words(text))},
        }
        if not body.get("stream"):
            return self.send_json(200, message)

        def event(name: str, payload: dict[str, Any]) -> bytes:
            return f"event: {name}\ndata: {json.dumps({'type': name, **payload})}\n\n".encode()

        start = {
            **message,
            "content": [],
            "stop_reason": None,
            "usage": {"input_tokens": 20, "output_tokens": 0},
        }
        events = [
            event("message_start", {"message": start}),
            event(
                "content_block_start", {"index": 0, "content_block": {"type": "text", "text": ""}}
            ),
        ]
        events += [
            event("content_block_delta", {"index": 0, "delta": {"type": "text_delta", "text": w}})
            for w in _words(text)
        ]
        events += [
            event("content_block_stop", {"index": 0}),
            event(
                "message_delta",
                {
                    "delta": {"stop_reason": "end_turn", "stop_sequence": None},
                    "usage": {"output_tokens": len(_words(text))},
                },
            ),
            event("message_stop", {}),
        ]
        self._events(events)


class StandIn(LocalServer):
    """The stand-in API on 127.0.0.1; ``url`` is the base URL to give an SDK."""

    handler = _Handler

    def __init__(
        self,
        port: int = 0,
        rate_limit_first: int = 0,
        retry_after: str = "0",
        chunk_delay: float = 0.0,
    ) -> None:
        self.rate_limit_first = rate_limit_first
        self.retry_after = retry_after
        self.chunk_delay = chunk_delay
        self.counter = itertools.count()
        super().__init__(port)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, default=8765)
    parser.add_argument("--rate-limit-first", type=int, default=0)
    args = parser.parse_args()
    standin = StandIn(args.port, rate_limit_first=args.rate_limit_first)
    standin.serve_until_interrupted(
        f"stand-in API on {standin.url} (OpenAI: {standin.url}/v1, Anthropic: {standin.url})"
    )


if __name__ == "__main__":
    main()
