"""The sampling parameters of an LLM call, read from its request body.

When an agent's answer changes between two runs, the first question is whether the model or
its sampling changed; this reads them from OpenAI (chat completions, completions, responses,
Azure deployments), Anthropic messages and Gemini ``generateContent`` bodies.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from .matching import parse_url
from .models import Request


@dataclass(slots=True, frozen=True)
class LLMCall:
    """What decides an LLM's output besides the prompt; None where the request does not say."""

    provider: str
    api: str
    model: str | None
    temperature: float | None = None
    top_p: float | None = None
    seed: int | None = None
    stream: bool = False
    max_tokens: int | None = None


def summarize(request: Request) -> LLMCall | None:
    """The LLM parameters of ``request``, or None when it is not a call to a known LLM API."""
    path = parse_url(request.url).path
    api = _api_of(path)
    if api is None or not request.body or request.body.lstrip()[:1] != b"{":
        return None
    try:
        body = json.loads(request.body)
    except (ValueError, RecursionError):
        return None
    if not isinstance(body, dict):
        return None
    if api in ("generateContent", "streamGenerateContent"):
        return _gemini(body, path, api)
    if api == "messages":
        return LLMCall(
            provider="anthropic",
            api=api,
            model=_str(body.get("model")),
            temperature=_number(body.get("temperature")),
            top_p=_number(body.get("top_p")),
            stream=body.get("stream") is True,
            max_tokens=_int(body.get("max_tokens")),
        )
    model = _str(body.get("model")) or _azure_deployment(path)
    if api == "responses":
        max_tokens = _int(body.get("max_output_tokens"))
    else:
        max_tokens = _int(body.get("max_completion_tokens"))
        if max_tokens is None:
            max_tokens = _int(body.get("max_tokens"))
    return LLMCall(
        provider="openai",
        api=api,
        model=model,
        temperature=_number(body.get("temperature")),
        top_p=_number(body.get("top_p")),
        seed=_int(body.get("seed")),
        stream=body.get("stream") is True,
        max_tokens=max_tokens,
    )


def _api_of(path: str) -> str | None:
    if ":" in path.rsplit("/", 1)[-1]:
        method = path.rsplit(":", 1)[-1]
        return method if method in ("generateContent", "streamGenerateContent") else None
    for suffix, api in (
        ("/chat/completions", "chat.completions"),
        ("/completions", "completions"),
        ("/responses", "responses"),
        ("/messages", "messages"),
    ):
        if path.endswith(suffix):
            return api
    return None


def _gemini(body: dict[str, Any], path: str, api: str) -> LLMCall:
    config = body.get("generationConfig") or body.get("generation_config") or {}
    if not isinstance(config, dict):
        config = {}
    model = path.rsplit(":", 1)[0].rsplit("/models/", 1)[-1] if "/models/" in path else None
    return LLMCall(
        provider="gemini",
        api=api,
        model=model,
        temperature=_number(config.get("temperature")),
        top_p=_number(config.get("topP", config.get("top_p"))),
        seed=_int(config.get("seed")),
        stream=api == "streamGenerateContent",
        max_tokens=_int(config.get("maxOutputTokens", config.get("max_output_tokens"))),
    )


def _azure_deployment(path: str) -> str | None:
    parts = path.split("/")
    if "deployments" in parts:
        index = parts.index("deployments")
        if index + 1 < len(parts):
            return parts[index + 1]
    return None


def _str(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value)


def _int(value: Any) -> int | None:
    if isinstance(value, bool) or not isinstance(value, int):
        return None
    return value
