"""Placeholder API keys while replaying, so SDK constructors start without real credentials.

An SDK such as ``openai.OpenAI()`` refuses to start when its key variable is unset, although a
replay never reaches the provider. While at least one replay-only cassette is active, every
provider key variable that is unset or empty holds a placeholder; the last cassette to close
restores them. Real keys are only ever left where they are: nothing here reads them.
"""

from __future__ import annotations

import os
import threading

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

_lock = threading.Lock()
_holders = 0
_filled: dict[str, str | None] = {}


def acquire() -> None:
    """Fill the missing variables (first holder only); pair with ``release``."""
    global _holders
    with _lock:
        _holders += 1
        if _holders > 1:
            return
        for name in PROVIDER_KEY_VARIABLES:
            before = os.environ.get(name)
            if not before:
                _filled[name] = before
                os.environ[name] = PLACEHOLDER


def release() -> None:
    """Put back what was there before; a variable the program set meanwhile is kept."""
    global _holders
    with _lock:
        _holders -= 1
        if _holders > 0:
            return
        for name, before in _filled.items():
            if os.environ.get(name) != PLACEHOLDER:
                continue
            if before is None:
                del os.environ[name]
            else:
                os.environ[name] = before
        _filled.clear()
