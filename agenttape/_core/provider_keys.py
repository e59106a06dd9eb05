"""Placeholder API keys while replaying, so SDK constructors start without real credentials.

An SDK such as ``openai.OpenAI()`` refuses to start when its key variable is unset, although a
replay never reaches the provider. While at least one replay-only cassette is active, the key
variables of every provider SDK the process has imported (or imports meanwhile) that are unset
or empty hold a placeholder; the last cassette to close restores them. Only the variables of
imported SDKs are filled: every variable added to the environment is scanned by HTTP clients
on each request (requests reads the proxy settings from it several times per request). Real
keys are only ever left where they are: nothing here reads them.
"""

from __future__ import annotations

import os
import sys
import threading
from collections.abc import Sequence
from types import ModuleType

PLACEHOLDER = "agenttape-replay-placeholder"

_OPENAI_COMPATIBLE = (
    "OPENAI_API_KEY",
    "AZURE_OPENAI_API_KEY",
    "DEEPSEEK_API_KEY",
    "XAI_API_KEY",
    "PERPLEXITY_API_KEY",
    "OPENROUTER_API_KEY",
    "GROQ_API_KEY",
    "TOGETHER_API_KEY",
    "FIREWORKS_API_KEY",
)

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

SDK_KEY_VARIABLES: dict[str, tuple[str, ...]] = {
    # The openai SDK also serves the providers with OpenAI-compatible APIs, whose keys the
    # program reads from the environment to hand over.
    "openai": _OPENAI_COMPATIBLE,
    "anthropic": ("ANTHROPIC_API_KEY",),
    "google.genai": ("GEMINI_API_KEY", "GOOGLE_API_KEY"),
    "google.generativeai": ("GEMINI_API_KEY", "GOOGLE_API_KEY"),
    "mistralai": ("MISTRAL_API_KEY",),
    "cohere": ("COHERE_API_KEY", "CO_API_KEY"),
    "groq": ("GROQ_API_KEY",),
    "together": ("TOGETHER_API_KEY",),
    "fireworks": ("FIREWORKS_API_KEY",),
    "xai_sdk": ("XAI_API_KEY",),
    "voyageai": ("VOYAGE_API_KEY",),
    "replicate": ("REPLICATE_API_TOKEN",),
    # Frameworks that call any provider read every key.
    "litellm": PROVIDER_KEY_VARIABLES,
    "langchain": PROVIDER_KEY_VARIABLES,
    "langchain_core": PROVIDER_KEY_VARIABLES,
    "llama_index": PROVIDER_KEY_VARIABLES,
    "pydantic_ai": PROVIDER_KEY_VARIABLES,
    "instructor": PROVIDER_KEY_VARIABLES,
    "dspy": PROVIDER_KEY_VARIABLES,
}

_lock = threading.Lock()
_holders = 0
_filled: dict[str, str | None] = {}


class _SdkImports:
    """Fills an SDK's variables as its import starts while a replay holds the keys; finds
    nothing itself, so the import goes on as it would (a meta path finder by protocol, as
    ``importlib.abc`` would cost every ``import agenttape`` the import of importlib.resources)."""

    def find_spec(
        self, fullname: str, path: Sequence[str] | None = None, target: ModuleType | None = None
    ) -> None:
        if _holders and fullname in SDK_KEY_VARIABLES:
            with _lock:
                if _holders:
                    _fill(SDK_KEY_VARIABLES[fullname])
        return None


_FINDER = _SdkImports()


def _fill(names: tuple[str, ...]) -> None:
    environ = os.environ
    for name in names:
        if name in _filled:
            continue
        before = environ.get(name)
        if not before:
            _filled[name] = before
            environ[name] = PLACEHOLDER


def acquire() -> None:
    """Fill the missing variables of the imported SDKs (first holder only) and of any SDK
    imported until ``release``."""
    global _holders
    with _lock:
        _holders += 1
        if _holders > 1:
            return
        if _FINDER not in sys.meta_path:
            sys.meta_path.insert(0, _FINDER)
        modules = sys.modules
        for sdk, names in SDK_KEY_VARIABLES.items():
            if sdk in modules:
                _fill(names)


def for_children() -> dict[str, str]:
    """While a replay holds the keys: a placeholder for every provider key variable that is
    unset, for the environment of a child program, which may use any SDK in any language
    (Node's openai package refuses to start without its key, as Python's does)."""
    with _lock:
        if not _holders:
            return {}
        environ = os.environ
        return {name: PLACEHOLDER for name in PROVIDER_KEY_VARIABLES if not environ.get(name)}


def release() -> None:
    """Put back what was there before; a variable the program set meanwhile is kept."""
    global _holders
    with _lock:
        _holders -= 1
        if _holders > 0:
            return
        if _FINDER in sys.meta_path:  # no hook left behind while no replay holds the keys
            sys.meta_path.remove(_FINDER)
        for name, before in _filled.items():
            if os.environ.get(name) != PLACEHOLDER:
                continue
            if before is None:
                del os.environ[name]
            else:
                os.environ[name] = before
        _filled.clear()
