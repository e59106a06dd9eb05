"""Finding the runs a recorder kept: list them by tag, time and status; copy one out to replay.

The run index (``index``) answers a listing when the store has one and DuckDB is
installed. Otherwise the listing reads only the head of each cassette (the header comes before
the interactions), so it stays cheap on object storage; a dated folder older than ``since`` is
not read at all. Both give the same rows: each run's fields come from ``index.rows.describe``.
"""

from __future__ import annotations

import datetime as _dt
import os
import re
from collections.abc import Callable, Iterable, Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import msgpack

from .._core.errors import AgentTapeError, CassetteFormatError, CassetteNotFoundError
from .._core.files import write_atomic
from .._core.text import aware, counted
from .._core.wire import codec
from . import deletions, erasure
from .durations import parse_since, utc_day
from .index import batch, compaction, fetch, listing, pending, reader
from .index.rows import EXTRA, INDEX, IndexFile, IndexRow, describe, unreadable
from .run import COLD, RUN_ID
from .store import SUFFIX, Store, StoredFile, open_store

# Bytes read first to find a header; a bigger header is read whole.
HEAD_BYTES = 64 * 1024
DATED_FOLDER = re.compile(r"\d{4}-\d{2}-\d{2}")


@dataclass(slots=True, frozen=True)
class RunInfo:
    """One kept run as the listing shows it; ``status`` is ``unreadable`` for a damaged file."""

    run_id: str
    name: str
    size: int
    created_at: _dt.datetime | None
    tags: dict[str, Any] = field(default_factory=dict)
    status: str = "ok"
    reasons: list[str] = field(default_factory=list)
    interactions: int | None = None
    duration: float | None = None
    # The models it called (known from the index; a listing from headers leaves it empty).
    models: list[str] = field(default_factory=list, compare=False)

    @property
    def is_error(self) -> bool:
        """Raised, flagged or saw a failed exchange."""
        return self.status in ("raised", "flagged", "failed")

    @property
    def is_cold(self) -> bool:
        """A cold case: marked as one that cannot be replayed."""
        return any(reason.startswith(COLD) for reason in self.reasons)

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-ready values (times as ISO 8601 text; tags as recorded)."""
        return {
            "run_id": self.run_id,
            "name": self.name,
            "size": self.size,
            "created_at": None if self.created_at is None else self.created_at.isoformat(),
            "tags": {key: plain(value) for key, value in self.tags.items()},
            "status": self.status,
            "reasons": list(self.reasons),
            "interactions": self.interactions,
            "duration": self.duration,
        }


def plain(value: Any) -> Any:
    """A tag value as JSON and a command line show it."""
    if isinstance(value, (_dt.datetime, _dt.date)):
        return value.isoformat()
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    if isinstance(value, dict):
        return {str(k): plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    return value


def _tag_matches(value: Any, wanted: Any) -> bool:
    """Equal, or equal as command-line text (``beta=true`` finds the flag ``True``)."""
    if value == wanted and type(value) is type(wanted):
        return True
    if not isinstance(wanted, str):
        return False
    if isinstance(value, bool):
        return wanted.lower() == str(value).lower()
    return str(value) == wanted


def _peek_header(data: bytes) -> dict[str, Any] | None:
    """The header from the first bytes of a cassette written in the usual key order; None
    when these bytes do not tell (the caller then decodes the whole file)."""
    unpacker = msgpack.Unpacker(raw=False, strict_map_key=True, timestamp=3)
    unpacker.feed(data)
    try:
        found: dict[str, Any] = {}
        for _ in range(unpacker.read_map_header()):
            key = unpacker.unpack()
            if key not in (codec.MAGIC_KEY, "header"):
                return None
            found[key] = unpacker.unpack()
            if len(found) == 2:
                break
    except Exception:
        return None
    version = found.get(codec.MAGIC_KEY)
    header = found.get("header")
    if (
        not isinstance(version, int)
        or isinstance(version, bool)
        or not 1 <= version <= codec.FORMAT_VERSION
        or not isinstance(header, dict)
    ):
        return None
    return header


def read_header(store: Store, stored: StoredFile, head: bytes | None = None) -> dict[str, Any]:
    """A run's cassette header (from ``head``, its first bytes, when already read);
    CassetteFormatError when the file is not a readable cassette."""
    data = store.read_prefix(stored.name, HEAD_BYTES) if head is None else head
    header = _peek_header(data)
    if header is None:
        if len(data) < stored.size:
            data = store.read(stored.name)
        header, _interactions = codec.decode(data, f"{store.url}/{stored.name}")
    return header


def info_of(store: Store, stored: StoredFile, head: bytes | Exception | None = None) -> RunInfo:
    try:
        if isinstance(head, Exception):
            raise head
        header = read_header(store, stored, head)
    except (CassetteFormatError, OSError) as exc:
        return _run_info(unreadable(stored, str(exc)))
    return _run_info(describe(header, stored.name, stored.size))


# Heads read in one go: an object store answers them in parallel.
HEADS_AT_ONCE = 256


def _infos(
    store: Store, files: Iterable[StoredFile], missing_ok: bool = False
) -> Iterator[RunInfo]:
    """Each file's RunInfo, the heads read a few hundred at a time (a file that is not there
    left out with ``missing_ok``)."""
    pending = list(files)
    for start in range(0, len(pending), HEADS_AT_ONCE):
        chunk = pending[start : start + HEADS_AT_ONCE]
        heads = store.read_many([stored.name for stored in chunk], HEAD_BYTES)
        for stored, head in zip(chunk, heads, strict=True):
            if missing_ok and isinstance(head, FileNotFoundError):
                continue
            yield info_of(store, stored, head)


def _run_info(row: IndexRow) -> RunInfo:
    return RunInfo(
        run_id=row.run_id,
        name=row.path,
        size=row.size,
        created_at=row.created,
        tags=row.tags,
        status=row.status,
        reasons=row.reasons,
        interactions=row.n,
        duration=row.duration,
        models=row.models,
    )


def _before(stored: StoredFile, since: _dt.datetime) -> bool:
    """True when the run sits in a dated folder from before ``since``'s day (UTC)."""
    folder, slash, _file = stored.name.partition("/")
    if not slash or not DATED_FOLDER.fullmatch(folder):
        return False
    return folder < utc_day(since)


