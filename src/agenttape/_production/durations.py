"""Times as a command line gives them: ``--since 7d``, ``--before 2026-11-20``, a retention of
``90d``; and the UTC day a moment falls in, which names a store's dated folders."""

from __future__ import annotations

import datetime as _dt
import re

from .._core.text import aware

RELATIVE = re.compile(r"(\d+(?:\.\d+)?)\s*([smhdw])")
UNITS = {"s": "seconds", "m": "minutes", "h": "hours", "d": "days", "w": "weeks"}


def parse_duration(text: str) -> _dt.timedelta:
    """``30m``, ``2h``, ``90d``, ``1w``: how long."""
    relative = RELATIVE.fullmatch(text.strip())
    if not relative:
        raise ValueError(f"{text!r} is not a duration (30m, 2h, 90d, 1w)")
    amount, unit = relative.groups()
    return _dt.timedelta(**{UNITS[unit]: float(amount)})


def parse_since(text: str, now: _dt.datetime | None = None) -> _dt.datetime:
    """``30m``, ``2h``, ``7d``, ``1w`` ago, or an ISO date/time (UTC unless it says otherwise)."""
    now = now or _dt.datetime.now(_dt.UTC)
    stripped = text.strip()
    relative = RELATIVE.fullmatch(stripped)
    if relative:
        amount, unit = relative.groups()
        return now - _dt.timedelta(**{UNITS[unit]: float(amount)})
    try:
        moment = _dt.datetime.fromisoformat(stripped.replace("Z", "+00:00").replace("z", "+00:00"))
    except ValueError:
        raise ValueError(
            f"since {text!r} is neither a duration (30m, 2h, 7d, 1w) nor an ISO date or time "
            "(2026-11-20, 2026-11-20T15:00Z)"
        ) from None
    return aware(moment)


def utc_day(moment: _dt.datetime) -> str:
    """The day (UTC) of ``moment``, as dated folders and index days are named."""
    return moment.astimezone(_dt.UTC).strftime("%Y-%m-%d")
