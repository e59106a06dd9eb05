"""``fast_retries``: the OpenAI and Anthropic SDKs retry a replayed 429 without waiting.

Both SDKs (Stainless-generated) compute the wait in ``BaseClient._calculate_retry_timeout`` and
sleep it in ``_sleep_for_retry``. When the exchange being retried was replayed, the wait is
still computed — the SDK's own retry logic runs unchanged — and then replaced by zero.
``time.sleep`` itself is never touched, so other code sleeps as usual.
"""

from __future__ import annotations

import functools
from types import ModuleType
from typing import Any

from .._core.exchange import skip_retry_wait

_PATCHED = "__agenttape_fast_retries__"


def install(base_client: ModuleType) -> None:
    """Patches ``openai._base_client`` or ``anthropic._base_client``; idempotent."""
    base = base_client.BaseClient
    if _PATCHED in vars(base):
        return
    setattr(base, _PATCHED, True)
    original = base._calculate_retry_timeout

    @functools.wraps(original)
    def _calculate_retry_timeout(self: Any, *args: Any, **kwargs: Any) -> Any:
        timeout = original(self, *args, **kwargs)
        return 0.0 if skip_retry_wait() else timeout

    base._calculate_retry_timeout = _calculate_retry_timeout
