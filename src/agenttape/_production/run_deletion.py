"""``agenttape runs delete``: choosing the runs to delete, then deleting them (``erasure``)."""

from __future__ import annotations

import datetime as _dt
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from .._core.errors import CassetteNotFoundError
from . import deletions, erasure
from .index.rows import stamp
from .store import StoredFile, open_store
from .stored_runs import RunFilter, RunInfo, info_of, select_runs


@dataclass(slots=True, frozen=True)
class Deleted:
    """What a deletion removed (or, dry, would remove): the runs, their files and index rows;
    ``busy``: index days another host was rewriting (or, on a store without conditional
    writes, whose manifest was not published in time), which the next compaction finishes."""

    runs: list[RunInfo]
    files: int = 0
    rows: int = 0
    finished: int = 0
    busy: list[str] = field(default_factory=list)


def delete_runs(
    store: str | os.PathLike[str],
    *,
    tags: Mapping[str, Any] | None = None,
    before: _dt.datetime | None = None,
    run_ids: Iterable[str] = (),
    dry_run: bool = False,
    storage_options: dict[str, Any] | None = None,
) -> Deleted:
    """Delete the runs with every tag in ``tags`` and created before ``before``, and the runs
    ``run_ids`` names: their files and their rows in the run index."""
    ids = list(run_ids)
    if not (tags or before is not None or ids):
        raise ValueError("say which runs to delete: --tag K=V, --before T or run ids")
    opened = open_store(store, storage_options)
    chosen: dict[str, RunInfo] = {}
    for run_id in ids:
        name = opened.find(run_id)
        if name is None:
            raise CassetteNotFoundError(f"run {run_id} is not in store {opened.url}")
        chosen[name] = info_of(opened, StoredFile(name, 0))
    if tags or before is not None:
        for info in select_runs(opened, RunFilter(dict(tags or {}), None, False, before)):
            chosen[info.name] = info
    runs = sorted(chosen.values(), key=lambda info: info.name)
    if dry_run:
        return Deleted(runs)
    finished = erasure.complete(opened)
    if not runs:
        return Deleted(runs, finished=finished)
    paths = [info.name for info in runs]
    name = deletions.write_tombstone(opened, stamp(), paths)
    opened.delete_many(paths)
    stone = deletions.Tombstone(name, frozenset(paths), "", done=False)
    done = erasure.rewrite(opened, stone)
    return Deleted(
        runs, files=len(paths), rows=done.dropped, finished=finished, busy=done.busy + done.late
    )
