"""Writing rows to the index: a recorder's batch, and the day files it becomes.

A recorder must not write a file per run (millions of tiny files), nor lose rows when the
store refuses them for a while: rows wait in a batch, written by age or size, kept for
another try within limits. pyarrow is imported only when a batch is written.
"""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Iterable

from ..._core.text import counted
from ..store import Store
from .rows import INDEX, IndexRow, encode, file_name, stamp

# A batch is written once it is this old or this big, and at every flush and close.
BATCH_SECONDS = 60.0
BATCH_ROWS = 10_000
# Rows a writer keeps for another try while the index cannot be written; older ones are
# dropped (the runs stay listed from their files; ``agenttape index rebuild`` indexes them).
MAX_WAITING_ROWS = 100_000
# Nor does it keep a row longer than this: a batch landing later could hold a row of a run
# deleted meanwhile whose tombstone is retired (``deletions.RETIRE_AFTER``, longer).
MAX_ROW_WAIT = 86_400.0


def can_write() -> bool:
    """pyarrow is installed (found, not imported: that waits for the first batch)."""
    import importlib.util

    try:
        return importlib.util.find_spec("pyarrow") is not None
    except ValueError:  # set to None in sys.modules: as if not installed
        return False


def write_rows(store: Store, rows: Iterable[IndexRow], when: str | None = None) -> None:
    """Write ``rows`` as one file per day; IndexWriteError carries the rows of the days the
    store refused. Rows without a day (a damaged file at the top level) are left out."""
    by_day: dict[str, list[IndexRow]] = defaultdict(list)
    for row in rows:
        if row.day:
            by_day[row.day].append(row)
    encoded = [(day, day_rows, encode(day_rows)) for day, day_rows in sorted(by_day.items())]
    failed: list[IndexRow] = []
    error: Exception | None = None
    for day, day_rows, data in encoded:
        try:
            store.write(file_name(day, when or stamp()), data)
        except Exception as exc:
            failed.extend(day_rows)
            error = exc
    if error is not None:
        raise IndexWriteError(failed, error)


class IndexWriteError(Exception):
    """Some days' rows could not be written."""

    def __init__(self, rows: list[IndexRow], cause: Exception) -> None:
        super().__init__(str(cause))
        self.rows = rows


class Batch:
    """The rows a recorder's writer has not written to the index yet. Only the writer thread
    touches it; ``flush`` and ``close`` ask that thread to write it."""

    def __init__(self) -> None:
        self.rows: list[IndexRow] = []
        # When each row was added (time.monotonic()), by the row's id.
        self.added: dict[int, float] = {}
        self.started = 0.0
        self.retry_at = 0.0

    def __len__(self) -> int:
        return len(self.rows)

    def add(self, row: IndexRow) -> None:
        now = time.monotonic()
        if not self.rows:
            self.started = now
        self.rows.append(row)
        self.added[id(row)] = now

    def due(self) -> bool:
        now = time.monotonic()
        return (
            bool(self.rows)
            and now >= self.retry_at
            and (len(self.rows) >= BATCH_ROWS or now - self.started >= BATCH_SECONDS)
        )

    def wait(self) -> float | None:
        """Seconds until the batch is due by age; None with nothing waiting."""
        if not self.rows:
            return None
        return max(
            0.0, self.started + BATCH_SECONDS - time.monotonic(), self.retry_at - time.monotonic()
        )

    def take(self) -> list[IndexRow]:
        rows, self.rows = self.rows, []
        self.added = {id(row): self.added[id(row)] for row in rows}
        return rows

    def keep(self, rows: list[IndexRow]) -> int:
        """Put back rows that failed, for the next batch (not before BATCH_SECONDS, however
        many wait); the number dropped past the limit or for having waited ``MAX_ROW_WAIT``."""
        self.started = time.monotonic()
        self.retry_at = self.started + BATCH_SECONDS
        fresh = [row for row in rows if self.started - self.added[id(row)] < MAX_ROW_WAIT]
        self.rows = fresh + self.rows
        dropped = max(0, len(self.rows) - MAX_WAITING_ROWS)
        if dropped:
            del self.rows[:dropped]
        waiting = {id(row) for row in self.rows}
        self.added = {key: at for key, at in self.added.items() if key in waiting}
        return dropped + len(rows) - len(fresh)


def waiting_rows_message(store: Store, count: int, cause: object) -> str:
    return (
        f"{counted(count, 'run')} could not be added to the run index at {store.url}/{INDEX} "
        f"({cause}); they wait for the next batch, and are listed from their files meanwhile"
    )


def lost_rows_message(store: Store, count: int, cause: object) -> str:
    return (
        f"{counted(count, 'run')} not added to the run index at {store.url}/{INDEX}: {cause}; "
        f"they stay in the store and 'agenttape index rebuild {store.url}' indexes them"
    )
