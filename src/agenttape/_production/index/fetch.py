"""Fetching from object storage only the parts of the run index a listing needs.

Fetching a week of index files whole costs tens of megabytes at fleet scale; a listing by
tag needs a few row groups of each. So, in three rounds of parallel range reads:

1. each file's footer (its last bytes): the row groups, their statistics and byte ranges,
   and the tag filters (``tag_filters.of``);
2. the row groups that may hold matching runs, whole: those whose ``created`` range meets the
   time asked for, whose ``status`` range may hold an error (``--errors``), and whose tag
   filters may hold every tag asked for; and, of the files whose run paths the listing needs
   (the newest day's: which runs the index holds yet), the ``path`` column of every row group;
3. nothing else. A footer longer than the first read takes one more.

The footers of past days' files (compacted, kept for months, never changed: a new version of
a day is a new file) are kept in this user's cache folder (``user_cache``), keyed by the
file's URL, size and version (ETag): a listing run again fetches only row groups.

The row groups fetched are written as small local Parquet files under the same names, which
the usual reader (``reader.IndexReader``) then queries: it applies the exact filters.
Every row of a run that can match is in them: its other rows (a newer one, after a mark)
have its tags and time, so their row groups pass too; with ``--errors`` the status is not
used to leave a row group out.
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import hashlib
import importlib
import os
import struct
import tempfile
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..._core import user_cache
from ..store import LocalStore, Store
from . import tag_filters
from .rows import IndexFile, tag_text

if TYPE_CHECKING:
    import pyarrow
    import pyarrow.parquet

# The first read of each file, at most: its footer in one request, usually (with the tag
# filters, about 200 kB for a day of 100,000 runs).
TAIL_BYTES = 256 * 1024
# Ranges closer than this are fetched as one.
GAP_BYTES = 64 * 1024
ERRORS = ("raised", "flagged", "failed")
FOOTERS = "index-footers"
# Cached footers not used for this long are removed when new ones are written.
FOOTER_DAYS = 30


@dataclass(slots=True, frozen=True)
class Wanted:
    """What a listing asks the index for."""

    since: _dt.datetime | None
    before: _dt.datetime | None
    errors: bool
    tags: dict[str, Any]

    def __bool__(self) -> bool:
        return bool(self.since or self.before or self.errors or self.tags)


@dataclass(slots=True)
class Partial:
    """One index file as far as it was fetched: its bytes at the ranges read (zeros
    elsewhere) and its footer."""

    file: IndexFile
    size: int
    data: bytearray
    metadata: pyarrow.parquet.FileMetaData | None = None
    # Bytes from here to the end were fetched with the footer.
    fetched_from: int = 0
    # The footer came from the cache.
    cached: bool = False

    def missing(self, start: int, end: int) -> tuple[int, int]:
        """The part of a range not fetched yet."""
        return start, min(end, self.fetched_from)


def load_readers() -> None:
    """Import what reading a remote store's index needs (pyarrow's Parquet reader, DuckDB):
    called in a thread while the store is listed, the imports take the time spent waiting for
    the listings rather than adding to it. A module that cannot be imported is left for the
    reader to report."""
    for module in ("pyarrow.parquet", "duckdb"):
        with contextlib.suppress(ImportError):
            importlib.import_module(module)


@contextmanager
def local_copy(
    store: Store, files: Sequence[IndexFile], wanted: Wanted, paths_of: Sequence[IndexFile]
) -> Iterator[tuple[Store, dict[str, set[str]] | None]]:
    """A store to read ``files`` from: ``store`` itself when it is a local folder; otherwise a
    temporary folder holding, under the same names, what of each file ``wanted`` needs (whole
    files when it asks for nothing). Beside it, for a remote store, the run paths each file
    of ``paths_of`` holds a row for."""
    if isinstance(store, LocalStore):
        yield store, None
        return
    with tempfile.TemporaryDirectory(prefix="agenttape-index-") as folder:
        copy = LocalStore(folder)
        if not wanted or any(not found.size for found in files):
            names = [found.name for found in files]
            for name, data in zip(names, store.read_many(names), strict=True):
                if isinstance(data, Exception):
                    raise data
                copy.write(name, data)
            yield copy, None
            return
        known = _fetch(store, copy, files, wanted, {found.name for found in paths_of})
        yield copy, known


class FooterCache:
    """The footers of past days' index files, in this user's cache folder: one file each,
    named by a hash of the index file's URL, size and version. Never used for a file whose
    listing gave no version, nor in a folder others can write (``user_cache``)."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self.directory = user_cache.folder(FOOTERS)
        self.usable = user_cache.trusted(self.directory)
        self.today = _dt.datetime.now(_dt.UTC).strftime("%Y-%m-%d")

    def _path(self, found: IndexFile) -> Path | None:
        if not found.version or found.day >= self.today:
            return None  # today's files are merged away within the day: not worth keeping
        key = f"{self.store.location(found.name)}\0{found.size}\0{found.version}"
        return self.directory / (hashlib.blake2b(key.encode(), digest_size=20).hexdigest())

    def get(self, found: IndexFile) -> bytes | None:
        """The file's footer (with its length and ``PAR1``), or None."""
        path = self._path(found)
        if path is None or not self.usable:
            return None
        with contextlib.suppress(OSError, ValueError):
            footer = user_cache.read_private(path)
            with contextlib.suppress(OSError):
                os.utime(path)  # used: not removed as unused
            if _footer_length(footer) == len(footer) <= found.size:
                return footer
        return None

    def put(self, entries: Sequence[tuple[IndexFile, bytes]]) -> None:
        """Keep these footers; remove those unused for ``FOOTER_DAYS``."""
        written = False
        for found, footer in entries:
            path = self._path(found)
            if path is not None:
                with contextlib.suppress(OSError):
                    if user_cache.write_private(path, footer, self.usable):
                        self.usable = written = True
        if not written:
            return
        cutoff = time.time() - FOOTER_DAYS * 86_400
        with contextlib.suppress(OSError), os.scandir(self.directory) as entries_found:
            for entry in entries_found:
                with contextlib.suppress(OSError):
                    if entry.stat(follow_symlinks=False).st_mtime < cutoff:
                        os.unlink(entry.path)


