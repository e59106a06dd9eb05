"""botocore's retry wait, for ``fast_retries``.

botocore's HTTP goes through urllib3 (and is recorded there); its retries wait with
``time.sleep`` in ``botocore.endpoint``. That module alone gets a clock whose ``sleep`` returns
at once when the response that asked for the retry was replayed.
"""

from __future__ import annotations

import time
from types import ModuleType
from typing import Any

from .._core.exchange import skip_retry_wait


class _RetryClock:
    """Stands in for the ``time`` module inside ``botocore.endpoint`` only."""

    __agenttape__ = True

    def __init__(self, clock: ModuleType) -> None:
        self._clock = clock

    def __getattr__(self, name: str) -> Any:
        return getattr(self._clock, name)

    def sleep(self, seconds: float) -> None:
        if skip_retry_wait():
            return
        self._clock.sleep(seconds)


def install(endpoint: ModuleType) -> None:
    clock = getattr(endpoint, "time", None)
    if clock is time:
        endpoint.time = _RetryClock(time)  # type: ignore[attr-defined]
