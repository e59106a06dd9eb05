"""Retry waits that follow a replayed response take no wall time (``fast_retries``).

Each adapter marks whether the exchange it just served was replayed; the retry loops of the
libraries (urllib3 ``Retry``, botocore) ask ``skip_wait`` before sleeping. Nothing patches
``time.sleep`` itself, so unrelated sleeps keep their length.
"""

from __future__ import annotations

from contextvars import ContextVar

from .. import _runtime

_replayed: ContextVar[bool] = ContextVar("agenttape_replayed", default=False)


def mark(replayed: bool) -> None:
    _replayed.set(replayed)


def skip_wait() -> bool:
    if not _replayed.get():
        return False
    cassette = _runtime.active()
    return cassette is not None and cassette.fast_retries
