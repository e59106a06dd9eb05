"""The run index: one Parquet row per kept run, Hive-partitioned by day, beside the run files.

Listing runs from their headers costs one read per run: minutes for the millions of runs a
fleet keeps. The index holds what the listing shows (and the hosts and models each run
called) in columns any Parquet engine reads: ``<store>/_index/date=YYYY-MM-DD/*.parquet``.

Files are only ever added whole and then, by compaction or a rebuild, deleted once their rows
are in a newer file; so a reader may see a run's row twice, never half a file, and keeps the
row of the newest file (file names start with the time they were written; a merged file's,
with its newest part's).
pyarrow (writing) and DuckDB (reading) are imported only when used.
"""

from __future__ import annotations

import datetime as _dt
import functools
import os
import re
import secrets
import tempfile
import time
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import msgpack

from .._core.models import Interaction
from .._core.text import aware, counted
from .._core.urls import parse_url
from . import claims, manifests, tag_filters
from .deletions import Erased
from .store import SUFFIX, LocalStore, Store, StoredFile

if TYPE_CHECKING:
    import duckdb
    import pyarrow
    import pyarrow.parquet

INDEX = "_index"
# A batch is written once it is this old or this big, and at every flush and close.
BATCH_SECONDS = 60.0
BATCH_ROWS = 10_000
# Rows a writer keeps for another try while the index cannot be written; older ones are
# dropped (the runs stay listed from their files; ``agenttape index rebuild`` indexes them).
MAX_WAITING_ROWS = 100_000
# Nor does it keep a row longer than this: a batch landing later could hold a row of a run
# deleted meanwhile whose tombstone is retired (``deletions.RETIRE_AFTER``, longer).
MAX_ROW_WAIT = 86_400.0
DAY = re.compile(r"\d{4}-\d{2}-\d{2}")
INDEX_FILE = re.compile(r"_index/date=(\d{4}-\d{2}-\d{2})/([^/.][^/]*)\.parquet")
EXTRA = "pip install 'agenttape-recorder[index]'"


@dataclass(slots=True, frozen=True)
class IndexRow:
    """One run as the index holds it; the listing shows exactly these fields, whether it read
    them from the index or from the run's header."""

    day: str
    run_id: str
    created: _dt.datetime | None
    status: str
    reasons: list[str]
    n: int | None
    size: int
    path: str
    hosts: list[str]
    models: list[str]
    tags: dict[str, Any]
    duration: float | None


# -- runs in flight ------------------------------------------------------------------------
#
# On an object store, finding the runs a writer's batch still holds by listing the newest
# day's folder costs a request per thousand runs of the day. Instead, before it writes run
# files, a writer names them in a small file under ``_pending/`` (beside the index, not in
# it: a store that refuses the index still takes it), and deletes those files once the batch
# holding their rows is written. A reader lists ``_pending/`` and reads the runs named there
# that the index does not hold yet. A writer that died leaves its files; ``agenttape index
# rebuild`` removes those whose runs it indexed.

PENDING = "_pending"
PENDING_SUFFIX = ".names"


def pending_name(writer: str) -> str:
    """A new file naming runs in flight: the time first (they sort by it), the writer's
    random id so that writers never replace each other's."""
    return f"{PENDING}/{stamp()}-{writer}{PENDING_SUFFIX}"


def encode_pending(files: Sequence[StoredFile]) -> bytes:
    return msgpack.packb([[stored.name, stored.size] for stored in files])


def decode_pending(data: bytes) -> list[StoredFile]:
    """The runs a pending file names; ValueError when it is not one."""
    try:
        entries = msgpack.unpackb(data)
        return [StoredFile(str(name), int(size)) for name, size in entries]
    except Exception as exc:
        raise ValueError(f"not a list of runs in flight: {exc}") from None


def pending_files(store: Store) -> list[StoredFile]:
    return [stored for stored in store.listing(PENDING)[1] if stored.name.endswith(PENDING_SUFFIX)]


@dataclass(slots=True, frozen=True)
class IndexFile:
    """One Parquet file of the index: its name in the store, the day it holds, its size
    (0: not known) and version (``StoredFile.version``)."""

    name: str
    day: str
    size: int = field(default=0, compare=False)
    version: str = field(default="", compare=False)
    # When the store wrote it (its listing's time; 0: not known).
    modified: float = field(default=0.0, compare=False)


def tag_text(value: Any) -> str:
    """A tag as the ``tags`` column holds it: the text ``--tag K=V`` matches it with."""
    if isinstance(value, bool):
        return "true" if value else "false"
    return value if isinstance(value, str) else str(value)


