"""``agenttape runs mark STORE RUN_ID --cold "why"``: a person marks a kept run a cold case.

The run's cassette gets the mark in its header (``run.cold``, and a ``cold: why`` reason
first), written whole over the old file; then a new index row for it, in a new index file,
which readers prefer to the old row (the newest file wins) until a compaction drops the old.
"""

from __future__ import annotations

import os
from typing import Any

from .._core.errors import CassetteNotFoundError
from .._core.secrets import scrub_note
from .._core.wire import codec
from .index import batch, listing
from .index.rows import describe
from .run import COLD
from .store import StoredFile, open_store
from .stored_runs import RunInfo, info_of


def mark_cold(
    store: str | os.PathLike[str],
    run_id: str,
    why: str,
    *,
    storage_options: dict[str, Any] | None = None,
) -> RunInfo:
    """Mark run ``run_id`` a cold case; the run as it is listed now."""
    opened = open_store(store, storage_options)
    name = opened.find(run_id)
    if name is None:
        raise CassetteNotFoundError(f"run {run_id} is not in store {opened.url}")
    data = opened.read(name)
    header, interactions = codec.decode(data, f"{opened.url}/{name}")
    raw = header.get("run")
    summary: dict[str, Any] = dict(raw) if isinstance(raw, dict) else {}
    note = scrub_note(why)
    summary["cold"] = [*summary.get("cold", ()), note]
    summary["reasons"] = [COLD + note, *summary.get("reasons", ())]
    if summary.get("status", "ok") == "ok":
        summary["status"] = "flagged"
    header["run"] = summary
    encoded = codec.encode(header, interactions)
    opened.write(name, encoded)
    if listing.index_files(opened) and batch.can_write():
        batch.write_rows(opened, [describe(header, name, len(encoded), interactions)])
    return info_of(opened, StoredFile(name, len(encoded)))