def _footer_length(data: bytes) -> int:
    """The length of the Parquet footer ``data`` ends with, its last 8 bytes included."""
    if len(data) < 8 or data[-4:] != b"PAR1":
        raise ValueError("not a Parquet file")
    return int(struct.unpack("<I", data[-8:-4])[0]) + 8


def _fetch(
    store: Store, copy: LocalStore, files: Sequence[IndexFile], wanted: Wanted, paths_of: set[str]
) -> dict[str, set[str]]:
    """The three rounds: footers, then the row groups they point to, then the small local
    files written; the run paths each file of ``paths_of`` holds."""
    cache = FooterCache(store)
    partials = _footers(store, cache, files)
    chosen, fresh = _row_groups(store, partials, wanted, paths_of)
    cache.put(fresh)
    return _write_copies(copy, partials, chosen, paths_of)


def _footers(store: Store, cache: FooterCache, files: Sequence[IndexFile]) -> list[Partial]:
    """Each file's tail, from the cache or fetched (in parallel), read on until its footer
    is whole."""
    partials = []
    for found in files:
        partial = Partial(
            found,
            found.size,
            bytearray(found.size),
            fetched_from=max(0, found.size - _tail(found.size)),
        )
        kept = cache.get(found)
        if kept is not None:
            partial.data[found.size - len(kept) :] = kept
            partial.fetched_from = found.size - len(kept)
            partial.cached = True
        partials.append(partial)
    _read(store, [(p, p.fetched_from, p.size) for p in partials if not p.cached])
    longer = []
    for partial in partials:
        try:
            footer = _footer_length(bytes(partial.data[-8:]))
        except ValueError:
            raise ValueError(f"{store.url}/{partial.file.name} is not a Parquet file") from None
        if footer > partial.size - partial.fetched_from:
            longer.append((partial, partial.size - footer, partial.fetched_from))
            partial.fetched_from = partial.size - footer
    _read(store, longer)
    return partials