def describe(
    header: dict[str, Any],
    name: str,
    size: int,
    interactions: Sequence[Interaction] = (),
) -> IndexRow:
    """A run's row from its cassette header (and its exchanges for hosts and models). Its day
    is its folder's, so the index and the folders agree on which runs ``--since`` skips."""
    raw_summary = header.get("run")
    summary: dict[str, Any] = raw_summary if isinstance(raw_summary, dict) else {}
    created = header.get("created_at")
    created = aware(created) if isinstance(created, _dt.datetime) else None
    tags = header.get("tags")
    reasons = summary.get("reasons")
    count = summary.get("interactions")
    duration = summary.get("duration")
    hosts: set[str] = set()
    models: set[str] = set()
    for interaction in interactions:
        if interaction.boundary != "http":
            continue
        host = parse_url(interaction.request.url).host
        if host:
            hosts.add(host)
        call = interaction.llm
        if call is not None and call.model:
            models.add(call.model)
    return IndexRow(
        day=day_of(name, created),
        run_id=str(header.get("run_id") or name.rsplit("/", 1)[-1][: -len(SUFFIX)]),
        created=created,
        status=str(summary.get("status", "ok")),
        reasons=[r for r in reasons if isinstance(r, str)] if isinstance(reasons, list) else [],
        n=count if isinstance(count, int) and not isinstance(count, bool) else None,
        size=size,
        path=name,
        hosts=sorted(hosts),
        models=sorted(models),
        tags=tags if isinstance(tags, dict) else {},
        duration=float(duration)
        if isinstance(duration, (int, float)) and not isinstance(duration, bool)
        else None,
    )


def unreadable(stored: StoredFile, reason: str) -> IndexRow:
    """The row of a file that is not a readable cassette, as the listing shows it."""
    return IndexRow(
        day=day_of(stored.name, None),
        run_id=stored.name.rsplit("/", 1)[-1][: -len(SUFFIX)],
        created=None,
        status="unreadable",
        reasons=[reason],
        n=None,
        size=stored.size,
        path=stored.name,
        hosts=[],
        models=[],
        tags={},
        duration=None,
    )


def day_of(name: str, created: _dt.datetime | None) -> str:
    """The dated folder a run is in; a run at the top level goes by its creation day (UTC);
    empty when neither tells."""
    folder, slash, _file = name.partition("/")
    if slash and DAY.fullmatch(folder):
        return folder
    if created is None:
        return ""
    return created.astimezone(_dt.UTC).strftime("%Y-%m-%d")


# -- writing ------------------------------------------------------------------------------------


def can_write() -> bool:
    """pyarrow is installed (found, not imported: that waits for the first batch)."""
    import importlib.util

    try:
        return importlib.util.find_spec("pyarrow") is not None
    except ValueError:  # set to None in sys.modules: as if not installed
        return False


@functools.cache
def schema() -> pyarrow.Schema:
    import pyarrow as pa

    text_list = pa.list_(pa.string())
    return pa.schema(
        [
            ("run_id", pa.string()),
            ("created", pa.timestamp("us", tz="UTC")),
            ("status", pa.string()),
            ("reasons", text_list),
            ("n", pa.int64()),
            ("bytes", pa.int64()),
            ("path", pa.string()),
            ("hosts", text_list),
            ("models", text_list),
            ("tags", pa.map_(pa.string(), pa.string())),
            ("duration", pa.float64()),
            # The tags exactly as recorded (msgpack), for a listing that shows their types.
            ("tags_msgpack", pa.binary()),
        ]
    )


def pack_tags(tags: dict[str, Any]) -> bytes:
    return msgpack.packb(tags, use_bin_type=True, datetime=True)


def unpack_tags(data: bytes | None) -> dict[str, Any]:
    if not data:
        return {}
    tags = msgpack.unpackb(data, raw=False, strict_map_key=True, timestamp=3)
    return tags if isinstance(tags, dict) else {}


def encode(rows: Sequence[IndexRow]) -> bytes:
    """One Parquet file of ``rows`` (zstd; the merged file of a day is sorted by time)."""
    import pyarrow as pa

    columns = {
        "run_id": [row.run_id for row in rows],
        "created": [row.created for row in rows],
        "status": [row.status for row in rows],
        "reasons": [row.reasons for row in rows],
        "n": [row.n for row in rows],
        "bytes": [row.size for row in rows],
        "path": [row.path for row in rows],
        "hosts": [row.hosts for row in rows],
        "models": [row.models for row in rows],
        "tags": [[(str(k), tag_text(v)) for k, v in row.tags.items()] for row in rows],
        "duration": [row.duration for row in rows],
        "tags_msgpack": [pack_tags(row.tags) for row in rows],
    }
    return _parquet(pa.table(columns, schema=schema()))


def _parquet(table: pyarrow.Table) -> bytes:
    import pyarrow as pa
    import pyarrow.parquet as pq

    sink = pa.BufferOutputStream()
    with pq.ParquetWriter(sink, table.schema, compression="zstd") as writer:
        writer.write_table(table, row_group_size=ROW_GROUP)
        writer.add_key_value_metadata({tag_filters.KEY: tag_filters.of(table, ROW_GROUP)})
    data: bytes = sink.getvalue().to_pybytes()
    return data


# -- tag filters ------------------------------------------------------------------------------
def stamp(moment: _dt.datetime | None = None) -> str:
    """File names sort by this: UTC, to the microsecond."""
    moment = moment or _dt.datetime.now(_dt.UTC)
    return moment.astimezone(_dt.UTC).strftime("%Y%m%dT%H%M%S.%fZ")


