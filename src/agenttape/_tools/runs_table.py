"""``agenttape runs``' words: tags as a command line gives them, and the table it prints."""

from __future__ import annotations

import datetime as _dt
from collections.abc import Iterable

from .._core.text import byte_size
from .._production.stored_runs import RunInfo, plain


def parse_tags(pairs: Iterable[str]) -> dict[str, str]:
    """``["user_id=u_7710", "tenant_id=t_3"]`` as given on a command line."""
    tags = {}
    for pair in pairs:
        key, equals, value = pair.partition("=")
        if not equals or not key:
            raise ValueError(f"tag {pair!r} must be KEY=VALUE")
        tags[key] = value
    return tags


def format_runs(runs: Iterable[RunInfo]) -> str:
    """A plain table for a terminal: created (UTC), run id, status, exchanges, size, tags."""
    rows = [("created (UTC)", "run id", "status", "n", "size", "tags")]
    for info in runs:
        created = (
            "-"
            if info.created_at is None
            else info.created_at.astimezone(_dt.UTC).strftime("%Y-%m-%d %H:%M:%S")
        )
        tags = " ".join(f"{key}={plain(value)}" for key, value in info.tags.items())
        count = "-" if info.interactions is None else str(info.interactions)
        rows.append((created, info.run_id, info.status, count, byte_size(info.size), tags))
    if len(rows) == 1:
        return "no runs"
    widths = [max(len(row[i]) for row in rows) for i in range(5)]
    lines = [
        (
            "  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=False))
            + "  "
            + row[5]
        ).rstrip()
        for row in rows
    ]
    return "\n".join(lines)
