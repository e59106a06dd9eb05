"""Finding the runs a recorder kept: list them by tag, time and status; copy one out to replay.

Listing reads only the head of each cassette (the header comes before the interactions), so
it stays cheap on object storage; a dated folder older than ``since`` is not read at all.
"""

from __future__ import annotations

import datetime as _dt
import os
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import msgpack

from .._core import codec
from .._core.errors import AgentTapeError, CassetteFormatError, CassetteNotFoundError
from .._core.files import write_atomic
from .run import RUN_ID
from .store import SUFFIX, Store, StoredFile, open_store

# Bytes read first to find a header; a bigger header is read whole.
HEAD_BYTES = 64 * 1024
RELATIVE = re.compile(r"(\d+(?:\.\d+)?)\s*([smhdw])")
UNITS = {"s": "seconds", "m": "minutes", "h": "hours", "d": "days", "w": "weeks"}
DATED_FOLDER = re.compile(r"\d{4}-\d{2}-\d{2}")


@dataclass(slots=True, frozen=True)
class RunInfo:
    """One kept run as the listing shows it; ``status`` is ``unreadable`` for a damaged file."""

    run_id: str
    name: str
    size: int
    created_at: _dt.datetime | None
    tags: dict[str, Any] = field(default_factory=dict)
    status: str = "ok"
    reasons: list[str] = field(default_factory=list)
    interactions: int | None = None
    duration: float | None = None

    @property
    def is_error(self) -> bool:
        """Raised, flagged or saw a failed exchange."""
        return self.status in ("raised", "flagged", "failed")

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-ready values (times as ISO 8601 text; tags as recorded)."""
        return {
            "run_id": self.run_id,
            "name": self.name,
            "size": self.size,
            "created_at": None if self.created_at is None else self.created_at.isoformat(),
            "tags": {key: _plain(value) for key, value in self.tags.items()},
            "status": self.status,
            "reasons": list(self.reasons),
            "interactions": self.interactions,
            "duration": self.duration,
        }


def _plain(value: Any) -> Any:
    if isinstance(value, (_dt.datetime, _dt.date)):
        return value.isoformat()
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


def parse_since(text: str, now: _dt.datetime | None = None) -> _dt.datetime:
    """``30m``, ``2h``, ``7d``, ``1w`` ago, or an ISO date/time (UTC unless it says otherwise)."""
    now = now or _dt.datetime.now(_dt.timezone.utc)
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
    return _aware(moment)


def parse_tags(pairs: Iterable[str]) -> dict[str, str]:
    """``["user_id=u_7710", "tenant_id=t_3"]`` as given on a command line."""
    tags = {}
    for pair in pairs:
        key, equals, value = pair.partition("=")
        if not equals or not key:
            raise ValueError(f"tag {pair!r} must be KEY=VALUE")
        tags[key] = value
    return tags


def _aware(moment: _dt.datetime) -> _dt.datetime:
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=_dt.timezone.utc)


def _tag_matches(value: Any, wanted: Any) -> bool:
    """Equal, or equal as command-line text (``beta=true`` finds the flag ``True``)."""
    if value == wanted and type(value) is type(wanted):
        return True
    if not isinstance(wanted, str):
        return False
    if isinstance(value, bool):
        return wanted.lower() == str(value).lower()
    return str(value) == wanted


def _peek_header(data: bytes) -> dict[str, Any] | None:
    """The header from the first bytes of a cassette written in the usual key order; None
    when these bytes do not tell (the caller then decodes the whole file)."""
    unpacker = msgpack.Unpacker(raw=False, strict_map_key=True, timestamp=3)
    unpacker.feed(data)
    try:
        found: dict[str, Any] = {}
        for _ in range(unpacker.read_map_header()):
            key = unpacker.unpack()
            if key not in (codec.MAGIC_KEY, "header"):
                return None
            found[key] = unpacker.unpack()
            if len(found) == 2:
                break
    except Exception:
        return None
    version = found.get(codec.MAGIC_KEY)
    header = found.get("header")
    if (
        not isinstance(version, int)
        or isinstance(version, bool)
        or not 1 <= version <= codec.FORMAT_VERSION
        or not isinstance(header, dict)
    ):
        return None
    return header


def read_header(store: Store, stored: StoredFile) -> dict[str, Any]:
    """A run's cassette header; CassetteFormatError when the file is not a readable cassette."""
    data = store.read_prefix(stored.name, HEAD_BYTES)
    header = _peek_header(data)
    if header is None:
        if len(data) < stored.size:
            data = store.read(stored.name)
        header, _interactions = codec.decode(data, f"{store.url}/{stored.name}")
    return header


