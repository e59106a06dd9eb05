"""How hard the reliability tests push: a quick pass in every run, a soak when asked.

``AGENTTAPE_SOAK=1`` turns on the long variants (CI runs them at the bounded sizes below).
"""

from __future__ import annotations

import os

from hypothesis import HealthCheck, settings

SOAK = os.environ.get("AGENTTAPE_SOAK", "") not in ("", "0")


def scaled(quick: int, soak: int) -> int:
    return soak if SOAK else quick


def properties(quick: int, soak: int) -> settings:
    """Hypothesis settings: no deadline (2 shared cores), example count by scale."""
    return settings(
        max_examples=scaled(quick, soak),
        deadline=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
    )
