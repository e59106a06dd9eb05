"""Wording shared by every message: counts said as a person says them, and how a cassette
whose recording was cut short is described."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def counted(count: int, noun: str, plural: str | None = None) -> str:
    """``"1 interaction"``, ``"2 interactions"``; ``plural`` when it is not ``noun + "s"``."""
    return f"{count} {noun if count == 1 else plural or noun + 's'}"


def interrupted(metadata: Mapping[str, Any]) -> str | None:
    """``"interrupted by KeyboardInterrupt after 3 interactions"`` for a cassette whose
    recording stopped on an exception or a signal (``metadata["interrupted"]``); None for one
    recorded to its end."""
    value = metadata.get("interrupted")
    if not value:
        return None
    if not isinstance(value, Mapping):
        return "interrupted"
    by, after = value.get("by"), value.get("after")
    text = "interrupted"
    if isinstance(by, str) and by:
        text += f" by {by}"
    if isinstance(after, int) and not isinstance(after, bool):
        text += f" after {counted(after, 'interaction')}"
    return text
