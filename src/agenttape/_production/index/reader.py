"""Reading the index with DuckDB: the rows a listing asks for, the newest row of each run.

Files are only ever added whole and then, by compaction or a rebuild, deleted once their rows
are in a newer file; so a reader may see a run's row twice, never half a file, and keeps the
row of the newest file (file names start with the time they were written; a merged file's,
with its newest part's). DuckDB is imported only when used.
"""

from __future__ import annotations

import datetime as _dt
import os
import re
import tempfile
from collections import defaultdict
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from ..store import LocalStore, Store
from .rows import IndexFile, IndexRow, tag_text, unpack_tags

if TYPE_CHECKING:
    import duckdb


def can_read() -> bool:
    import importlib.util

    try:
        return importlib.util.find_spec("duckdb") is not None
    except ValueError:
        return False


# The row of a run's newest file wins: compaction and rebuilds leave a row in two files for a
# moment, and a run id used twice in a day leaves the older run's row behind its newer one.
NEWEST = "QUALIFY row_number() OVER (PARTITION BY path ORDER BY parse_filename(filename) DESC) = 1"
EPOCH = _dt.datetime(1970, 1, 1, tzinfo=_dt.UTC)
COLUMNS = (
    "SELECT run_id, epoch_us(created), status, reasons, n, bytes, path, hosts, models, "
    "tags_msgpack, duration, filename"
)


class IndexReader:
    """DuckDB over some of the index's files. A remote store's files are fetched first, all at
    once (in parallel, one request each), into a temporary folder: DuckDB then reads local
    files rather than asking the object store for each column of each file in turn."""

    def __init__(self, store: Store, files: Sequence[IndexFile]) -> None:
        self._store = store
        self._files = list(files)
        self._paths: dict[str, str] = {}
        self._folder: tempfile.TemporaryDirectory[str] | None = None
        self._connection: duckdb.DuckDBPyConnection | None = None

    def __enter__(self) -> IndexReader:
        import duckdb

        if isinstance(self._store, LocalStore):
            self._paths = {f.name: self._store.location(f.name) for f in self._files}
        elif self._files:
            self._folder = tempfile.TemporaryDirectory(prefix="agenttape-index-")
            copy = LocalStore(self._folder.name)
            names = [f.name for f in self._files]
            for name, data in zip(names, self._store.read_many(names), strict=True):
                if isinstance(data, Exception):
                    raise data
                copy.write(name, data)
                self._paths[name] = copy.location(name)
        self._connection = duckdb.connect()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._connection is not None:
            self._connection.close()
        if self._folder is not None:
            self._folder.cleanup()

    @property
    def connection(self) -> duckdb.DuckDBPyConnection:
        assert self._connection is not None, "open the reader with 'with'"
        return self._connection

    def source(self, files: Sequence[IndexFile], row_numbers: bool = False) -> str:
        """The FROM clause over ``files``: one relation, each row with its file's name (and
        its row's number in the file)."""
        paths = ", ".join("'" + self._paths[f.name].replace("'", "''") + "'" for f in files)
        numbered = ", file_row_number = true" if row_numbers else ""
        return f"read_parquet([{paths}], filename = true, union_by_name = true{numbered})"

    def select(
        self,
        files: Sequence[IndexFile],
        *,
        since: _dt.datetime | None,
        errors: bool,
        tags: dict[str, Any],
        before: _dt.datetime | None = None,
    ) -> list[IndexRow]:
        """The rows in ``files`` that may match: created at or after ``since``, failed
        (``errors``), and each tag's text equal to the wanted text or its lower case. The
        caller applies the exact test, the one a listing from headers applies, to these few."""
        if not files:
            return []
        where, parameters = _conditions(since, before, errors, tags)
        if where:
            found = self._matching(files, where, parameters)
        else:
            found = self.connection.execute(
                f"{COLUMNS} FROM {self.source(files)} {NEWEST}", parameters
            ).fetchall()
        return [_row(*record) for record in found]

    def _matching(self, files: Sequence[IndexFile], where: str, parameters: list[Any]) -> list[Any]:
        """The newest row of each run whose newest row matches ``where``, in two steps: the
        row numbers of the matching rows, from the few columns the conditions read; then
        those rows whole, from their row groups only (files are written in small row groups),
        rather than every column of every row of the files."""
        hits = self.connection.execute(
            "SELECT path, filename, file_row_number "
            f"FROM {self.source(files, row_numbers=True)} WHERE {where}",
            parameters,
        ).fetchall()
        # A run matching in two files (a compaction half done): the newest file's row.
        newest: dict[str, tuple[str, int]] = {}
        for path, filename, number in hits:
            seen = newest.get(path)
            if seen is None or os.path.basename(filename) > os.path.basename(seen[0]):
                newest[path] = (filename, number)
        stale = self._newer_elsewhere(files, newest)
        by_file: dict[str, list[int]] = defaultdict(list)
        for path, (filename, number) in newest.items():
            if path not in stale:
                by_file[filename].append(number)
        found: list[Any] = []
        for filename, numbers in sorted(by_file.items()):
            quoted = "'" + filename.replace("'", "''") + "'"
            found += self.connection.execute(
                f"{COLUMNS} FROM read_parquet({quoted}, filename = true, file_row_number = true)"
                f" WHERE file_row_number IN ({', '.join(str(int(n)) for n in sorted(numbers))})"
            ).fetchall()
        return found

    def _newer_elsewhere(
        self, files: Sequence[IndexFile], newest: dict[str, tuple[str, int]]
    ) -> set[str]:
        """The runs among ``newest`` with a newer row that does not match (a run id used again
        in a day, a status changed by a mark): only the files of a run's day named after its
        matching row's file can hold one."""
        oldest: dict[str, str] = {}
        for filename, _number in newest.values():
            day = FILE_DAY.search(filename)
            if day is not None:
                name = os.path.basename(filename)
                oldest[day.group(1)] = min(oldest.get(day.group(1), name), name)
        later = [f for f in files if f.day in oldest and f.name.rsplit("/", 1)[-1] > oldest[f.day]]
        if not later:
            return set()
        rows = self.connection.execute(
            f"SELECT path, parse_filename(filename) FROM {self.source(later)} "
            "WHERE path IN (SELECT unnest(?))",
            [sorted(newest)],
        ).fetchall()
        return {path for path, name in rows if name > os.path.basename(newest[path][0])}

    def paths(self, files: Sequence[IndexFile]) -> set[str]:
        """The run files that ``files`` hold a row for."""
        if not files:
            return set()
        found = self.connection.execute(f"SELECT DISTINCT path FROM {self.source(files)}")
        return {path for (path,) in found.fetchall()}