@dataclass(slots=True, frozen=True)
class RunFilter:
    """What ``runs`` asked for; the one test every listed run passes, however it was read."""

    tags: dict[str, Any]
    since: _dt.datetime | None
    errors: bool
    before: _dt.datetime | None = None

    def __call__(self, info: RunInfo) -> bool:
        if info.status == "unreadable":
            # A damaged file is listed when nothing was filtered, so it gets noticed.
            return not (self.tags or self.since is not None or self.errors or self.before)
        if self.since is not None and (info.created_at is None or info.created_at < self.since):
            return False
        if self.before is not None and (info.created_at is None or info.created_at >= self.before):
            return False
        if self.errors and not info.is_error:
            return False
        return all(
            key in info.tags and _tag_matches(info.tags[key], value)
            for key, value in self.tags.items()
        )


def list_runs(
    store: str | os.PathLike[str],
    *,
    tags: Mapping[str, Any] | None = None,
    since: _dt.datetime | str | None = None,
    errors: bool = False,
    before: _dt.datetime | str | None = None,
    storage_options: dict[str, Any] | None = None,
    warn: Callable[[str], None] | None = None,
) -> list[RunInfo]:
    """Runs in ``store``, newest first: with every tag in ``tags``, created at or after
    ``since`` and before ``before``, and (``errors=True``) only those that raised, were
    flagged or saw a failure. Runs a deletion removed (or is removing) are never listed.

    With a run index and DuckDB installed the index answers, plus the run files it does not
    hold yet; otherwise, or when the index cannot be read (said once through ``warn``), the
    headers of the run files do. A damaged file is listed as ``unreadable`` when no filter is
    given, so it gets noticed.
    """
    opened = open_store(store, storage_options)
    return select_runs(
        opened, RunFilter(dict(tags or {}), _moment(since), errors, _moment(before)), warn
    )


def _moment(text: _dt.datetime | str | None) -> _dt.datetime | None:
    return parse_since(text) if isinstance(text, str) else None if text is None else aware(text)


def select_runs(
    opened: Store, wanted: RunFilter, warn: Callable[[str], None] | None = None
) -> list[RunInfo]:
    """``list_runs`` on an open store. The deleted runs (``deletions``) are looked up while
    the runs are: on object storage listing them is a request or three."""
    with ThreadPoolExecutor(1) as pool:
        erasing = pool.submit(deletions.erased, opened)
        runs = _listed_runs(opened, wanted, warn)
        erased = erasing.result()
    runs = [info for info in runs if not erased.hides(info.name)]
    oldest = _dt.datetime.min.replace(tzinfo=_dt.UTC)
    runs.sort(key=lambda info: (info.created_at or oldest, info.run_id), reverse=True)
    return runs


