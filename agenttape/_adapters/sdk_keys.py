"""Placeholder API keys for the OpenAI and Anthropic SDK clients constructed while replaying
(see ``_core.provider_keys``): a client's ``__init__`` gets ``api_key`` set to the
placeholder when neither it nor the SDK's key variables say a key, and only then.

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
from types import ModuleType
from typing import Any

from .._core import provider_keys
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
        if provider_keys.wants_placeholder(kwargs, variables, credentials):
            kwargs["api_key"] = provider_keys.PLACEHOLDER
        original(self, *args, **kwargs)

    return __init__
