"""The error answers a fault gives, in each provider's own shape (body, status, headers), so
the provider's SDK raises the exception it raises in production and its retries run as they
do there."""

from __future__ import annotations

from typing import Literal, get_args

Provider = Literal["openai", "anthropic", "google", "bedrock", "mistral", "cohere", "json"]
"""Whose shape an injected error takes; ``json`` is a plain JSON API's."""

PROVIDERS: tuple[Provider, ...] = get_args(Provider)
