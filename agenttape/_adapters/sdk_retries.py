"""``fast_retries``: the OpenAI and Anthropic SDKs retry a replayed 429 without waiting.

Both SDKs (Stainless-generated) compute the wait in ``BaseClient._calculate_retry_timeout`` and
sleep it in ``SyncAPIClient._sleep_for_retry`` / ``AsyncAPIClient._sleep_for_retry``. While the
response being retried was replayed (or, for a replayed transport error, the cassette only
replays), the computed wait is still computed — the SDK's own retry logic runs unchanged — and
then replaced by zero. ``time.sleep`` itself is never touched, so other code sleeps as usual.
"""

from __future__ import annotations

import functools
from contextvars import ContextVar
from types import ModuleType
from typing import Any

from .. import _runtime

_PATCHED = "__agenttape_fast_retries__"
_skip_wait: ContextVar[bool] = ContextVar("agenttape_skip_retry_wait", default=False)


def install(base_client: ModuleType) -> None:
    """Patches ``openai._base_client`` or ``anthropic._base_client``; idempotent."""
    base = base_client.BaseClient
    if _PATCHED in vars(base):
        return
    setattr(base, _PATCHED, True)
    base._calculate_retry_timeout = _wrap_timeout(base._calculate_retry_timeout)
    base_client.SyncAPIClient._sleep_for_retry = _wrap_sleep(
        base_client.SyncAPIClient._sleep_for_retry
    )
    base_client.AsyncAPIClient._sleep_for_retry = _wrap_async_sleep(
        base_client.AsyncAPIClient._sleep_for_retry
    )


def _wrap_timeout(original: Any) -> Any:
    @functools.wraps(original)
    def _calculate_retry_timeout(self: Any, *args: Any, **kwargs: Any) -> Any:
        timeout = original(self, *args, **kwargs)
        return 0.0 if _skip_wait.get() else timeout

    return _calculate_retry_timeout


def _wrap_sleep(original: Any) -> Any:
    @functools.wraps(original)
    def _sleep_for_retry(self: Any, *args: Any, **kwargs: Any) -> Any:
        token = _skip_wait.set(_replayed(kwargs.get("response")))
        try:
            return original(self, *args, **kwargs)
        finally:
            _skip_wait.reset(token)

    return _sleep_for_retry


def _wrap_async_sleep(original: Any) -> Any:
    @functools.wraps(original)
    async def _sleep_for_retry(self: Any, *args: Any, **kwargs: Any) -> Any:
        token = _skip_wait.set(_replayed(kwargs.get("response")))
        try:
            return await original(self, *args, **kwargs)
        finally:
            _skip_wait.reset(token)

    return _sleep_for_retry


def _replayed(response: Any) -> bool:
    """True when the cassette asks for fast retries and what is retried came from it."""
    cassette = _runtime.active()
    if cassette is None or not cassette.fast_retries:
        return False
    if response is None:
        # A transport error (timeout, reset) before any response.
        return not cassette.is_recording
    from .httpx import is_replayed

    return is_replayed(response)
