"""On object storage a listing fetches the index's footers and the row groups that may hold
its runs, not whole files; what it lists is what the whole files give."""

from __future__ import annotations

import datetime as _dt
import os
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import msgpack
import pytest

from agenttape._production.index import listing as index_listing
from agenttape._production.index import rows as row_format
from agenttape._production.index import tag_filters
from agenttape._production.index.rows import IndexRow
from agenttape._production.store import FsspecStore, LocalStore, open_store
from agenttape._production.stored_runs import RunFilter, RunInfo, select_runs

pytest.importorskip("duckdb")
pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")
pytest.importorskip("fsspec")

NOW = _dt.datetime.now(_dt.UTC).replace(microsecond=0)
DAYS = 4
ROWS_PER_DAY = 5 * row_format.ROW_GROUP


class CountingStore(FsspecStore):
    """A memory:// (or S3) store that counts the index bytes it was asked for, file by file,
    and keeps the ranges asked for."""

    def __init__(self, url: str, storage_options: dict[str, Any] | None = None) -> None:
        super().__init__(url, storage_options)
        self.fetched: Counter[str] = Counter()
        self.ranges: list[tuple[str, int, int]] = []

    def read_ranges(self, ranges: Sequence[tuple[str, int, int]]) -> list[bytes | Exception]:
        self.ranges += ranges
        found = super().read_ranges(ranges)
        for (name, _start, _end), data in zip(ranges, found, strict=True):
            if isinstance(data, bytes):
                self.fetched[name] += len(data)
        return found

    def read_many(self, names: Sequence[str], size: int | None = None) -> list[bytes | Exception]:
        found = super().read_many(names, size)
        for name, data in zip(names, found, strict=True):
            if isinstance(data, bytes) and name.startswith(row_format.INDEX):
                self.fetched[name] += len(data)
        return found


@pytest.fixture
def stores(
    tmp_path: Path, request: pytest.FixtureRequest
) -> Iterator[tuple[LocalStore, CountingStore]]:
    """The same index in a folder and in memory://: four days of 20,480 runs each (five row
    groups), a user's runs in two row groups a day, and the first day written without tag
    filters (as by an older writer)."""
    from fsspec.implementations.memory import MemoryFileSystem

    local = open_store(tmp_path / "store")
    assert isinstance(local, LocalStore)
    url = f"memory://ranges-{request.node.name}"
    remote = CountingStore(url)
    for day in range(DAYS):
        start = NOW - _dt.timedelta(days=DAYS - 1 - day, hours=1)
        name_day = f"{start:%Y-%m-%d}"
        rows = [
            IndexRow(
                day=name_day,
                run_id=f"r{day}_{number:05d}",
                created=start + _dt.timedelta(seconds=number / 10),
                status="failed" if number % 7 == 0 else "ok",
                reasons=[],
                n=3,
                size=100,
                path=f"{name_day}/r{day}_{number:05d}.msgpack",
                hosts=["api.openai.com"],
                models=["gpt-4o-mini"],
                # The user looked for: 3 runs in row group 1, 2 in row group 4.
                tags={
                    "user_id": "u_wanted"
                    if number in (5000, 5001, 6000, 17000, 17001)
                    else f"u_{number % 5000}",
                    "beta": number % 2 == 0,
                },
                duration=1.0,
            )
            for number in range(ROWS_PER_DAY)
        ]
        data = row_format.encode(rows)
        if day == 0:  # as a writer before tag filters wrote it
            table = pq.read_table(pa.BufferReader(data))
            sink = pa.BufferOutputStream()
            pq.write_table(table, sink, row_group_size=row_format.ROW_GROUP)
            data = sink.getvalue().to_pybytes()
            assert tag_filters.read(pq.read_metadata(pa.BufferReader(data))) is None
        name = row_format.file_name(name_day, row_format.stamp(rows[-1].created))
        local.write(name, data)
        remote.write(name, data)
    yield local, remote
    MemoryFileSystem().rm(url, recursive=True)


def shown(runs: list[RunInfo]) -> list[tuple[str, str, str]]:
    return [(info.run_id, info.name, info.status) for info in runs]


def test_a_listing_by_tag_fetches_the_footers_and_the_row_groups_holding_the_tag(
    stores: tuple[LocalStore, CountingStore],
) -> None:
    local, remote = stores
    files = sorted(index_listing.index_files(remote), key=lambda found: found.day)
    wanted = RunFilter({"user_id": "u_wanted"}, NOW - _dt.timedelta(days=DAYS + 1), False)
    expected = select_runs(local, wanted)
    assert len(expected) == 5 * DAYS
    assert shown(select_runs(remote, WANTED)) == shown(expected)
    # The first day has no tag filters: every row group is fetched. The newest day's run
    # paths are needed (which runs the index holds yet): its path column is fetched too. Of
    # the days between, the footer and two row groups of five.
    first, *between, _newest = files
    assert remote.fetched[first.name] >= first.size - len(b"PAR1")
    for found in between:
        assert remote.fetched[found.name] < found.size * 0.5, (remote.fetched, found)
    # The first day alone (no filters in its footer), and the same with --errors and a
    # time range that starts inside row group 1.
    for wanted in (
        RunFilter({"user_id": "u_wanted"}, None, True),
        RunFilter({"user_id": "U_WANTED"}, None, False),
        RunFilter({"beta": "TRUE"}, NOW - _dt.timedelta(hours=2), True),
        RunFilter({}, NOW - _dt.timedelta(days=1, hours=1, minutes=-10), False),
    ):
        assert shown(select_runs(remote, wanted)) == shown(select_runs(local, wanted))


