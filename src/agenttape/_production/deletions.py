"""Tombstones: which runs a store has deleted, written before anything is removed.

Deleting runs touches many files (the runs, then every index file holding their rows), and
a process can die between any two of them. So a deletion first writes one tombstone under
``_deleted/`` naming what it deletes, then removes the run files, then rewrites the index,
then marks the tombstone done. Until then every reader (the listing, a compaction, a rebuild)
treats what the tombstone names as gone: a run is never listed once its deletion started,
and never comes back; the next deletion, compaction or rebuild finishes the work.

A tombstone names run files (``paths``) and/or a day: every run in a dated folder before it
(``before``, retention by whole days).

A done tombstone of run files is retired (``erasure.retire``, by each compaction) once
``RETIRE_AFTER`` has passed since it was done: by then no writer's batch can still hold a row
of its runs (a writer drops rows that waited ``index.batch.MAX_ROW_WAIT``), and the index days
holding its runs are rewritten once more without them (dropping rows a late batch brought)
before its files are removed. So listings do not read one file per deletion forever. The
newest day rule stays: it hides late files in old days.
"""

from __future__ import annotations

import datetime as _dt
import secrets
from collections.abc import Iterable
from dataclasses import dataclass

import msgpack

from .store import Store

DELETED = "_deleted"
TOMBSTONE_SUFFIX = ".names"
DONE_SUFFIX = ".done"
# A done tombstone of run files is retired this long after it was done.
RETIRE_AFTER = _dt.timedelta(days=2)


@dataclass(slots=True, frozen=True)
class Tombstone:
    """One deletion: its file, what it deletes, and whether all of it is done."""

    name: str
    paths: frozenset[str]
    before: str
    done: bool
    # The done marker (empty while not done) and when it was written (a stamp).
    done_name: str = ""
    done_at: str = ""


@dataclass(slots=True, frozen=True)
class Erased:
    """Everything the store's tombstones delete: what readers leave out."""

    paths: frozenset[str] = frozenset()
    before: str = ""

    def hides(self, path: str) -> bool:
        """The run file ``path`` is deleted (or being deleted)."""
        if path in self.paths:
            return True
        folder, slash, _file = path.partition("/")
        return bool(slash and self.before and folder < self.before and folder[:1].isdigit())

    def day_gone(self, day: str) -> bool:
        """Every run of ``day`` is deleted."""
        return bool(self.before) and day < self.before

    def __bool__(self) -> bool:
        return bool(self.paths or self.before)


def stamp_name(stamp: str) -> str:
    return f"{DELETED}/{stamp}-{secrets.token_hex(8)}{TOMBSTONE_SUFFIX}"


def write_tombstone(store: Store, stamp: str, paths: Iterable[str], before: str = "") -> str:
    """Write a tombstone (whole, or not at all) and return its name."""
    name = stamp_name(stamp)
    store.write(name, msgpack.packb({"paths": sorted(paths), "before": before}))
    return name


def tombstones(store: Store) -> list[Tombstone]:
    """The store's tombstones, oldest first. One that cannot be read is an error: leaving it
    out would bring its runs back."""
    listed = {stored.name for stored in store.listing(DELETED)[1]}
    names = sorted(name for name in listed if name.endswith(TOMBSTONE_SUFFIX))
    marks = done_marks(listed)
    found = []
    for name, data in zip(names, store.read_many(names), strict=True):
        if isinstance(data, FileNotFoundError):
            continue  # retired meanwhile
        if isinstance(data, Exception):
            raise data
        try:
            body = msgpack.unpackb(data, raw=False)
            paths = frozenset(str(path) for path in body["paths"])
            before = str(body.get("before") or "")
        except Exception as exc:
            raise ValueError(f"{store.url}/{name} is not a tombstone: {exc}") from None
        base = name[: -len(TOMBSTONE_SUFFIX)]
        mark, done_at = marks.get(base, ("", ""))
        found.append(Tombstone(name, paths, before, bool(mark), mark, done_at))
    return found


def done_marks(listed: Iterable[str]) -> dict[str, tuple[str, str]]:
    """Each done marker among ``listed`` by its tombstone's name (without the suffix), with
    when it was done: ``<tombstone>@<stamp>.done``; a marker without a stamp (an older
    writer's) was done when its tombstone was written."""
    marks = {}
    for name in listed:
        if name.endswith(DONE_SUFFIX):
            base, at, when = name[: -len(DONE_SUFFIX)].partition("@")
            marks[base] = (name, when if at else base.rsplit("/", 1)[-1].split("-", 1)[0])
    return marks


def erased(store: Store, found: list[Tombstone] | None = None) -> Erased:
    """What every tombstone of the store deletes, together."""
    stones = tombstones(store) if found is None else found
    if not stones:
        return Erased()
    return Erased(
        paths=frozenset().union(*(stone.paths for stone in stones)),
        before=max(stone.before for stone in stones),
    )


def mark_done(store: Store, stone: Tombstone, when: str) -> None:
    """Mark ``stone`` done at ``when`` (a stamp, UTC)."""
    store.write(f"{stone.name[: -len(TOMBSTONE_SUFFIX)]}@{when}{DONE_SUFFIX}", b"")