def _listed_runs(
    opened: Store, wanted: RunFilter, warn: Callable[[str], None] | None
) -> list[RunInfo]:
    """The runs ``wanted`` asks for, from the index or else the headers (deleted runs too)."""
    moment = wanted.since
    runs: list[RunInfo] | None = None
    if reader.can_read():
        try:
            runs = list_indexed_runs(opened, wanted)
        except IndexUnreadableError as exc:
            if warn is not None:
                warn(
                    f"the run index of {opened.url} cannot be read ({exc}); listed the runs "
                    f"from their files instead, which is slower; repair it with: "
                    f"agenttape index rebuild {opened.url}"
                )
    elif warn is not None and INDEX in opened.listing()[0]:
        warn(
            f"{opened.url} has a run index, but listing from it needs DuckDB: "
            f"{EXTRA}; listed the runs from their files instead"
        )
    if runs is None:
        files = [
            stored for stored in opened.files() if moment is None or not _before(stored, moment)
        ]
        runs = [info for info in _infos(opened, files) if wanted(info)]
    return runs


class IndexUnreadableError(Exception):
    """The index is there but cannot be read: a damaged or half-copied file, a failed read."""


# Runs whose rows may still be in a writer's batch are looked for in their files: those of
# the newest indexed day and later, and of the day an hour ago (a batch holds at most 60 s of
# runs; the hour covers runs that started before midnight and ended after it).
UNINDEXED_WINDOW = _dt.timedelta(hours=1)


def list_indexed_runs(
    store: Store, wanted: RunFilter, now: _dt.datetime | None = None
) -> list[RunInfo] | None:
    """The runs the index lists, plus those it does not hold yet, read from their files: on a
    local folder every run file in a dated folder from the newest indexed day on (or from the
    day an hour ago, if earlier); on object storage those the writers named as in flight;
    and every one in a dated folder the index has no day for, or at the top level. None when
    the store has no index.

    An index file deleted while it is read (a compaction or rebuild finished meanwhile) makes
    it start again, with the files there are then.
    """
    for attempt in range(INDEX_ATTEMPTS):
        # On object storage each listing is a request: the three go out together, and the
        # index's readers are imported meanwhile.
        with ThreadPoolExecutor(3) as pool:
            top = pool.submit(store.listing)
            named = None if store.lists_cheaply else pool.submit(_named_in_flight, store)
            if not store.lists_cheaply and attempt == 0:
                pool.submit(fetch.load_readers)
            files = listing.index_files(store)
            if not files:
                return None
            listed = top.result(), None if named is None else named.result()
        try:
            return _indexed_runs(store, files, wanted, now, *listed)
        except Exception as exc:
            if not _unreadable_index(exc):
                raise
            if attempt + 1 < INDEX_ATTEMPTS and listing.index_files(store) != files:
                continue
            raise IndexUnreadableError(_one_line(exc)) from exc
    raise AssertionError("unreachable")


INDEX_ATTEMPTS = 3


def _indexed_runs(
    store: Store,
    files: list[IndexFile],
    wanted: RunFilter,
    now: _dt.datetime | None,
    store_listing: tuple[list[str], list[StoredFile]],
    named_in_flight: list[StoredFile] | None,
) -> list[RunInfo]:
    folders, top = store_listing
    window, unindexed_days, queried, tail = _days_to_read(files, wanted, now, folders)

    def in_flight() -> tuple[list[StoredFile], list[RunInfo]]:
        """Run files to read (folders listed), and the runs the writers named as in flight,
        read now: most have no row in the index yet, and their reads wait on the object store
        while the index is fetched."""
        if named_in_flight is None:  # a local folder, or a damaged list
            return _listed(store, window), []
        return _listed(store, unindexed_days), list(_infos(store, named_in_flight, missing_ok=True))

    # Runs in flight are looked for while the index is fetched and queried: on object storage
    # both wait on requests.
    with ThreadPoolExecutor(1) as pool:
        looked_up = pool.submit(in_flight)
        needed = list({found.name: found for found in queried + tail}.values())
        asked = fetch.Wanted(wanted.since, wanted.before, wanted.errors, wanted.tags)
        with (
            fetch.local_copy(store, needed, asked, tail) as (copy, paths),
            reader.IndexReader(copy, needed) as index,
        ):
            rows = index.select(
                queried,
                since=wanted.since,
                before=wanted.before,
                errors=wanted.errors,
                tags=wanted.tags,
            )
            known = index.paths(tail) if paths is None else set().union(*paths.values())
        listed, named = looked_up.result()
        # Runs at the top level are few and always read from their files.
        loose = [stored for stored in top + listed if stored.name.endswith(SUFFIX)]
    runs = {row.path: _run_info(row) for row in rows if "/" in row.path}

    def unindexed(name: str) -> bool:
        return "/" not in name or (name not in known and name not in runs)

    for info in _infos(store, [stored for stored in loose if unindexed(stored.name)]):
        runs[info.name] = info
    # A run named in flight may not be written yet, or may have failed to be: not a run.
    for info in named:
        if unindexed(info.name) and info.name not in runs:
            runs[info.name] = info
    return [info for info in runs.values() if wanted(info)]


