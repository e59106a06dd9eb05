"""Placeholder API keys while replaying, so SDK clients start without real credentials.

An SDK such as ``openai.OpenAI()`` refuses to start when neither its ``api_key`` argument
nor its key variable is set, although a replay never reaches the provider; frameworks on the
SDKs (pydantic-ai's providers, LangChain's chat models) read the same variables themselves.
Every one of them asks ``os.environ.get`` or ``os.getenv`` (which calls it). So the
environment's ``get`` answers a provider key variable that is unset or empty with the placeholder —
only for code a replay-only cassette governs (``runtime.active()``: the context that opened
it and the threads that fall back to it), and only then.

``os.environ`` itself is never edited (SPEC §17): it is the whole process's, every thread's.
Iterating, indexing and copying it (what HTTP clients scan on each request, what a child
inherits) see the real environment; a child program gets placeholders in its own environment
at start (``for_children``). Real keys are only ever left where they are.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from types import ModuleType
from typing import Any

from .._core import runtime
from .._core.blame import passed_through
from .._core.provider_keys import PLACEHOLDER, PROVIDER_KEY_VARIABLES
from . import ledger

__tracebackhide__ = passed_through

_VARIABLES = frozenset(PROVIDER_KEY_VARIABLES)


def install(module: ModuleType) -> list[ledger.Patch]:
    """``get`` of the environment mapping's class (``os.environ``'s), which otherwise
    inherits ``Mapping.get``."""
    return [ledger.wrap(type(module.environ), "get", _placeholding)]


def _placeholding(original: Callable[..., Any]) -> Callable[..., Any]:
    def get(self: Any, key: Any, default: Any = None) -> Any:
        try:
            value = self[key]
        except KeyError:
            value = default
        else:
            if value:
                return value
        # unset, or empty (which the SDKs take as unset)
        if key in _VARIABLES and replaying():
            return PLACEHOLDER
        return value

    get.__doc__ = original.__doc__
    return get


def replaying() -> bool:
    """Whether the code running here is governed by a cassette that only replays and fills
    unset keys (agenttape's own: not the pytest-recording drop-in's, whose suites bring
    their keys)."""
    tape = runtime.active()
    return tape is not None and not tape.is_recording and tape.fills_keys


def for_children() -> dict[str, str]:
    """While replaying: a placeholder for every provider key variable that is unset, for the
    environment of a child program, which may use any SDK in any language (Node's openai
    package refuses to start without its key, as Python's does)."""
    if not replaying():
        return {}
    # indexing, not ``get``: the variables as they really are
    environ = os.environ
    return {
        name: PLACEHOLDER
        for name in PROVIDER_KEY_VARIABLES
        if name not in environ or not environ[name]
    }
