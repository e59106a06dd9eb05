"""Wording shared by every message: counts said as a person says them."""

from __future__ import annotations


def counted(count: int, noun: str, plural: str | None = None) -> str:
    """``"1 interaction"``, ``"2 interactions"``; ``plural`` when it is not ``noun + "s"``."""
    return f"{count} {noun if count == 1 else plural or noun + 's'}"
