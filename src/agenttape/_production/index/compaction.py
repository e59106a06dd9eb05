"""Compaction: each day's index files merged into one, deleted runs' rows left out.

A day gains a file per writer batch; readers slow down with the file count, so a compaction
rewrites each day as one file, claimed (``claims``) or published by a manifest
(``manifests``) so that two hosts never both merge a day. A rebuild on a store without
conditional creates publishes its rows the same way (``publish_rebuilt``).
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING

from ..._core.text import counted
from ..deletions import Erased
from ..store import Store
from . import claims, manifests
from .listing import DayFiles, believe, day_files, days_of, listed_day
from .reader import NEWEST, IndexReader
from .rows import INDEX, IndexFile, IndexRow, encode, file_name, parquet_bytes, schema, stamp

if TYPE_CHECKING:
    import pyarrow


@dataclass(slots=True, frozen=True)
class Compacted:
    """What ``compact`` did: days rewritten, files merged, rows kept and rows dropped (their
    runs deleted); ``skipped`` holds a day and why for each day left as it was, ``busy`` the
    days another host was rewriting; ``by_manifests``: the store has no conditional creates,
    so days were published by manifests (``collected``: files and manifests deleted as
    garbage; ``late``: days whose merge took too long to publish, left as they were)."""

    days: int
    files: int
    rows: int
    skipped: list[tuple[str, str]]
    dropped: int = 0
    busy: list[str] = field(default_factory=list)
    by_manifests: bool = False
    collected: int = 0
    late: list[str] = field(default_factory=list)


def compact(
    store: Store,
    erased: Erased | None = None,
    rewrite: Iterable[str] = (),
    only: bool = False,
) -> Compacted:
    """Merge each day's files into one, leaving out the rows of deleted runs (``erased``);
    the days in ``rewrite`` are rewritten even from one file (``only``: no other day).

    Where the store has conditional creates, each day is claimed first (``claims``): two
    compactions at once never both merge a day. The merged file is written whole, then the
    merged-away files are deleted: a reader in between sees some rows twice and keeps one; a
    file written meanwhile is not among those deleted. Elsewhere the merged file is published
    by a manifest and what it replaced is deleted a grace period later (``manifests``). A day
    with a file that cannot be read is left as it was."""
    erased = erased or Erased()
    forced = set(rewrite)
    tally = _Tally(by_manifests=not store.conditional_creates)
    for day, listed in sorted(believe(store, days_of(store.walk(INDEX))).items()):
        present = listed.live()
        wanted = day in forced or not (only or (len(present) < 2 and not erased.day_gone(day)))
        if tally.by_manifests:
            done = _fold_day(store, day, erased) if wanted else None
            tally.collected += _collect(store, listed_day(store, day) if wanted else listed)
            if isinstance(done, Late):
                tally.late.append(day)
                continue
        elif wanted:
            with claims.held(store, day) as claim:
                if claim is None:
                    tally.busy.append(day)
                    continue
                done = _rewrite_day(store, day, erased, claim)
        else:
            done = None
        tally.add(day, done)
    return tally.result()


@dataclass(slots=True)
class _Tally:
    """What ``compact`` has done so far, day by day."""

    by_manifests: bool
    days: int = 0
    files: int = 0
    rows: int = 0
    dropped: int = 0
    collected: int = 0
    skipped: list[tuple[str, str]] = field(default_factory=list)
    busy: list[str] = field(default_factory=list)
    late: list[str] = field(default_factory=list)

    def add(self, day: str, done: tuple[int, int, int] | str | None) -> None:
        """A day merged (files, rows kept, rows dropped), or why not (None: not wanted)."""
        if done is None:
            return
        if isinstance(done, str):
            self.skipped.append((day, done))
            return
        self.days += 1
        self.files += done[0]
        self.rows += done[1]
        self.dropped += done[2]

    def result(self) -> Compacted:
        return Compacted(**asdict(self))


def _merged(
    store: Store, day_list: list[IndexFile], erased: Erased
) -> tuple[pyarrow.Table, int] | str:
    """The day's rows, one per run, without deleted runs', sorted by time; and how many
    there were before the deleted ones went; or why the day cannot be read."""
    import duckdb
    import pyarrow.compute as pc

    try:
        with IndexReader(store, day_list) as reader:
            result = reader.connection.sql(
                f"SELECT * EXCLUDE (filename) FROM {reader.source(day_list)} {NEWEST} "
                "ORDER BY created, run_id"
            ).arrow()
            # DuckDB 2 gives a stream of batches, older versions a whole table.
            table = result.read_all() if hasattr(result, "read_all") else result
            table = table.select(schema().names).cast(schema())
    except (duckdb.Error, OSError, ValueError, KeyError) as exc:
        return " ".join(str(exc).split())[:300]
    before = table.num_rows
    if erased.paths:
        import pyarrow as pa

        gone = pc.is_in(table["path"], value_set=pa.array(sorted(erased.paths), pa.string()))
        table = table.filter(pc.invert(gone))
    return table, before


def _newest_stamp(day_list: Sequence[IndexFile]) -> str:
    return max(found.name.rsplit("/", 1)[-1].split("-", 1)[0] for found in day_list)


def _rewrite_day(
    store: Store, day: str, erased: Erased, claim: claims.Claim
) -> tuple[int, int, int] | str:
    """Merge the day's files (listed again now that the day is claimed) into one; the files
    merged, rows kept and rows dropped, or why the day cannot be read."""
    day_list = day_files(store, day)
    if not day_list:
        return 0, 0, 0
    if erased.day_gone(day):
        claims.record(store, claim, [found.name for found in day_list], None)
        store.delete_many([found.name for found in day_list])
        return len(day_list), 0, 0
    merged = _merged(store, day_list, erased)
    if isinstance(merged, str):
        return merged
    table, before = merged
    output = file_name(day, _newest_stamp(day_list)) if table.num_rows else None
    claims.record(store, claim, [found.name for found in day_list], output)
    if output is not None:
        store.write(output, parquet_bytes(table))
    store.delete_many([found.name for found in day_list])
    return len(day_list), table.num_rows, before - table.num_rows


@dataclass(slots=True, frozen=True)
class Late:
    """A day's new manifest not published: what it replaces was listed over half the grace
    period ago, so a manifest tying with the one it builds on may have had its garbage
    deleted meanwhile. Nothing changed; running again publishes it."""

    seconds: float


def late_message(store_url: str, days: Sequence[str], command: str) -> str:
    """What a refusal to publish says: what happened, and what to do."""
    limit = manifests.grace() / 2
    return (
        f"{counted(len(days), 'day')} of the run index of {store_url} not published "
        f"({', '.join(days[:3])}{', …' if len(days) > 3 else ''}): the work took over "
        f"{limit:.0f} s, half of {manifests.GRACE} ({manifests.grace():.0f} s), so another "
        f"host may have deleted what it builds on; nothing was changed and nothing is lost. "
        f"Run '{command}' again; if it keeps taking that long, set {manifests.GRACE} higher "
        f"(the same on every host)"
    )


def _publish(
    store: Store,
    day: str,
    listed: DayFiles,
    read: Iterable[str],
    files: list[str],
    started: float,
) -> Late | None:
    """Publish a new manifest of ``day`` over ``listed`` (as listed at ``started``,
    time.monotonic()): naming ``files``, folding what it read (``read``: every live file of
    the day then) and what the manifest it builds on folded. Refused (its merged files
    deleted again) once half the grace period has passed since the listing."""
    limit = manifests.grace() / 2
    took = time.monotonic() - started
    if limit and took > limit:
        store.delete_many([name for name in files if manifests.is_merged(name)])
        return Late(took)
    base = listed.believed
    present = {found.name for found in listed.files}
    folded = (((base.folded if base else frozenset()) & present) | set(read)) - set(files)
    version = base.version + 1 if base else 1
    store.write(
        manifests.manifest_name(day, version), manifests.encode(day, version, files, folded)
    )
    return None


def _fold_day(store: Store, day: str, erased: Erased) -> tuple[int, int, int] | str | Late:
    """Merge the day's files into a new one and publish it by a new manifest (nothing is
    deleted: that waits for ``_collect``); the files merged, rows kept and rows dropped, or
    why the day cannot be read or was not published."""
    started = time.monotonic()
    listed = listed_day(store, day)
    day_list = listed.live()
    if not day_list:
        return 0, 0, 0
    kept = before = 0
    output = None
    if not erased.day_gone(day):
        merged = _merged(store, day_list, erased)
        if isinstance(merged, str):
            return merged
        table, before = merged
        kept = table.num_rows
        if kept:
            output = manifests.merged_name(file_name(day, _newest_stamp(day_list)), stamp())
            store.write(output, parquet_bytes(table))
    read = [found.name for found in day_list]
    late = _publish(store, day, listed, read, [output] if output else [], started)
    if late is not None:
        return late
    return len(day_list), kept, before - kept


def publish_rebuilt(
    store: Store, day: str, rows: Sequence[IndexRow], replaced: set[str], when: str, erased: Erased
) -> int | str | Late:
    """A rebuild's rows of ``day``, read from the run files, on a store without conditional
    creates: they replace the index files ``replaced`` (the day's, listed before the run files
    were read), through a manifest as a compaction publishes, never by deleting. Written
    first as a merged file of their own, which readers ignore until a manifest names it (a
    kill, or a tie lost to a compaction's manifest, changes nothing); then a manifest names
    it and folds what it replaces. Files the day gained meanwhile (a writer's batch, another
    compaction's merged file) are merged with it, their rows newer. How many files it
    replaced, or why the day cannot be read or was not published."""
    output = manifests.merged_name(file_name(day, when), stamp()) if rows else None
    if output is not None:
        store.write(output, encode(rows))
    started = time.monotonic()
    listed = listed_day(store, day)
    live = listed.live()
    files = [output] if output else []
    newer = [found for found in live if found.name not in replaced and found.name != output]
    if newer:
        day_list = [IndexFile(output, day), *newer] if output else newer
        merged = _merged(store, day_list, erased)
        if isinstance(merged, str):
            return merged
        table, _before = merged
        files = []
        if table.num_rows:
            files = [manifests.merged_name(file_name(day, _newest_stamp(day_list)), stamp())]
            store.write(files[0], parquet_bytes(table))
    late = _publish(store, day, listed, [found.name for found in live], files, started)
    if late is not None:
        if output is not None:
            store.delete(output)  # its rows are in the files it was to replace
        return late
    return len(replaced & {found.name for found in listed.files})


NO_MANIFEST = manifests.Manifest(name="", day="", version=-1, files=(), folded=frozenset(), at=0.0)


def _collect(store: Store, listed: DayFiles) -> int:
    """Delete a day's garbage once its believed manifest is a grace period old; how many
    files and manifests went."""
    wait = manifests.grace()
    believed = listed.believed or NO_MANIFEST
    now = time.time()
    if now - manifests.published(believed, listed.manifest_times.get(believed.name, 0.0)) < wait:
        return 0
    gone = manifests.garbage(
        {found.name: found.modified for found in listed.files},
        listed.manifest_names,
        believed,
        now - wait,
    )
    if gone:
        store.delete_many(gone)
    return len(gone)