def test_a_listing_by_tag_not_in_the_index_fetches_only_footers_and_unfiltered_files(
    stores: tuple[LocalStore, CountingStore],
) -> None:
    local, remote = stores
    files = sorted(index_listing.index_files(remote), key=lambda found: found.day)
    wanted = RunFilter({"user_id": "u_nobody"}, None, False)
    assert select_runs(remote, wanted) == [] == select_runs(local, wanted)
    _first, *between, _newest = files
    for found in between:
        footer = pq.read_metadata(pa.BufferReader(remote.read(found.name))).serialized_size
        # The footer, read with the last bytes before it: 64 kB at least.
        assert remote.fetched[found.name] <= max(footer + 8, 64 * 1024), (remote.fetched, found)


def footers_fetched(store: CountingStore, files: list[row_format.IndexFile]) -> set[str]:
    """The files whose last bytes (their footer) were fetched."""
    sizes = {found.name: found.size for found in files}
    return {name for name, _start, end in store.ranges if end == sizes.get(name)}


def on_s3(local: LocalStore, s3: dict[str, Any], prefix: str) -> CountingStore:
    """The local store's index, copied to the S3-compatible server."""
    remote = CountingStore(f"s3://agent-runs/{prefix}", s3)
    for stored in local.walk(row_format.INDEX):
        remote.write(stored.name, local.read(stored.name))
    return remote


def without_tags(data: bytes) -> bytes:
    """The same index file, its tag filters saying that no row group holds any tag: as long
    as the file, but another version of it."""
    table = pq.read_table(pa.BufferReader(data))
    body = msgpack.unpackb(
        pq.read_metadata(pa.BufferReader(data)).metadata[b"agenttape.tag_filter"]
    )
    body["groups"] = [bytes(len(group)) for group in body["groups"]]
    sink = pa.BufferOutputStream()
    with pq.ParquetWriter(sink, table.schema, compression="zstd") as writer:
        writer.write_table(table, row_group_size=row_format.ROW_GROUP)
        writer.add_key_value_metadata({tag_filters.KEY: msgpack.packb(body)})
    changed: bytes = sink.getvalue().to_pybytes()
    return changed


WANTED = RunFilter({"user_id": "u_wanted"}, None, False)


CachedOnS3 = Callable[[str], tuple[LocalStore, CountingStore, list[Any]]]


@pytest.fixture
def cached_on_s3(
    stores: tuple[LocalStore, CountingStore],
    s3: dict[str, Any],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> CachedOnS3:
    """For a bucket: the store copied to the S3-compatible server there, its footer cache in
    ``tmp_path``, and the rows a local listing of ``WANTED`` shows."""
    monkeypatch.setenv("AGENTTAPE_CACHE_DIR", str(tmp_path / "cache"))
    local = stores[0]

    def copy(bucket: str) -> tuple[LocalStore, CountingStore, list[Any]]:
        return local, on_s3(local, s3, bucket), shown(select_runs(local, WANTED))

    return copy


def test_on_s3_a_listing_again_takes_past_days_footers_from_the_cache(
    cached_on_s3: CachedOnS3, tmp_path: Path
) -> None:
    local, remote, expected = cached_on_s3("cached")
    files = sorted(index_listing.index_files(remote), key=lambda found: found.day)
    today = f"{_dt.datetime.now(_dt.UTC):%Y-%m-%d}"
    past = {found.name for found in files if found.day < today}
    assert len(past) >= DAYS - 1 and all(found.version for found in files)
    assert len(expected) == 5 * DAYS
    # The ranges are fetched at once on the S3-compatible server: the same rows.
    assert shown(select_runs(remote, WANTED)) == expected
    assert footers_fetched(remote, files) == {found.name for found in files}
    assert len(list((tmp_path / "cache" / "index-footers").iterdir())) == len(past)
    remote.ranges.clear()
    assert shown(select_runs(remote, WANTED)) == expected
    assert footers_fetched(remote, files) == {found.name for found in files} - past
    # A past day's file replaced by another version as long as it (its tag filters say it
    # holds no tag): its footer is fetched again, and the listing goes by the new one.
    changed = files[1]
    data = without_tags(local.read(changed.name))
    assert len(data) == changed.size
    remote.write(changed.name, data)
    remote.ranges.clear()
    found = select_runs(remote, WANTED)
    assert changed.name in footers_fetched(remote, files)
    assert shown(found) == [row for row in expected if not row[1].startswith(changed.day)]


def test_footers_are_neither_cached_nor_read_in_a_folder_others_can_write(
    cached_on_s3: CachedOnS3, tmp_path: Path
) -> None:
    _local, remote, expected = cached_on_s3("shared")
    files = index_listing.index_files(remote)
    assert shown(select_runs(remote, WANTED)) == expected
    folder = tmp_path / "cache" / "index-footers"
    kept = sorted(entry.name for entry in folder.iterdir())
    assert kept
    # The same entries, in a folder anyone may write: not read, and no new one written.
    os.chmod(folder, 0o777)
    for entry in folder.iterdir():
        if entry.name != kept[0]:
            entry.unlink()
    remote.ranges.clear()
    assert shown(select_runs(remote, WANTED)) == expected
    assert footers_fetched(remote, files) == {found.name for found in files}
    assert sorted(entry.name for entry in folder.iterdir()) == kept[:1]