FILE_DAY = re.compile(r"date=(\d{4}-\d{2}-\d{2})[/\\][^/\\]*$")


def _conditions(
    since: _dt.datetime | None, before: _dt.datetime | None, errors: bool, tags: dict[str, Any]
) -> tuple[str, list[Any]]:
    """The WHERE clause of a selection (empty: every row) and its parameters."""
    conditions: list[str] = []
    parameters: list[Any] = []
    if since is not None:
        conditions.append("created >= ?")
        parameters.append(since)
    if before is not None:
        conditions.append("created < ?")
        parameters.append(before)
    if errors:
        conditions.append("status IN ('raised', 'flagged', 'failed')")
    for key, value in tags.items():
        text = tag_text(value)
        conditions.append("list_has_any(map_extract(tags, ?), ?)")
        parameters += [str(key), [text, text.lower()]]
    return " AND ".join(conditions), parameters


def _row(
    run_id: str,
    created: int | None,
    status: str,
    reasons: list[str] | None,
    count: int | None,
    size: int,
    path: str,
    hosts: list[str] | None,
    models: list[str] | None,
    packed: bytes | None,
    duration: float | None,
    filename: str,
) -> IndexRow:
    """A row as ``COLUMNS`` selects it, back as the listing shows it."""
    return IndexRow(
        day=day.group(1) if (day := FILE_DAY.search(filename)) else "",
        run_id=run_id,
        created=None if created is None else EPOCH + _dt.timedelta(microseconds=created),
        status=status,
        reasons=list(reasons or ()),
        n=count,
        size=size,
        path=path,
        hosts=list(hosts or ()),
        models=list(models or ()),
        tags=unpack_tags(packed),
        duration=duration,
    )
