"""The sampling parameters of an LLM call, read from its URL and request body.

When an agent's answer changes between two runs, the first question is whether the model or
its sampling changed; this reads them from OpenAI (chat completions, completions, responses,
embeddings, also as Azure deployments), Anthropic messages, Gemini ``generateContent`` and AWS
Bedrock ``invoke``/``converse`` requests. It is the only such reader: ``Interaction.llm``,
``agenttape show`` and ``agenttape export`` all go through ``summarize``, so they never disagree.

Only JSON numbers count as numbers: ``"temperature": "0.7"`` is not what the provider was asked
for in a form it accepts, so it reads as None rather than being guessed at.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any
from urllib.parse import unquote

from .urls import parse_url

_GEMINI_APIS = ("generateContent", "streamGenerateContent")
_BEDROCK_APIS = ("invoke", "invoke-with-response-stream", "converse", "converse-stream")
_OPENAI_APIS = {"completions": "completions", "responses": "responses", "embeddings": "embeddings"}


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


def summarize(url: str, body: bytes) -> LLMCall | None:
    """The LLM parameters of a request to ``url`` with ``body``, or None when it is not a call
    to a known LLM API.

    Takes the URL and body rather than a ``Request`` so this module needs nothing from
    ``models``, which imports it for ``Interaction.llm``.
    """
    segments = parse_url(url).path.split("/")
    api = _api_of(segments)
    if api is None or not body or body.lstrip()[:1] != b"{":
        return None
    try:
        document = json.loads(body)
    except (ValueError, RecursionError):
        return None
    if not isinstance(document, dict):
        return None
    if api in _GEMINI_APIS:
        return _gemini(document, segments, api)
    if api in _BEDROCK_APIS:
        return _bedrock(document, segments, api)
    if api == "messages":
        return LLMCall(
            provider="anthropic",
            api=api,
            model=_str(document.get("model")),
            temperature=_number(document.get("temperature")),
            top_p=_number(document.get("top_p")),
            stream=document.get("stream") is True,
            max_tokens=_int(document.get("max_tokens")),
        )
    return _openai(document, segments, api)


def _api_of(segments: list[str]) -> str | None:
    """The API a path calls: Gemini names its method after a colon, Bedrock puts the model id
    between ``/model/`` and the action, the others are told apart by how the path ends."""
    last = segments[-1]
    if ":" in last:
        method = last.rsplit(":", 1)[-1]
        return method if method in _GEMINI_APIS else None
    if len(segments) >= 3 and segments[-3] == "model" and last in _BEDROCK_APIS:
        return last
    if segments[-2:] == ["v1", "messages"]:
        return "messages"
    if segments[-2:] == ["chat", "completions"]:
        return "chat.completions"
    return _OPENAI_APIS.get(last)


def _openai(document: dict[str, Any], segments: list[str], api: str) -> LLMCall:
    # Azure names the model by its deployment in the path; the body may leave it out.
    model = _str(document.get("model")) or _segment_after(segments, "deployments")
    if api == "responses":
        max_tokens = _int(document.get("max_output_tokens"))
    else:
        max_tokens = _int(document.get("max_completion_tokens"))
        if max_tokens is None:
            max_tokens = _int(document.get("max_tokens"))
    return LLMCall(
        provider="openai",
        api=api,
        model=model,
        temperature=_number(document.get("temperature")),
        top_p=_number(document.get("top_p")),
        seed=_int(document.get("seed")),
        stream=document.get("stream") is True,
        max_tokens=max_tokens,
    )


def _gemini(document: dict[str, Any], segments: list[str], api: str) -> LLMCall:
    config = _object(document.get("generationConfig") or document.get("generation_config"))
    model = None
    if len(segments) >= 2 and segments[-2] == "models":
        model = unquote(segments[-1].rsplit(":", 1)[0]) or None
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


def _bedrock(document: dict[str, Any], segments: list[str], api: str) -> LLMCall:
    """Bedrock's model id is the escaped path segment before the action (``%3A`` for ``:``).
    Converse bodies put sampling in ``inferenceConfig``; invoke bodies are the model's own,
    read here in the Anthropic shape (top-level ``temperature``, ``top_p``, ``max_tokens``)."""
    converse = api.startswith("converse")
    config = _object(document.get("inferenceConfig")) if converse else document
    return LLMCall(
        provider="bedrock",
        api=api,
        model=unquote(segments[-2]) or None,
        temperature=_number(config.get("temperature")),
        top_p=_number(config.get("topP" if converse else "top_p")),
        stream=api.endswith("-stream"),
        max_tokens=_int(config.get("maxTokens" if converse else "max_tokens")),
    )


def _segment_after(segments: list[str], name: str) -> str | None:
    if name in segments:
        index = segments.index(name)
        if index + 1 < len(segments):
            return unquote(segments[index + 1]) or None
    return None


def _object(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _str(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def _number(value: Any) -> float | None:
    """A JSON number as written (``0`` stays ``0`` in ``show``); a numeric string is not one."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return value


def _int(value: Any) -> int | None:
    if isinstance(value, bool) or not isinstance(value, int):
        return None
    return value