def file_name(day: str, when: str) -> str:
    """A new index file's name; the random part keeps two writers (processes, hosts) that
    write the same day at the same moment from replacing each other's file."""
    return f"{INDEX}/date={day}/{when}-{secrets.token_hex(8)}.parquet"


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


# -- reading ------------------------------------------------------------------------------------


def index_files(store: Store) -> list[IndexFile]:
    """The index's Parquet files a reader reads (temporary and hidden files left out): where
    a day has manifests, those its believed manifest makes up the day with (``manifests``)."""
    days = _believe(store, _days(store.walk(INDEX)))
    return [found for day in days.values() for found in day.live()]


@dataclass(slots=True)
class _Day:
    """A day's index files and manifests as listed, and its believed manifest."""

    files: list[IndexFile] = field(default_factory=list)
    manifest_names: list[str] = field(default_factory=list)
    believed: manifests.Manifest | None = None
    # When the store wrote each manifest (its listing's time).
    manifest_times: dict[str, float] = field(default_factory=dict)

    def live(self) -> list[IndexFile]:
        names = set(manifests.live([found.name for found in self.files], self.believed))
        return [found for found in self.files if found.name in names]


def _days(listed: Iterable[StoredFile]) -> dict[str, _Day]:
    by_day: dict[str, _Day] = defaultdict(_Day)
    for stored in listed:
        match = INDEX_FILE.fullmatch(stored.name)
        if match:
            by_day[match.group(1)].files.append(
                IndexFile(
                    stored.name,
                    match.group(1),
                    stored.size,
                    version=stored.version,
                    modified=stored.modified,
                )
            )
            continue
        match = manifests.MANIFEST_FILE.fullmatch(stored.name)
        if match:
            by_day[match.group(1)].manifest_names.append(stored.name)
            by_day[match.group(1)].manifest_times[stored.name] = stored.modified
    return dict(by_day)


def _believe(store: Store, by_day: dict[str, _Day]) -> dict[str, _Day]:
    with_manifests = {
        day: found.manifest_names for day, found in by_day.items() if found.manifest_names
    }
    for day, manifest in manifests.believed_many(store, with_manifests).items():
        by_day[day].believed = manifest
    return by_day


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
# Rows per row group: a listing by tag reads whole only the row groups holding its runs.
ROW_GROUP = 4096


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
        if conditions:
            found = self._matching(files, " AND ".join(conditions), parameters)
        else:
            found = self.connection.execute(
                f"{COLUMNS} FROM {self.source(files)} {NEWEST}", parameters
            ).fetchall()
        return [
            IndexRow(
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
            for (
                run_id,
                created,
                status,
                reasons,
                count,
                size,
                path,
                hosts,
                models,
                packed,
                duration,
                filename,
            ) in found
        ]

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
    by_manifests = not store.conditional_creates
    days = files = rows = dropped = collected = 0
    skipped: list[tuple[str, str]] = []
    busy: list[str] = []
    late: list[str] = []
    for day, listed in sorted(_believe(store, _days(store.walk(INDEX))).items()):
        present = listed.live()
        wanted = day in forced or not (only or (len(present) < 2 and not erased.day_gone(day)))
        if by_manifests:
            done: tuple[int, int, int] | str | Late = (
                _fold_day(store, day, erased) if wanted else (0, 0, 0)
            )
            collected += _collect(store, _listed_day(store, day) if wanted else listed)
            if not wanted:
                continue
            if isinstance(done, Late):
                late.append(day)
                continue
        elif not wanted:
            continue
        else:
            with claims.held(store, day) as claim:
                if claim is None:
                    busy.append(day)
                    continue
                done = _rewrite_day(store, day, erased, claim)
        if isinstance(done, str):
            skipped.append((day, done))
            continue
        days += 1
        files += done[0]
        rows += done[1]
        dropped += done[2]
    return Compacted(
        days=days,
        files=files,
        rows=rows,
        skipped=skipped,
        dropped=dropped,
        busy=busy,
        by_manifests=by_manifests,
        collected=collected,
        late=late,
    )


def day_files(store: Store, day: str) -> list[IndexFile]:
    """The day's files a reader reads, listed now."""
    return _listed_day(store, day).live()


def _listed_day(store: Store, day: str) -> _Day:
    listed = (
        store.listing(f"{INDEX}/date={day}")[1]
        + store.listing(f"{manifests.MANIFESTS}/date={day}")[1]
    )
    return _believe(store, _days(listed)).get(day, _Day())


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
        store.write(output, _parquet(table))
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
    listed: _Day,
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
    listed = _listed_day(store, day)
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
            store.write(output, _parquet(table))
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
    listed = _listed_day(store, day)
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
            store.write(files[0], _parquet(table))
    late = _publish(store, day, listed, [found.name for found in live], files, started)
    if late is not None:
        if output is not None:
            store.delete(output)  # its rows are in the files it was to replace
        return late
    return len(replaced & {found.name for found in listed.files})


NO_MANIFEST = manifests.Manifest(name="", day="", version=-1, files=(), folded=frozenset(), at=0.0)


def _collect(store: Store, listed: _Day) -> int:
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