def _days_to_read(
    files: list[IndexFile], wanted: RunFilter, now: _dt.datetime | None, folders: list[str]
) -> tuple[set[str], set[str], list[IndexFile], list[IndexFile]]:
    """Which dated folders to list (those a writer's batch may still hold, and those the
    index has no day for), which of them the index has no day for; the index files to query,
    and those whose run paths tell which runs the index holds yet."""
    days = {found.day for found in files}
    since_day = None if wanted.since is None else utc_day(wanted.since)
    now = now or _dt.datetime.now(_dt.UTC)
    start = min(max(days), utc_day(now - UNINDEXED_WINDOW))
    dated = {
        day
        for day in folders
        if DATED_FOLDER.fullmatch(day) and (since_day is None or day >= since_day)
    }
    window = {day for day in dated if day >= start or day not in days}
    unindexed_days = {day for day in dated if day not in days}
    queried = [found for found in files if since_day is None or found.day >= since_day]
    tail = [found for found in files if found.day >= start]
    return window, unindexed_days, queried, tail


def _listed(store: Store, days: set[str]) -> list[StoredFile]:
    return [stored for day in sorted(days) for stored in store.listing(day)[1]]


def _named_in_flight(store: Store) -> list[StoredFile] | None:
    """The runs writers named as in flight (``pending.PENDING``); None when a list of them
    cannot be read."""
    lists = pending.pending_files(store)
    named: dict[str, StoredFile] = {}
    for data in store.read_many([stored.name for stored in lists]):
        if isinstance(data, FileNotFoundError):
            continue  # its batch was written meanwhile
        if isinstance(data, Exception):
            return None
        try:
            named.update((run.name, run) for run in pending.decode_pending(data))
        except ValueError:
            return None
    return list(named.values())


def _unreadable_index(exc: Exception) -> bool:
    """A failure of the index's files or of reading them, as opposed to a fault of ours."""
    import duckdb

    return isinstance(exc, (duckdb.Error, OSError, ValueError))


def _one_line(exc: Exception) -> str:
    text = " ".join(str(exc).split())
    return text if len(text) <= 300 else text[:297] + "..."


def compact_index(
    store: str | os.PathLike[str], *, storage_options: dict[str, Any] | None = None
) -> compaction.Compacted:
    """Merge each day's index files into one (see ``compaction.compact``)."""
    if not (batch.can_write() and reader.can_read()):
        raise AgentTapeError(f"compacting the run index needs pyarrow and DuckDB: {EXTRA}")
    opened = open_store(store, storage_options)
    erasure.complete(opened)
    done = compaction.compact(opened, deletions.erased(opened))
    erasure.retire(opened)
    return done


def fetch_run(
    store: str | os.PathLike[str],
    run_id: str,
    out: str | os.PathLike[str],
    *,
    force: bool = False,
    storage_options: dict[str, Any] | None = None,
) -> Path:
    """Copy run ``run_id`` (or the one run whose id starts so) out of ``store`` to ``out``
    (atomically), checked to be a whole cassette first: a damaged run raises
    CassetteFormatError and writes nothing. An existing ``out`` is kept unless ``force``."""
    if not RUN_ID.fullmatch(run_id):
        raise ValueError(f"{run_id!r} is not a run id (letters, digits, '.', '_' and '-')")
    target = Path(out)
    if target.exists() and not force:
        raise AgentTapeError(f"{target} exists; pass --force to overwrite it")
    opened = open_store(store, storage_options)
    name = opened.find(run_id) or _by_prefix(opened, run_id)
    if name is None:
        raise CassetteNotFoundError(
            f"run {run_id} is not in store {opened.url}; list the runs with: agenttape runs {opened.url}"
        )
    try:
        data = opened.read(name)
    except OSError as exc:
        raise AgentTapeError(f"cannot read run {run_id} from {opened.url}/{name}: {exc}") from exc
    codec.decode(data, f"{opened.url}/{name}")
    write_atomic(target, data)
    return target


def _by_prefix(store: Store, prefix: str) -> str | None:
    """The one run file whose id starts with ``prefix`` (as ``show`` and listings shorten
    ids); None when none does; an error naming them when several do."""
    erased = deletions.erased(store)
    found = sorted(
        stored.name
        for stored in store.files()
        if stored.name.rsplit("/", 1)[-1].startswith(prefix) and not erased.hides(stored.name)
    )
    if len(found) > 1:
        shown = ", ".join(name.rsplit("/", 1)[-1][: -len(SUFFIX)] for name in found[:5])
        raise AgentTapeError(
            f"{counted(len(found), 'run')} in {store.url} start with {prefix} ({shown}"
            f"{', …' if len(found) > 5 else ''}); give more of the run id"
        )
    return found[0] if found else None
