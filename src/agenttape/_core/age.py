"""How old a cassette is, and whether it may be recorded again now.

The age is counted from the recording's own time (``header.created_at``), not the file's
modification time, which a checkout, a copy or a rebase resets. It is measured against the
wall clock as read when agenttape was imported, counted on by the monotonic clock: a test
that freezes or moves the clock (time-machine, freezegun) neither ages nor rejuvenates a
cassette. A cassette whose recorded time lies in the future (recorded under a clock moved
forward) counts as new.
"""

from __future__ import annotations

import datetime as _dt
import os
import re
import socket
import time
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any, Literal, get_args
from urllib.parse import urlsplit

from .provider_keys import PLACEHOLDER

if TYPE_CHECKING:
    from .models import Interaction

OnExpired = Literal["warn", "fail", "rerecord"]
ON_EXPIRED: tuple[OnExpired, ...] = get_args(OnExpired)
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400, "y": 365 * 86400}
_AGE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([smhdwy])\s*$")
_CLOCKS = (time.time(), time.monotonic(), time.monotonic)
"""The wall clock at import, the monotonic clock then, and the monotonic clock itself (kept
in a tuple, where a clock-freezing library that rebinds module attributes does not look)."""

PROVIDER_HOSTS: dict[str, tuple[str, ...]] = {
    "api.openai.com": ("OPENAI_API_KEY",),
    "api.anthropic.com": ("ANTHROPIC_API_KEY",),
    "generativelanguage.googleapis.com": ("GEMINI_API_KEY", "GOOGLE_API_KEY"),
    "api.mistral.ai": ("MISTRAL_API_KEY",),
    "api.cohere.com": ("COHERE_API_KEY", "CO_API_KEY"),
    "api.cohere.ai": ("COHERE_API_KEY", "CO_API_KEY"),
    "api.groq.com": ("GROQ_API_KEY",),
    "api.together.xyz": ("TOGETHER_API_KEY",),
    "api.fireworks.ai": ("FIREWORKS_API_KEY",),
    "api.deepseek.com": ("DEEPSEEK_API_KEY",),
    "api.x.ai": ("XAI_API_KEY",),
    "api.perplexity.ai": ("PERPLEXITY_API_KEY",),
    "openrouter.ai": ("OPENROUTER_API_KEY",),
    "api.voyageai.com": ("VOYAGE_API_KEY",),
    "api.replicate.com": ("REPLICATE_API_TOKEN",),
}
"""The providers whose key a re-recording needs, by the host the cassette called."""


def parse_age(value: object) -> float | None:
    """``max_age`` in seconds: ``"90d"`` (``s``, ``m``, ``h``, ``d``, ``w``, ``y``), a
    ``timedelta``, or a number of seconds; None stays None. Anything else is ValueError."""
    if value is None:
        return None
    if isinstance(value, _dt.timedelta):
        seconds = value.total_seconds()
    elif isinstance(value, int | float) and not isinstance(value, bool):
        seconds = float(value)
    elif isinstance(value, str) and (match := _AGE.match(value)):
        seconds = float(match.group(1)) * _UNITS[match.group(2)]
    else:
        raise ValueError(
            f"max_age {value!r} is not an age: give '90d' (s, m, h, d, w or y), a timedelta "
            "or seconds"
        )
    if seconds <= 0:
        raise ValueError(f"max_age {value!r} must be more than nothing")
    return seconds


def now() -> float:
    """Seconds since the epoch by the clock as it was when agenttape was imported, counted on
    by the monotonic clock (see the module's note)."""
    wall, start, monotonic = _CLOCKS
    return wall + max(0.0, monotonic() - start)


def age(header: dict[str, Any]) -> float | None:
    """How many seconds ago the cassette of ``header`` was recorded; None when it does not
    say (a file of another tool)."""
    created = header.get("created_at")
    if not isinstance(created, _dt.datetime):
        return None
    if created.tzinfo is None:
        created = created.replace(tzinfo=_dt.UTC)
    return max(0.0, now() - created.timestamp())


def say_age(seconds: float) -> str:
    """``123 days``, ``5 hours``: an age in the largest unit that fits."""
    for name, size in (("day", 86400), ("hour", 3600), ("minute", 60)):
        if seconds >= size:
            count = int(seconds // size)
            return f"{count} {name}{'s' if count != 1 else ''}"
    return f"{int(seconds)} seconds"


def why_not_record(interactions: Iterable[Interaction], timeout: float = 3.0) -> str:
    """Empty when the calls of ``interactions`` can be recorded again now: the providers'
    keys are set and every host answers a connection; else what is missing."""
    places: dict[tuple[str, int], None] = {}
    for interaction in interactions:
        parts = urlsplit(interaction.request.url)
        if parts.scheme not in ("http", "https", "ws", "wss") or not parts.hostname:
            continue
        default = 443 if parts.scheme in ("https", "wss") else 80
        try:
            port = parts.port or default
        except ValueError:
            continue
        places[(parts.hostname, port)] = None
    for host, _port in places:
        names = PROVIDER_HOSTS.get(host, ())
        if names and not any(os.environ.get(n, "") not in ("", PLACEHOLDER) for n in names):
            return f"{' or '.join(names)} is not set"
    for host, port in places:
        try:
            socket.create_connection((host, port), timeout=timeout).close()
        except OSError as exc:
            return f"{host}:{port} does not answer ({exc.strerror or exc})"
    return ""
