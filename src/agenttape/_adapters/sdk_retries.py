"""``fast_retries``: the OpenAI and Anthropic SDKs retry a replayed 429 without waiting; and
the connection error they raise for a replayed one carries its note.

Both SDKs (Stainless-generated) compute the wait in ``BaseClient._calculate_retry_timeout`` and
sleep it in ``_sleep_for_retry``. When the exchange being retried was replayed, the wait is
still computed — the SDK's own retry logic runs unchanged — and then replaced by zero.
``time.sleep`` itself is never touched, so other code sleeps as usual.
"""

from __future__ import annotations

import functools
from types import ModuleType
from typing import Any

from .._core.blame import passed_through
from .._core.exchange import skip_retry_wait
from .._core.tracebacks import noting, noting_async
from . import ledger

__tracebackhide__ = passed_through


def install(base_client: ModuleType) -> list[ledger.Patch]:
    """Patches ``openai._base_client`` or ``anthropic._base_client``: the retry wait, and the
    SDK's ``request`` (what every API method calls), which hands out its own
    ``APIConnectionError`` for httpx's replayed one with the replay note moved onto it."""
    return [
        ledger.wrap(base_client.BaseClient, "_calculate_retry_timeout", _make_timeout),
        ledger.wrap(base_client.SyncAPIClient, "request", noting),
        ledger.wrap(base_client.AsyncAPIClient, "request", noting_async),
    ]


def _make_timeout(original: Any) -> Any:
    @functools.wraps(original)
    def _calculate_retry_timeout(self: Any, *args: Any, **kwargs: Any) -> Any:
        timeout = original(self, *args, **kwargs)
        return 0.0 if skip_retry_wait() else timeout

    return _calculate_retry_timeout
