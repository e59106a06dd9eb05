"""botocore's retry wait, for ``fast_retries``.

botocore's HTTP goes through urllib3 (and is recorded there); its retries wait with
``time.sleep`` in ``botocore.endpoint``. That module alone gets a clock whose ``sleep`` returns
at once when the response that asked for the retry was replayed.
"""

from __future__ import annotations

import time
from types import ModuleType

from .._core.blame import passed_through
from .._core.exchange import skip_retry_wait
from . import ledger
from .forwarding import Forwarding

__tracebackhide__ = passed_through


class _RetryClock(Forwarding):
    """Stands in for the ``time`` module inside ``botocore.endpoint`` only."""

    def sleep(self, seconds: float) -> None:
        if skip_retry_wait():
            return
        self._wrapped.sleep(seconds)


def install(endpoint: ModuleType) -> list[ledger.Patch]:
    return [ledger.forwarder(endpoint, "time", _RetryClock, time)]
