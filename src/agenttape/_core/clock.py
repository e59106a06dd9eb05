"""``freeze_time=True``: replay sees the recorded run's wall clock, so date logic repeats.

time-machine moves ``time.time()``, ``datetime.now()``, ``date.today()`` and friends (C-level,
so code that imported them earlier is covered too) while leaving the monotonic clocks that
timeouts and ``realtime`` replay rely on alone. It is optional and imported only when asked for.
"""

from __future__ import annotations

import datetime as _dt
from collections.abc import Callable
from typing import Any

from .errors import AgentTapeError


def freeze_clock(start: Any) -> Callable[[], None]:
    """Moves the clock to ``start`` (a datetime or epoch seconds), ticking from there.

    Returns the function that puts the clock back.
    """
    try:
        import time_machine
    except ImportError:
        raise AgentTapeError(
            "freeze_time=True needs time-machine: pip install 'agenttape-recorder[time]'"
        ) from None
    if start is None:
        raise AgentTapeError("freeze_time=True: the cassette does not say when it was recorded")
    if isinstance(start, (int, float)):
        start = _dt.datetime.fromtimestamp(start, tz=_dt.UTC)
    traveller = time_machine.travel(start, tick=True)
    traveller.start()
    return traveller.stop
