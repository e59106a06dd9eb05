"""Placeholder API keys while replaying, so SDK clients start without real credentials.

An SDK such as ``openai.OpenAI()`` refuses to start when neither its ``api_key`` argument
nor its key variable is set, although a replay never reaches the provider. While a replay-only
cassette governs the code (``runtime.active()``: the context that opened it and the threads
that fall back to it), the OpenAI and Anthropic clients' ``__init__`` gets ``api_key`` set to
the placeholder when neither it nor the SDK's key variables say a key, and only then.
``os.environ`` is never edited: it is the whole process's, every thread's, the ones no
cassette governs included (SPEC §17). A child program gets placeholders in its own
environment at start (``for_children``). Real keys are only ever left where they are.

How the SDKs read their key (openai 1.0, 2.8 and 3.57, anthropic 0.30, 0.75 and 2.14): every
client class takes ``api_key`` as a keyword-only argument defaulting to None and reads its
variable when it is None. The openai clients raise ``OpenAIError`` at construction without
one (Azure's unless ``azure_ad_token`` or its provider is given; 3.x unless ``admin_api_key``
or ``workload_identity``); the anthropic clients construct, and their first request raises
(``Could not resolve authentication method``) unless ``auth_token`` or, in 2.x,
``credentials``, ``config`` or ``profile`` says otherwise.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Mapping
from types import ModuleType
from typing import Any

from .._core import runtime
from .._core.provider_keys import PLACEHOLDER, PROVIDER_KEY_VARIABLES
from . import ledger

# SDK module -> (its client classes, their key variables, the other arguments that are
# credentials of their own)
CLIENTS: dict[str, tuple[tuple[str, ...], tuple[str, ...], tuple[str, ...]]] = {
    "openai._client": (
        ("OpenAI", "AsyncOpenAI"),
        ("OPENAI_API_KEY",),
        ("admin_api_key", "workload_identity"),
    ),
    "openai.lib.azure": (
        ("AzureOpenAI", "AsyncAzureOpenAI"),
        ("AZURE_OPENAI_API_KEY", "AZURE_OPENAI_AD_TOKEN"),
        ("azure_ad_token", "azure_ad_token_provider"),
    ),
    "anthropic._client": (
        ("Anthropic", "AsyncAnthropic"),
        ("ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN"),
        ("auth_token", "credentials", "config", "profile"),
    ),
}


def install(module: ModuleType) -> list[ledger.Patch]:
    """Patches the constructors of the client classes of an SDK module named in ``CLIENTS``."""
    classes, variables, credentials = CLIENTS[module.__name__]
    make = functools.partial(_defaulting, variables=variables, credentials=credentials)
    return [ledger.wrap(getattr(module, name), "__init__", make) for name in classes]


def _defaulting(original: Any, *, variables: tuple[str, ...], credentials: tuple[str, ...]) -> Any:
    @functools.wraps(original)
    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        if wants_placeholder(kwargs, variables, credentials):
            kwargs["api_key"] = PLACEHOLDER
        original(self, *args, **kwargs)

    return __init__


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