def _row_groups(
    store: Store, partials: Sequence[Partial], wanted: Wanted, paths_of: set[str]
) -> tuple[dict[str, list[int]], list[tuple[IndexFile, bytes]]]:
    """Fetch the row groups ``wanted`` may match (and the ``path`` column of every row group
    of the files in ``paths_of``); the row groups chosen of each file, and the footers
    fetched rather than found in the cache."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    ranges = []
    chosen: dict[str, list[int]] = {}
    fresh = []
    for partial in partials:
        partial.metadata = pq.read_metadata(pa.BufferReader(pa.py_buffer(partial.data)))
        if not partial.cached:
            footer = _footer_length(bytes(partial.data[-8:]))
            fresh.append((partial.file, bytes(partial.data[partial.size - footer :])))
        chosen[partial.file.name] = groups = _groups(partial.metadata, wanted)
        spans = [_group_span(partial.metadata, group) for group in groups]
        if partial.file.name in paths_of:
            path = partial.metadata.schema.names.index("path")
            spans += [
                _column_span(partial.metadata.row_group(group).column(path))
                for group in range(partial.metadata.num_row_groups)
                if group not in groups
            ]
        ranges += [(partial, *partial.missing(start, end)) for start, end in _merged(spans)]
    _read(store, ranges)
    return chosen, fresh


def _write_copies(
    copy: LocalStore, partials: Sequence[Partial], chosen: dict[str, list[int]], paths_of: set[str]
) -> dict[str, set[str]]:
    """Write each file's chosen row groups to ``copy`` under its name; the run paths of the
    files in ``paths_of``."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    known: dict[str, set[str]] = {}
    for partial in partials:
        parquet = pq.ParquetFile(
            pa.BufferReader(pa.py_buffer(partial.data)), metadata=partial.metadata
        )
        table = parquet.read_row_groups(chosen[partial.file.name])
        sink = pa.BufferOutputStream()
        # Read once, at once: not worth compressing.
        pq.write_table(table, sink, compression="none", use_dictionary=False)
        copy.write(partial.file.name, sink.getvalue().to_pybytes())
        if partial.file.name in paths_of:
            everything = range(parquet.metadata.num_row_groups)
            paths = parquet.read_row_groups(everything, columns=["path"]).column("path")
            known[partial.file.name] = set(paths.to_pylist())
    return known


def _tail(size: int) -> int:
    """Bytes read first from a file of ``size``: an eighth of it, 64 kB to ``TAIL_BYTES``."""
    return min(TAIL_BYTES, max(64 * 1024, size // 8))


def _read(store: Store, ranges: Sequence[tuple[Partial, int, int]]) -> None:
    """Fetch ``ranges`` (in parallel) into their files' buffers."""
    wanted = [(partial, start, end) for partial, start, end in ranges if end > start]
    found = store.read_ranges([(p.file.name, start, end) for p, start, end in wanted])
    for (partial, start, end), data in zip(wanted, found, strict=True):
        if isinstance(data, Exception):
            raise data
        if len(data) != end - start:
            raise ValueError(f"{store.url}/{partial.file.name} changed while it was read")
        partial.data[start:end] = data


def _groups(metadata: pyarrow.parquet.FileMetaData, wanted: Wanted) -> list[int]:
    """The row groups that may hold a run ``wanted`` asks for."""
    names = metadata.schema.names
    created = names.index("created") if "created" in names else None
    status = names.index("status") if "status" in names else None
    filters = tag_filters.read(metadata)
    items = [
        {tag_filters.item(str(key), text), tag_filters.item(str(key), text.lower())}
        for key, value in wanted.tags.items()
        for text in [tag_text(value)]
    ]
    found = []
    for group in range(metadata.num_row_groups):
        row_group = metadata.row_group(group)
        if created is not None:
            low, high = _range(row_group.column(created))
            if wanted.since is not None and high is not None and high < wanted.since:
                continue
            if wanted.before is not None and low is not None and low >= wanted.before:
                continue
        if wanted.errors and status is not None:
            low, high = _range(row_group.column(status))
            if low is not None and high is not None and low == high and low not in ERRORS:
                continue
        if filters is not None and not all(
            any(tag_filters.may_hold(filters[group], item) for item in either) for either in items
        ):
            continue
        found.append(group)
    return found


def _range(column: pyarrow.parquet.ColumnChunkMetaData) -> tuple[Any, Any]:
    """A column chunk's least and greatest value, or Nones when it does not say."""
    stats = column.statistics
    if stats is None or not stats.has_min_max:
        return None, None
    return stats.min, stats.max


def _column_span(column: pyarrow.parquet.ColumnChunkMetaData) -> tuple[int, int]:
    start = column.data_page_offset
    if column.has_dictionary_page and column.dictionary_page_offset:
        start = min(start, column.dictionary_page_offset)
    return start, start + column.total_compressed_size


def _group_span(metadata: pyarrow.parquet.FileMetaData, group: int) -> tuple[int, int]:
    row_group = metadata.row_group(group)
    spans = [_column_span(row_group.column(i)) for i in range(row_group.num_columns)]
    return min(start for start, _end in spans), max(end for _start, end in spans)


def _merged(spans: list[tuple[int, int]]) -> list[tuple[int, int]]:
    merged: list[tuple[int, int]] = []
    for start, end in sorted(spans):
        if merged and start - merged[-1][1] <= GAP_BYTES:
            merged[-1] = (merged[-1][0], max(end, merged[-1][1]))
        else:
            merged.append((start, end))
    return merged