def _info(store: Store, stored: StoredFile) -> RunInfo:
    run_id = stored.name.rsplit("/", 1)[-1][: -len(SUFFIX)]
    try:
        header = read_header(store, stored)
    except (CassetteFormatError, OSError) as exc:
        return RunInfo(
            run_id, stored.name, stored.size, None, status="unreadable", reasons=[str(exc)]
        )
    raw_summary = header.get("run")
    summary: dict[str, Any] = raw_summary if isinstance(raw_summary, dict) else {}
    created = header.get("created_at")
    tags = header.get("tags")
    interactions = summary.get("interactions")
    duration = summary.get("duration")
    return RunInfo(
        run_id=str(header.get("run_id") or run_id),
        name=stored.name,
        size=stored.size,
        created_at=_aware(created) if isinstance(created, _dt.datetime) else None,
        tags=tags if isinstance(tags, dict) else {},
        status=str(summary.get("status", "ok")),
        reasons=[str(r) for r in summary.get("reasons", []) if isinstance(r, str)],
        interactions=interactions if isinstance(interactions, int) else None,
        duration=float(duration) if isinstance(duration, (int, float)) else None,
    )


def _before(stored: StoredFile, since: _dt.datetime) -> bool:
    """True when the run sits in a dated folder from before ``since``'s day (UTC)."""
    folder, slash, _file = stored.name.partition("/")
    if not slash or not DATED_FOLDER.fullmatch(folder):
        return False
    return folder < since.astimezone(_dt.timezone.utc).strftime("%Y-%m-%d")


def list_runs(
    store: str | os.PathLike[str],
    *,
    tags: Mapping[str, Any] | None = None,
    since: _dt.datetime | str | None = None,
    errors: bool = False,
    storage_options: dict[str, Any] | None = None,
) -> list[RunInfo]:
    """Runs in ``store``, newest first: with every tag in ``tags``, created at or after
    ``since``, and (``errors=True``) only those that raised, were flagged or saw a failure.

    A damaged file is listed as ``unreadable`` when no filter is given, so it gets noticed.
    """
    opened = open_store(store, storage_options)
    moment = (
        parse_since(since) if isinstance(since, str) else None if since is None else _aware(since)
    )
    wanted = dict(tags or {})
    filtered = bool(wanted) or moment is not None or errors
    runs = []
    for stored in opened.files():
        if moment is not None and _before(stored, moment):
            continue
        info = _info(opened, stored)
        if info.status == "unreadable":
            if not filtered:
                runs.append(info)
            continue
        if moment is not None and (info.created_at is None or info.created_at < moment):
            continue
        if errors and not info.is_error:
            continue
        if any(
            key not in info.tags or not _tag_matches(info.tags[key], value)
            for key, value in wanted.items()
        ):
            continue
        runs.append(info)
    oldest = _dt.datetime.min.replace(tzinfo=_dt.timezone.utc)
    runs.sort(key=lambda info: (info.created_at or oldest, info.run_id), reverse=True)
    return runs


def fetch_run(
    store: str | os.PathLike[str],
    run_id: str,
    out: str | os.PathLike[str],
    *,
    storage_options: dict[str, Any] | None = None,
) -> Path:
    """Copy run ``run_id`` out of ``store`` to ``out`` (atomically), checked to be a whole
    cassette first: a damaged run raises CassetteFormatError and writes nothing."""
    if not RUN_ID.fullmatch(run_id):
        raise ValueError(f"{run_id!r} is not a run id (letters, digits, '.', '_' and '-')")
    opened = open_store(store, storage_options)
    name = opened.find(run_id)
    if name is None:
        raise CassetteNotFoundError(
            f"run {run_id} is not in store {opened.url}; list the runs with: agenttape runs {opened.url}"
        )
    try:
        data = opened.read(name)
    except OSError as exc:
        raise AgentTapeError(f"cannot read run {run_id} from {opened.url}/{name}: {exc}") from exc
    codec.decode(data, f"{opened.url}/{name}")
    target = Path(out)
    write_atomic(target, data)
    return target


def format_runs(runs: Iterable[RunInfo]) -> str:
    """A plain table for a terminal: created (UTC), run id, status, exchanges, size, tags."""
    rows = [("created (UTC)", "run id", "status", "n", "size", "tags")]
    for info in runs:
        created = (
            "-"
            if info.created_at is None
            else info.created_at.astimezone(_dt.timezone.utc).strftime("%Y-%m-%d %H:%M:%S")
        )
        tags = " ".join(f"{key}={_plain(value)}" for key, value in info.tags.items())
        count = "-" if info.interactions is None else str(info.interactions)
        rows.append((created, info.run_id, info.status, count, _size(info.size), tags))
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


def _size(size: int) -> str:
    if size < 1024:
        return f"{size} B"
    value = size / 1024
    for unit in ("KB", "MB"):
        if value < 1024:
            return f"{value:.1f} {unit}"
        value /= 1024
    return f"{value:.1f} GB"
