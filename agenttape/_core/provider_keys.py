"""Placeholder API keys while replaying, so SDK constructors start without real credentials.

An SDK such as ``openai.OpenAI()`` refuses to start when neither its ``api_key`` argument
nor its key variable is set, although a replay never reaches the provider. While a replay-only
cassette governs the code (``runtime.active()``: the context that opened it and the threads
that fall back to it), the SDK clients' constructors take a placeholder for ``api_key`` when
neither says a key (the adapter ``sdk_keys`` patches them). ``os.environ`` is never edited:
it is the whole process's, every thread's, the ones no cassette governs included (SPEC §17).
A child program gets placeholders in its own environment at start (``for_children``). Real
keys are only ever left where they are: nothing here reads them.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

from . import runtime

PLACEHOLDER = "agenttape-replay-placeholder"

PROVIDER_KEY_VARIABLES = (
    "OPENAI_API_KEY",
    "AZURE_OPENAI_API_KEY",
    "ANTHROPIC_API_KEY",
    "GEMINI_API_KEY",
    "GOOGLE_API_KEY",
    "MISTRAL_API_KEY",
    "COHERE_API_KEY",
    "CO_API_KEY",
    "GROQ_API_KEY",
    "TOGETHER_API_KEY",
    "FIREWORKS_API_KEY",
    "DEEPSEEK_API_KEY",
    "XAI_API_KEY",
    "PERPLEXITY_API_KEY",
    "OPENROUTER_API_KEY",
    "VOYAGE_API_KEY",
    "REPLICATE_API_TOKEN",
)


def replaying() -> bool:
    """Whether the code running here is governed by a cassette that only replays."""
    tape = runtime.active()
    return tape is not None and not tape.is_recording


def wants_placeholder(
    arguments: Mapping[str, object], variables: tuple[str, ...], credentials: tuple[str, ...]
) -> bool:
    """Whether an SDK client constructed with ``arguments`` gets the placeholder ``api_key``:
    while replaying, when neither ``api_key`` nor another of its ``credentials`` arguments is
    given and none of its key ``variables`` is set (an empty one counts as unset)."""
    if not replaying() or arguments.get("api_key") is not None:
        return False
    if any(arguments.get(name) is not None for name in credentials):
        return False
    environ = os.environ
    return not any(environ.get(name) for name in variables)


def for_children() -> dict[str, str]:
    """While replaying: a placeholder for every provider key variable that is unset, for the
    environment of a child program, which may use any SDK in any language (Node's openai
    package refuses to start without its key, as Python's does)."""
    if not replaying():
        return {}
    environ = os.environ
    return {name: PLACEHOLDER for name in PROVIDER_KEY_VARIABLES if not environ.get(name)}
