"""Retention and erasure: deleting runs and their index rows together, crash-safe.

Order (see ``deletions``): a tombstone naming the runs, then the run files, then each index
day holding their rows rewritten without them (claimed like a compaction), then the tombstone
marked done. Readers leave out whatever a tombstone names from the moment it is written, so
a kill between any two steps never shows a run that is gone, nor hides one that is not
deleted; ``complete`` (run by every deletion, compaction and rebuild) finishes the work.
"""

from __future__ import annotations

import datetime as _dt

from .._core.errors import AgentTapeError
from . import deletions
from .index import compaction, listing
from .index.rows import DAY, INDEX, stamp
from .store import Store


def _days(stone: deletions.Tombstone) -> set[str]:
    return {path.partition("/")[0] for path in stone.paths if "/" in path}


def rewrite(store: Store, stone: deletions.Tombstone) -> compaction.Compacted:
    """Rewrite the index days holding the tombstone's rows; mark it done when none was busy."""
    erased = deletions.erased(store)
    days = _days(stone)
    if stone.before:
        days |= {found.day for found in listing.index_files(store) if found.day < stone.before}
    done = compaction.compact(store, erased, rewrite=days, only=True)
    if done.skipped:
        day, reason = done.skipped[0]
        raise AgentTapeError(
            f"the run index of {store.url} for {day} cannot be read ({reason}); the deleted "
            f"runs stay hidden; rebuild it with: agenttape index rebuild {store.url} --since {day}"
        )
    if not done.busy and not done.late:
        deletions.mark_done(store, stone, stamp())
    return done


def complete(store: Store) -> int:
    """Finish every deletion a process left half done; how many."""
    finished = 0
    for stone in deletions.tombstones(store):
        if stone.done:
            continue
        store.delete_many(sorted(stone.paths))
        if stone.before:
            _delete_days_before(store, stone.before, None)
        done = rewrite(store, stone)
        if not done.busy and not done.late:
            finished += 1
    return finished


def _delete_days_before(store: Store, day: str, limit: int | None) -> int:
    """Delete run files in dated folders before ``day`` (at most ``limit``); how many."""
    removed = 0
    for folder in sorted(f for f in store.listing()[0] if DAY.fullmatch(f) and f < day):
        names = [stored.name for stored in store.listing(folder)[1]]
        if limit is not None:
            names = names[: limit - removed]
        store.delete_many(names)
        removed += len(names)
        if limit is not None and removed >= limit:
            break
    return removed


def retire(store: Store, now: _dt.datetime | None = None) -> int:
    """Retire the done tombstones of run files done ``RETIRE_AFTER`` ago (see ``deletions``):
    rewrite the index days holding their runs without them, then remove their files (the
    tombstone first: a marker left alone is removed next time); how many."""
    moment = now or _dt.datetime.now(_dt.UTC)
    horizon = stamp(moment - deletions.RETIRE_AFTER)
    listed = {stored.name for stored in store.listing(deletions.DELETED)[1]}
    bases = {
        name[: -len(deletions.TOMBSTONE_SUFFIX)]
        for name in listed
        if name.endswith(deletions.TOMBSTONE_SUFFIX)
    }
    store.delete_many(
        [mark for base, (mark, _at) in deletions.done_marks(listed).items() if base not in bases]
    )
    stones = deletions.tombstones(store)
    due = [
        stone
        for stone in stones
        if stone.done and stone.paths and not stone.before and stone.done_at < horizon
    ]
    if not due:
        return 0
    days = set().union(*(_days(stone) for stone in due))
    indexed = {found.day for found in listing.index_files(store)} & days
    if indexed:
        done = compaction.compact(
            store, deletions.erased(store, stones), rewrite=indexed, only=True
        )
        if done.busy or done.skipped or done.late:
            return 0  # the next compaction retires them
    store.delete_many([stone.name for stone in due])
    store.delete_many([stone.done_name for stone in due])
    return len(due)


# Run files a recorder's retention deletes at most per index batch: a flush stays short.
RETENTION_FILES = 1000


def apply_retention(store: Store, keep: _dt.timedelta, limit: int = RETENTION_FILES) -> int:
    """Delete whole days older than ``keep`` (a recorder's ``retention``), at most ``limit``
    run files per call; how many were deleted. The first call of a day writes a tombstone for
    the days before it, so the runs are gone for readers at once, and their index days are
    deleted (whole files, cheap); later calls delete the files, ``limit`` at a time."""
    cutoff = (_dt.datetime.now(_dt.UTC) - keep).strftime("%Y-%m-%d")
    stones = deletions.tombstones(store)
    rule = max((s for s in stones if s.before), key=lambda s: s.before, default=None)
    if rule is None or rule.before < cutoff:
        folders = [f for f in store.listing()[0] if DAY.fullmatch(f) and f < cutoff]
        indexed = [d for d in store.listing(INDEX)[0] if d[5:] < cutoff]
        if not folders and not indexed:
            return 0
        name = deletions.write_tombstone(store, stamp(), (), before=cutoff)
        rule = deletions.Tombstone(name, frozenset(), cutoff, done=False)
        if not _rewrite_days_before(store, rule):
            return 0
    removed = _delete_days_before(store, rule.before, limit)
    if not rule.done and removed < limit and _rewrite_days_before(store, rule):
        deletions.mark_done(store, rule, stamp())
        # An older day rule is covered by this one.
        for stone in stones:
            if stone.before and stone.before < rule.before and not stone.paths:
                store.delete_many([stone.name, *([stone.done_name] if stone.done_name else [])])
    return removed


def _rewrite_days_before(store: Store, rule: deletions.Tombstone) -> bool:
    """Delete the index days before the rule's day; False when one was busy."""
    days = {found.day for found in listing.index_files(store) if found.day < rule.before}
    if not days:
        return True
    done = compaction.compact(store, deletions.erased(store), rewrite=days, only=True)
    return not done.busy and not done.skipped and not done.late
