"""Rebuilding the index from the run files: for runs written before the store had an index,
or whose batch was lost.

Each day's new file is written whole before the day's old files are deleted; on a store
without conditional writes it is published by a manifest instead, as a compaction's is.
"""

from __future__ import annotations

import datetime as _dt
import os
from collections import defaultdict
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from typing import Any

from ..._core.errors import AgentTapeError, CassetteFormatError, CassetteNotFoundError
from ..._core.text import aware
from ..._core.wire import codec
from .. import deletions, erasure
from ..durations import parse_since, utc_day
from ..store import SUFFIX, LocalStore, Store, StoredFile, open_store
from . import batch, claims, compaction, listing, pending
from .rows import DAY, EXTRA, IndexFile, IndexRow, describe, encode, file_name, stamp, unreadable


@dataclass(slots=True, frozen=True)
class Rebuilt:
    """What ``rebuild_index`` did."""

    runs: int
    days: int
    unreadable: int
    replaced: int
    busy: list[str] = field(default_factory=list)
    # Days whose manifest was not published in time (a store without conditional writes).
    late: list[str] = field(default_factory=list)


def rebuild_index(
    store: str | os.PathLike[str],
    *,
    since: _dt.datetime | str | None = None,
    storage_options: dict[str, Any] | None = None,
) -> Rebuilt:
    """Index the run files of ``store`` again (each whole day from ``since``'s on), for runs
    written before the store had an index or whose batch was lost. Each day's new file is
    written whole before the day's old files are deleted; on a store without conditional
    writes it is published by a manifest instead, as a compaction's is."""
    if not batch.can_write():
        raise AgentTapeError(f"writing the run index needs pyarrow: {EXTRA}")
    opened = open_store(store, storage_options)
    moment = (
        parse_since(since) if isinstance(since, str) else None if since is None else aware(since)
    )
    since_day = "" if moment is None else utc_day(moment)
    erasure.complete(opened)
    old = [found for found in listing.index_files(opened) if found.day >= since_day]
    in_flight = _pending_lists(opened)
    if isinstance(opened, LocalStore) and not opened.root.is_dir():
        raise CassetteNotFoundError(f"store {opened.url} does not exist or is not a folder")
    folders, top = opened.listing()
    erased = deletions.erased(opened)
    top = [stored for stored in top if not erased.hides(stored.name)]
    when = stamp()
    tally = _Tally()
    with ThreadPoolExecutor(REBUILD_READERS) as pool:
        by_day = _loose_rows(opened, top, since_day, pool)
        days = sorted(
            {day for day in folders if DAY.fullmatch(day) and day >= since_day}
            | set(by_day)
            | {found.day for found in old}
        )
        for day in days:
            files = [
                s
                for s in opened.listing(day)[1]
                if s.name.endswith(SUFFIX) and not erased.hides(s.name)
            ]
            rows = by_day.pop(day, []) + list(pool.map(lambda s: _full_row(opened, s), files))
            _rebuild_day(opened, day, rows, old, when, erased, tally)
    # Lists of runs in flight whose every run is in a day just rebuilt were left by writers
    # that stopped before writing their batch. (A live writer's batch indexes its runs again.)
    for name, named_days in in_flight.items():
        if named_days and all(day in days and day not in tally.late for day in named_days):
            opened.delete(name)
    return Rebuilt(**asdict(tally))


def _loose_rows(
    store: Store, top: list[StoredFile], since_day: str, pool: ThreadPoolExecutor
) -> dict[str, list[IndexRow]]:
    """The rows of the runs at the top level (not in a dated folder), by their day."""
    by_day: dict[str, list[IndexRow]] = defaultdict(list)
    for row in pool.map(
        lambda stored: _full_row(store, stored),
        [stored for stored in top if stored.name.endswith(SUFFIX)],
    ):
        if row.day >= since_day and row.day:
            by_day[row.day].append(row)
    return by_day


@dataclass(slots=True)
class _Tally:
    """What ``rebuild_index`` has done so far, day by day."""

    runs: int = 0
    days: int = 0
    unreadable: int = 0
    replaced: int = 0
    busy: list[str] = field(default_factory=list)
    late: list[str] = field(default_factory=list)


def _rebuild_day(
    store: Store,
    day: str,
    rows: list[IndexRow],
    old: list[IndexFile],
    when: str,
    erased: deletions.Erased,
    tally: _Tally,
) -> None:
    """Replace the day's index files by ``rows``: claimed, as a compaction claims a day (the
    two never rewrite one day at once), or published by a manifest where the store has no
    conditional creates."""
    if not store.conditional_creates:
        done = compaction.publish_rebuilt(
            store, day, rows, {f.name for f in old if f.day == day}, when, erased
        )
        if isinstance(done, str):
            raise AgentTapeError(f"cannot rebuild the run index of {store.url} for {day}: {done}")
        if isinstance(done, compaction.Late):
            tally.late.append(day)
            return
        tally.replaced += done
    else:
        with claims.held(store, day) as claim:
            if claim is None:
                tally.busy.append(day)
                return
            tally.replaced += _replace_day(store, claim, day, rows, old, when)
    tally.runs += len(rows)
    tally.unreadable += sum(1 for row in rows if row.status == "unreadable")
    tally.days += bool(rows)


def _replace_day(
    store: Store,
    claim: claims.Claim,
    day: str,
    rows: list[IndexRow],
    old: list[IndexFile],
    when: str,
) -> int:
    """Write the day's rows as one file, then delete the day's old files; how many."""
    replaced = [found.name for found in old if found.day == day]
    output = file_name(day, when) if rows else None
    claims.record(store, claim, replaced, output)
    if output is not None:
        try:
            store.write(output, encode(rows))
        except Exception as exc:
            raise AgentTapeError(
                f"cannot write the run index of {store.url} for {day}: {exc}"
            ) from None
    store.delete_many(replaced)
    return len(replaced)


def _pending_lists(store: Store) -> dict[str, set[str]]:
    """Each list of runs in flight, with the days of the runs it names."""
    lists = pending.pending_files(store)
    found: dict[str, set[str]] = {}
    for stored, data in zip(lists, store.read_many([s.name for s in lists]), strict=True):
        if isinstance(data, Exception):
            continue
        try:
            named = pending.decode_pending(data)
        except ValueError:
            continue
        found[stored.name] = {run.name.partition("/")[0] for run in named}
    return found


# Run files read at once by a rebuild: object stores answer many reads in parallel.
REBUILD_READERS = 8


def _full_row(store: Store, stored: StoredFile) -> IndexRow:
    """A run's row from its whole file (its exchanges give the hosts and models)."""
    try:
        data = store.read(stored.name)
        header, interactions = codec.decode(data, f"{store.url}/{stored.name}")
    except (CassetteFormatError, OSError) as exc:
        return unreadable(stored, str(exc))
    return describe(header, stored.name, stored.size, interactions)
