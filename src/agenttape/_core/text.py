"""Wording shared by every message: counts, sizes and moments said as a person says them,
and how a cassette whose recording was cut short is described."""

from __future__ import annotations

import datetime as _dt
from collections.abc import Mapping
from typing import Any


def counted(count: int, noun: str, plural: str | None = None) -> str:
    """``"1 interaction"``, ``"2 interactions"``; ``plural`` when it is not ``noun + "s"``."""
    return f"{count} {noun if count == 1 else plural or noun + 's'}"


def byte_size(count: int) -> str:
    """Bytes for people, in one unit system: ``812 B``, ``3.4 KiB``, ``16 MiB``."""
    value, unit = float(count), "B"
    for larger in ("KiB", "MiB", "GiB"):
        if value < 1024:
            break
        value, unit = value / 1024, larger
    return f"{value:.0f} {unit}" if value.is_integer() else f"{value:.1f} {unit}"


def iso(timestamp: float) -> str:
    """A moment in UTC as ISO 8601 with milliseconds: ``2026-03-01T15:00:00.123Z``."""
    moment = _dt.datetime.fromtimestamp(timestamp, tz=_dt.UTC)
    return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def aware(moment: _dt.datetime) -> _dt.datetime:
    """``moment`` with a time zone: one given without is taken as UTC."""
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=_dt.UTC)


KEPT_BECAUSE = {
    "raised": "it raised",
    "failed": "a call failed",
    "flagged": "it was flagged",
}


def kept_because(metadata: Mapping[str, Any]) -> str | None:
    """Why a Recorder kept this run, as a headline (``"kept because a call failed: HTTP 500
    from api.openai.com/v1/chat/completions"``); None for a cassette no Recorder wrote."""
    run = metadata.get("run")
    if not isinstance(run, Mapping):
        return None
    status = run.get("status")
    reasons = [str(reason) for reason in run.get("reasons") or () if isinstance(reason, str)]
    if status == "ok" or not isinstance(status, str):
        return "kept with no error: the recorder keeps all runs, or sampled this one"
    text = f"kept because {KEPT_BECAUSE.get(status, status)}"
    if reasons:
        text += ": " + "; ".join(reasons)
    return text


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
