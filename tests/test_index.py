"""The run index: Parquet rows by day beside the runs, read by ``agenttape runs`` and by any
engine, written in batches by the recorder, rebuilt and compacted by ``agenttape index``."""

from __future__ import annotations

import datetime as _dt
import errno
import io
import itertools
import json
import logging
import shutil
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

import agenttape
from agenttape._core.wire import codec
from agenttape._production.index import batch as index_batch
from agenttape._production.index import listing as index_listing
from agenttape._production.index import pending as index_pending
from agenttape._production.index import reader as index_reader
from agenttape._production.index import rows as row_format
from agenttape._production.index.rebuild import rebuild_index
from agenttape._production.store import StoredFile, open_store
from agenttape._production.stored_runs import (
    RunFilter,
    compact_index,
    list_indexed_runs,
    list_runs,
)
from agenttape._tools.cli import main
from tests.cli_support import assert_one_line_error, cli, write_run
from tests.servers import Server, echo_path

duckdb = pytest.importorskip("duckdb")
pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")

NOW = _dt.datetime.now(_dt.UTC).replace(microsecond=0)
ROOT = Path(__file__).resolve().parent.parent


def index_parquet(store: Path) -> list[Path]:
    return sorted((store / "_index").glob("date=*/*.parquet"))


def run_cli(*args: str | Path) -> tuple[int, str]:
    out = io.StringIO()
    code = main([str(arg) for arg in args], out)
    return code, out.getvalue()


# -- what the recorder writes -------------------------------------------------------------------


def test_a_recorder_writes_one_row_per_kept_run_that_any_engine_reads(
    serve: Callable[..., Server], recorders: Callable[..., agenttape.Recorder], tmp_path: Path
) -> None:
    server = serve(echo_path)
    store = tmp_path / "runs"
    recorder = recorders(store, keep="errors")
    with httpx.Client() as client:
        with recorder.run(user_id="u_7710", beta=True, attempt=2, note=None) as kept:
            client.post(f"{server.url}/v1/chat/completions", json={"model": "gpt-4o-mini"})
            client.get(f"{server.url}/tools/status/500")
        with recorder.run(user_id="u_1"):  # healthy: not kept, so not indexed
            client.get(f"{server.url}/fine")
    assert recorder.flush(timeout=10)
    [parquet] = index_parquet(store)
    assert parquet.parent.name == f"date={kept.started:%Y-%m-%d}"
    file = store / kept.path

    # DuckDB, over the Hive-partitioned layout, as a company would point it at the store.
    [row] = duckdb.sql(
        "SELECT run_id, created, status, reasons, n, bytes, path, hosts, models, "
        "tags['user_id'], tags['beta'], tags['attempt'], tags['note'], \"date\" "
        f"FROM read_parquet('{store}/_index/*/*.parquet', hive_partitioning = true)"
    ).fetchall()
    assert row[0] == kept.run_id and row[1] == kept.started
    assert row[2:4] == ("failed", [f"HTTP 500 from GET {server.url}/tools/status/500"])
    assert row[4:7] == (2, file.stat().st_size, kept.path.as_posix())
    assert row[7:9] == (["127.0.0.1"], ["gpt-4o-mini"])
    assert row[9:13] == ("u_7710", "true", "2", "None")  # the text --tag K=V matches
    assert str(row[13]) == f"{kept.started:%Y-%m-%d}"

    # pyarrow reads the same files with the same partitioning.
    table = pq.read_table(store / "_index", partitioning="hive")
    assert table.num_rows == 1
    assert table.schema.field("created").type == pa.timestamp("us", tz="UTC")
    assert table.schema.field("tags").type == pa.map_(pa.string(), pa.string())
    assert dict(table.column("tags").to_pylist()[0])["user_id"] == "u_7710"
    assert str(table.column("date")[0]) == f"{kept.started:%Y-%m-%d}"


def test_the_batch_waits_for_flush_close_its_age_or_its_size(
    serve: Callable[..., Server],
    recorders: Callable[..., agenttape.Recorder],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    server = serve(echo_path)
    store = tmp_path / "runs"
    recorder = recorders(store, keep="all")
    with recorder.run() as first:
        httpx.get(server.url + "/a")
    # Written, not yet indexed: the run file is there, and runs lists it from that file.
    assert _wait_for(lambda: (store / first.path).is_file())
    assert index_parquet(store) == []
    assert [info.run_id for info in list_runs(store)] == [first.run_id]
    assert recorder.flush(timeout=10) and len(index_parquet(store)) == 1

    monkeypatch.setattr(index_batch, "BATCH_ROWS", 3)
    for _ in range(3):
        with recorder.run():
            httpx.get(server.url + "/b")
    assert _wait_for(lambda: len(index_parquet(store)) == 2)  # three rows: a batch, unasked

    monkeypatch.setattr(index_batch, "BATCH_SECONDS", 0.2)
    with recorder.run():
        httpx.get(server.url + "/c")
    assert _wait_for(lambda: len(index_parquet(store)) == 3)  # old enough: written, unasked

    with recorder.run() as last:
        httpx.get(server.url + "/d")
    recorder.close(timeout=10)
    rows = duckdb.sql(f"SELECT run_id FROM read_parquet('{store}/_index/*/*.parquet')").fetchall()
    assert len(rows) == 6 and (last.run_id,) in rows


def _wait_for(condition: Callable[[], bool], timeout: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return True


def test_import_agenttape_and_a_recorder_import_neither_duckdb_nor_pyarrow(tmp_path: Path) -> None:
    code = textwrap.dedent(
        f"""
        import sys, agenttape
        recorder = agenttape.Recorder({str(tmp_path / "runs")!r}, keep="all")
        with recorder.run():
            pass
        print(sorted(n for n in ("duckdb", "pyarrow") if n in sys.modules))
        """
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]"


# -- the same rows from the index and from the headers -------------------------------------------


@pytest.fixture
def varied(tmp_path: Path) -> Path:
    """Runs over several days, tags of every kind, a damaged file, a run at the top level; all
    indexed, and one more run written after the index."""
    store = tmp_path / "runs"
    write_run(store, "r_old", NOW - _dt.timedelta(days=3), {"user_id": "u_1", "beta": True})
    write_run(
        store, "r_hour", NOW - _dt.timedelta(hours=1), {"user_id": "u_7710", "n": 3}, "raised"
    )
    write_run(store, "r_now", NOW, {"user_id": "u_7710", "beta": False}, "flagged")
    write_run(store, "r_text", NOW - _dt.timedelta(hours=2), {"beta": "True", "n": "3"}, "failed")
    write_run(
        store,
        "r_kinds",
        NOW - _dt.timedelta(days=1),
        {
            "user_id": "u_7710",
            "none": None,
            "ratio": 0.5,
            "items": [1, "two"],
            "nested": {"a": 1},
            "raw": b"\x00bytes",
            "when": _dt.datetime(2026, 11, 20, 15, tzinfo=_dt.UTC),
        },
    )
    write_run(store, "r_flat", NOW - _dt.timedelta(minutes=5), {"user_id": "u_2"}, dated=False)
    damaged = store / f"{NOW - _dt.timedelta(days=2):%Y-%m-%d}" / "r_damaged.msgpack"
    damaged.parent.mkdir(parents=True, exist_ok=True)
    damaged.write_bytes(b"\x83not a cassette")
    rebuilt = rebuild_index(store)
    assert rebuilt.runs == 7 and rebuilt.unreadable == 1
    write_run(store, "r_late", NOW - _dt.timedelta(minutes=1), {"user_id": "u_7710"})
    return store


FILTERS: list[list[str]] = [
    [],
    ["--tag", "user_id=u_7710"],
    ["--tag", "beta=true"],
    ["--tag", "beta=TRUE"],
    ["--tag", "beta=True"],
    ["--tag", "n=3"],
    ["--tag", "none=None"],
    ["--tag", "ratio=0.5"],
    ["--tag", "items=[1, 'two']"],
    ["--tag", "when=2026-11-20 15:00:00+00:00"],
    ["--tag", "user_id=u_7710", "--tag", "n=3"],
    ["--tag", "missing=x"],
]
SINCE: list[list[str]] = [[], ["--since", "90m"], ["--since", "2d"], ["--since", f"{NOW:%Y-%m-%d}"]]


def test_index_and_headers_give_the_same_output_for_every_filter_combination(
    varied: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    combinations = list(itertools.product(FILTERS, SINCE, [[], ["--errors"]], [[], ["--json"]]))
    from_index = {}
    for combination in combinations:
        args = [flag for part in combination for flag in part]
        from_index[tuple(args)] = run_cli("runs", varied, *args)
    monkeypatch.setattr(index_reader, "can_read", lambda: False)
    listed = 0
    for args, (code, output) in from_index.items():
        assert code == 0
        assert run_cli("runs", varied, *args) == (code, output), args
        listed += output.count("r_")
    assert listed > 100  # the combinations list runs, not only "no runs"


def test_the_index_is_what_answers_and_it_lists_what_the_headers_list(varied: Path) -> None:
    everything = RunFilter({}, None, False)
    from_index = list_indexed_runs(open_store(varied), everything)
    assert from_index is not None
    scanned = {info.name: info for info in list_runs(varied)}
    assert {info.name: info for info in from_index} == scanned
    by_id = {info.run_id: info for info in from_index}
    assert by_id["r_kinds"].tags["when"] == _dt.datetime(2026, 11, 20, 15, tzinfo=_dt.UTC)
    assert by_id["r_kinds"].tags["raw"] == b"\x00bytes"
    assert by_id["r_damaged"].status == "unreadable"


def test_the_cli_lists_from_the_index_without_a_warning(varied: Path) -> None:
    with_index = cli("runs", varied, "--tag", "user_id=u_7710", "--json")
    assert with_index.returncode == 0 and with_index.stderr == ""
    assert [run["run_id"] for run in json.loads(with_index.stdout)] == [
        "r_now",
        "r_late",
        "r_hour",
        "r_kinds",
    ]


# -- runs the index does not hold ---------------------------------------------------------------


def test_runs_not_indexed_yet_are_listed_from_their_files(tmp_path: Path) -> None:
    store = tmp_path / "runs"
    old_day = NOW - _dt.timedelta(days=5)
    write_run(store, "r_indexed", NOW - _dt.timedelta(days=1), {"user_id": "u_1"})
    write_run(store, "r_old", old_day, {"user_id": "u_1"})
    rebuild_index(store)
    # After the index was written: a run in the newest indexed day's folder (its batch in
    # flight), one in a later folder, one in a folder the index has no day for, one at the top.
    write_run(store, "r_in_flight", NOW - _dt.timedelta(days=1), {"user_id": "u_1"})
    write_run(store, "r_today", NOW, {"user_id": "u_1"})
    write_run(store, "r_unindexed_day", NOW - _dt.timedelta(days=3), {"user_id": "u_1"})
    write_run(store, "r_top", NOW, {"user_id": "u_1"}, dated=False)
    # A run in an older day the index already covers, whose batch was lost: found after a
    # rebuild of that day.
    write_run(store, "r_lost_batch", old_day, {"user_id": "u_1"})
    found = {info.run_id for info in list_runs(store, tags={"user_id": "u_1"})}
    assert found == {"r_indexed", "r_old", "r_in_flight", "r_today", "r_unindexed_day", "r_top"}
    code, output = run_cli("index", "rebuild", store, "--since", f"{old_day:%Y-%m-%d}")
    assert code == 0 and "indexed 7 runs in 4 days" in output
    found = {info.run_id for info in list_runs(store, tags={"user_id": "u_1"})}
    assert "r_lost_batch" in found and len(found) == 7


def test_an_hour_after_midnight_the_day_before_is_read_too(tmp_path: Path) -> None:
    store = tmp_path / "runs"
    midnight = NOW.replace(hour=0, minute=0, second=0)
    write_run(store, "r_yesterday", midnight - _dt.timedelta(minutes=30), {})
    write_run(store, "r_today", midnight + _dt.timedelta(minutes=5), {})
    rebuild_index(store)
    # Yesterday's batch of one writer was still in flight when another wrote today's.
    write_run(store, "r_late_yesterday", midnight - _dt.timedelta(seconds=10), {})
    everything = RunFilter({}, None, False)
    soon = midnight + _dt.timedelta(minutes=20)
    found = list_indexed_runs(open_store(store), everything, now=soon)
    assert found is not None and "r_late_yesterday" in {info.run_id for info in found}
    later = midnight + _dt.timedelta(hours=3)
    found = list_indexed_runs(open_store(store), everything, now=later)
    assert found is not None and "r_late_yesterday" not in {info.run_id for info in found}


def wait_for(condition: Callable[[], bool]) -> None:
    deadline = time.monotonic() + 10
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.01)


@pytest.fixture
def object_store(request: pytest.FixtureRequest) -> Iterator[str]:
    """An fsspec store (memory://): listed as an object store is, a request per folder."""
    pytest.importorskip("fsspec")
    from fsspec.implementations.memory import MemoryFileSystem

    url = f"memory://fleet-{request.node.name}"
    yield url
    MemoryFileSystem().rm(url, recursive=True)


def test_on_an_object_store_runs_in_flight_are_found_from_the_writers_lists(
    object_store: str,
    serve: Callable[..., Server],
    recorders: Callable[..., agenttape.Recorder],
) -> None:
    server = serve(echo_path)
    store = open_store(object_store)
    recorder = recorders(object_store, keep="all")
    with recorder.run(user_id="u_1") as first:
        httpx.get(server.url + "/one")
    assert recorder.flush(timeout=10)  # its row is in the index
    with recorder.run(user_id="u_1") as second:
        httpx.get(server.url + "/two")
    wait_for(lambda: recorder.stats.written == 2)  # its file is written, its row waits
    [named] = index_pending.pending_files(store)
    [in_flight] = index_pending.decode_pending(store.read(named.name))
    assert in_flight.name.endswith(f"/{second.run_id}.msgpack") and in_flight.size > 0
    # A file no writer named, in a day the index holds, is not looked for: the listing reads
    # no day folder the index covers (a request per thousand runs on an object store).
    day = in_flight.name.partition("/")[0]
    store.write(f"{day}/stray.msgpack", store.read(in_flight.name))
    found = [info.run_id for info in list_runs(object_store, tags={"user_id": "u_1"})]
    assert sorted(found) == sorted([first.run_id, second.run_id])
    recorder.close()
    assert index_pending.pending_files(store) == []  # the batch is written: the list is gone
    found = [info.run_id for info in list_runs(object_store, tags={"user_id": "u_1"})]
    assert sorted(found) == sorted([first.run_id, second.run_id])


def put_run(store_url: str, run_id: str) -> str:
    """A run file written to the store as the recorder lays it out; its name."""
    store = open_store(store_url)
    local = Path(f"/tmp/agenttape-test-{time.monotonic_ns()}")
    try:
        path = write_run(local, run_id, NOW, {"user_id": "u_1"})
        name = path.relative_to(local).as_posix()
        store.write(name, path.read_bytes())
    finally:
        shutil.rmtree(local, ignore_errors=True)
    return name


def test_a_list_left_by_a_writer_that_died_is_read_and_removed_by_a_rebuild(
    object_store: str,
) -> None:
    store = open_store(object_store)
    put_run(object_store, "r_indexed")
    rebuild_index(object_store)
    name = put_run(object_store, "r_orphan")
    size = len(store.read(name))
    # The writer named it and a run it never wrote, then died before its batch.
    never = f"{NOW:%Y-%m-%d}/r_never.msgpack"
    store.write(
        index_pending.pending_name("deadbeef"),
        index_pending.encode_pending([StoredFile(name, size), StoredFile(never, 9)]),
    )
    assert {info.run_id for info in list_runs(object_store)} == {"r_indexed", "r_orphan"}
    done = rebuild_index(object_store)
    assert done.runs == 2 and index_pending.pending_files(store) == []
    assert {info.run_id for info in list_runs(object_store)} == {"r_indexed", "r_orphan"}


def test_a_damaged_list_of_runs_in_flight_falls_back_to_the_newest_folders(
    object_store: str,
) -> None:
    store = open_store(object_store)
    put_run(object_store, "r_indexed")
    rebuild_index(object_store)
    put_run(object_store, "r_unnamed")
    # Unnamed, in a day the index has: not looked for.
    assert [info.run_id for info in list_runs(object_store)] == ["r_indexed"]
    store.write(f"{index_pending.PENDING}/x{index_pending.PENDING_SUFFIX}", b"\xc1 not msgpack")
    assert {info.run_id for info in list_runs(object_store)} == {"r_indexed", "r_unnamed"}


# -- compaction and rebuilds --------------------------------------------------------------------


def row_of(store: Path, path: Path) -> row_format.IndexRow:
    header, interactions = codec.decode(path.read_bytes(), path.name)
    name = path.relative_to(store).as_posix()
    return row_format.describe(header, name, path.stat().st_size, interactions)


def test_compact_merges_each_days_files_and_a_reader_in_between_sees_each_run_once(
    tmp_path: Path,
) -> None:
    store = tmp_path / "runs"
    for number in range(6):
        path = write_run(store, f"r_{number}", NOW - _dt.timedelta(days=number % 2), {"n": number})
        # Small batches, as several writers leave them: here one file per run.
        index_batch.write_rows(open_store(store), [row_of(store, path)])
    before = list_runs(store)
    files_before = index_parquet(store)
    assert len(before) == 6 and len(files_before) == 6
    # A reader between a merged file's write and the deletes sees those rows twice.
    opened = open_store(store)
    index_batch.write_rows(opened, [row_of(store, p) for p in sorted(store.glob("*/r_*.msgpack"))])
    count = f"SELECT count(*) FROM read_parquet('{store}/_index/*/*.parquet')"
    assert duckdb.sql(count).fetchall() == [(12,)]
    assert list_runs(store) == before

    code, output = run_cli("index", "compact", store)
    assert (code, output) == (0, "merged 8 index files into one per day for 2 days (6 runs)\n")
    after = index_parquet(store)
    assert len(after) == 2 and not set(after) & set(files_before)
    assert list_runs(store) == before
    assert duckdb.sql(count).fetchall() == [(6,)]
    assert run_cli("index", "compact", store) == (
        0,
        "merged 0 index files into one per day for 0 days (0 runs)\n",
    )


def test_rebuild_replaces_the_days_files_and_keeps_older_days(tmp_path: Path) -> None:
    store = tmp_path / "runs"
    write_run(store, "r_old", NOW - _dt.timedelta(days=4), {})
    write_run(store, "r_new", NOW, {})
    assert rebuild_index(store).runs == 2
    old_files = index_parquet(store)
    done = rebuild_index(store, since="1d")
    assert done.runs == 1 and done.replaced == 1
    kept = [path for path in index_parquet(store) if path in old_files]
    assert len(kept) == 1 and f"{NOW - _dt.timedelta(days=4):%Y-%m-%d}" in str(kept[0])
    # A day whose run folder is gone loses its rows.
    shutil.rmtree(store / f"{NOW:%Y-%m-%d}")
    assert rebuild_index(store).runs == 1
    assert [info.run_id for info in list_runs(store)] == ["r_old"]


# -- bad input ----------------------------------------------------------------------------------


def test_a_store_whose_index_cannot_be_written_keeps_and_lists_every_run(
    serve: Callable[..., Server],
    recorders: Callable[..., agenttape.Recorder],
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    server = serve(echo_path)
    store = tmp_path / "runs"
    store.mkdir()
    (store / "_index").write_text("a file where the index's folder would be")
    caplog.set_level(logging.WARNING, logger="agenttape.recorder")
    recorder = recorders(store, keep="all")
    runs = []
    for _ in range(3):
        with recorder.run(user_id="u_1") as run:
            httpx.get(server.url + "/fine")
        runs.append(run.run_id)
        assert recorder.flush(timeout=10)
    stats = recorder.stats
    assert stats.written == 3 and stats.lost == 0
    messages = [record.getMessage() for record in caplog.records]
    assert len(messages) == 1 and "could not be added to the run index" in messages[0]
    assert "listed from their files meanwhile" in messages[0]
    code, output = run_cli("runs", store, "--tag", "user_id=u_1")
    assert code == 0 and all(run_id in output for run_id in runs)


# Whether the quotatest filesystem refuses writes under _index/, and how often it was asked.
QUOTA = {"full": False, "refused": 0}


@pytest.fixture
def quota_store() -> Iterator[str]:
    fsspec = pytest.importorskip("fsspec")
    from fsspec.implementations.memory import MemoryFileSystem

    class OverQuota(MemoryFileSystem):
        protocol = "quotatest"
        store: dict[str, Any] = {}  # noqa: RUF012
        pseudo_dirs = [""]  # noqa: RUF012

        def pipe_file(self, path: str, value: bytes, *args: Any, **kwargs: Any) -> None:
            if QUOTA["full"] and "/_index/" in path:
                QUOTA["refused"] += 1
                raise OSError(errno.EDQUOT, "Disk quota exceeded")
            super().pipe_file(path, value, *args, **kwargs)

    fsspec.register_implementation("quotatest", OverQuota, clobber=True)
    OverQuota.store.clear()
    QUOTA.update(full=False, refused=0)
    yield "quotatest://fleet"
    QUOTA["full"] = False
    OverQuota.store.clear()


def test_an_index_over_quota_hides_no_run_and_its_rows_are_written_once_it_has_room(
    serve: Callable[..., Server],
    recorders: Callable[..., agenttape.Recorder],
    quota_store: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    server = serve(echo_path)
    recorder = recorders(quota_store, keep="all")
    with recorder.run(user_id="u_1") as first:
        httpx.get(server.url + "/fine")
    assert recorder.flush(timeout=10)
    QUOTA["full"] = True
    caplog.set_level(logging.WARNING, logger="agenttape.recorder")
    late = []
    for _ in range(2):
        with recorder.run(user_id="u_1") as run:
            httpx.get(server.url + "/fine")
        late.append(run.run_id)
        assert recorder.flush(timeout=10)
    assert recorder.stats.lost == 0
    # Rows wait in memory for the next batch; the runs are listed from their files meanwhile.
    [message] = [record.getMessage() for record in caplog.records]
    assert "Disk quota exceeded" in message and "wait for the next batch" in message
    found = {info.run_id for info in list_runs(quota_store, tags={"user_id": "u_1"})}
    assert found == {first.run_id, *late}
    QUOTA["full"] = False
    assert recorder.flush(timeout=10)
    store = open_store(quota_store)
    with index_reader.IndexReader(store, index_listing.index_files(store)) as reader:
        indexed = reader.paths(index_listing.index_files(store))
    assert len(indexed) == 3


def test_a_big_batch_the_index_refuses_waits_before_it_is_tried_again(
    serve: Callable[..., Server],
    recorders: Callable[..., agenttape.Recorder],
    quota_store: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    server = serve(echo_path)
    monkeypatch.setattr(index_batch, "BATCH_ROWS", 2)
    QUOTA["full"] = True
    recorder = recorders(quota_store, keep="all")
    for _ in range(6):
        with recorder.run():
            httpx.get(server.url + "/fine")
    assert _wait_for(lambda: recorder.stats.written == 6)
    time.sleep(0.3)
    assert QUOTA["refused"] == 1  # not once per run while the batch stays big
    assert recorder.stats.lost == 0


def test_a_damaged_or_half_written_index_file_falls_back_to_headers_and_says_so_once(
    varied: Path,
) -> None:
    expected = cli("runs", varied, "--tag", "user_id=u_7710")
    assert expected.returncode == 0 and expected.stderr == ""
    [first, *_] = index_parquet(varied)
    half = first.with_name("20990101T000000.000000Z-half.parquet")
    half.write_bytes(first.read_bytes()[: first.stat().st_size // 2])
    garbage = first.parent.parent / "date=2000-01-01" / "x.parquet"
    garbage.parent.mkdir()
    garbage.write_bytes(b"PAR1 not really")
    listed = cli("runs", varied, "--tag", "user_id=u_7710")
    assert listed.returncode == 0 and listed.stdout == expected.stdout
    [warning] = listed.stderr.splitlines()
    assert warning.startswith("agenttape runs: warning: the run index of")
    assert "cannot be read" in warning and f"agenttape index rebuild {varied}" in warning
    assert run_cli("index", "rebuild", varied)[0] == 0
    assert cli("runs", varied, "--tag", "user_id=u_7710").stderr == ""


def test_an_index_file_removed_while_it_is_read_makes_the_listing_start_again(
    varied: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    before = list_runs(varied)
    real = index_listing.index_files
    calls = []

    def stale(store: Any) -> list[row_format.IndexFile]:
        calls.append(1)
        found = real(store)
        if len(calls) == 1:  # the listing of a moment ago: a file compaction then removed
            return [
                *found,
                row_format.IndexFile(f"_index/date={NOW:%Y-%m-%d}/gone.parquet", f"{NOW:%Y-%m-%d}"),
            ]
        return found

    monkeypatch.setattr(index_listing, "index_files", stale)
    warnings: list[str] = []
    assert list_runs(varied, warn=warnings.append) == before
    assert warnings == [] and len(calls) == 3


def test_two_recorder_processes_writing_the_same_day_keep_every_row(tmp_path: Path) -> None:
    store = tmp_path / "runs"
    code = textwrap.dedent(
        f"""
        import sys, agenttape
        recorder = agenttape.Recorder({str(store)!r}, keep="all")
        for number in range(20):
            with recorder.run(process=sys.argv[1], number=number):
                pass
            if number % 5 == 4:
                recorder.flush()
        recorder.close()
        """
    )
    processes = [
        subprocess.Popen([sys.executable, "-c", code, name], cwd=ROOT) for name in ("a", "b")
    ]
    assert [process.wait(60) for process in processes] == [0, 0]
    files = index_parquet(store)
    assert len(files) == 8 and len({path.name for path in files}) == 8
    rows = duckdb.sql(
        f"SELECT tags['process'] AS p, count(*) FROM read_parquet('{store}/_index/*/*.parquet') "
        "GROUP BY p ORDER BY p"
    ).fetchall()
    assert rows == [("a", 20), ("b", 20)]
    everything = RunFilter({}, None, False)
    from_index = list_indexed_runs(open_store(store), everything)
    assert from_index is not None and len(from_index) == 40


def test_a_recorder_without_pyarrow_says_once_that_it_cannot_add_to_an_existing_index(
    serve: Callable[..., Server],
    recorders: Callable[..., agenttape.Recorder],
    varied: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    server = serve(echo_path)
    monkeypatch.setattr(index_batch, "can_write", lambda: False)
    caplog.set_level(logging.WARNING, logger="agenttape.recorder")
    recorder = recorders(varied, keep="all")
    for _ in range(2):
        with recorder.run(user_id="u_new"):
            httpx.get(server.url + "/fine")
    assert recorder.flush(timeout=10)
    [message] = [record.getMessage() for record in caplog.records]
    assert "cannot add its runs" in message and "agenttape-recorder[index]" in message
    assert len(list_runs(varied, tags={"user_id": "u_new"})) == 2  # today's: read from files


def test_runs_without_duckdb_on_an_indexed_store_says_how_to_list_faster(
    varied: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    expected = run_cli("runs", varied)
    monkeypatch.setattr(index_reader, "can_read", lambda: False)
    assert run_cli("runs", varied) == expected
    [warning] = capsys.readouterr().err.splitlines()
    assert "has a run index" in warning and "agenttape-recorder[index]" in warning


def test_index_commands_need_the_extra_and_an_action(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert_one_line_error(
        cli("index"), "agenttape index: error: give an action: rebuild, compact or status"
    )
    assert_one_line_error(cli("index", "rebuild", tmp_path / "missing"), "does not exist")
    assert_one_line_error(
        cli("index", "rebuild", tmp_path, "--since", "soon"), "neither a duration"
    )
    monkeypatch.setattr(index_batch, "can_write", lambda: False)
    with pytest.raises(agenttape.AgentTapeError, match=r"agenttape-recorder\[index\]"):
        rebuild_index(tmp_path)
    with pytest.raises(agenttape.AgentTapeError, match=r"agenttape-recorder\[index\]"):
        compact_index(tmp_path)


def test_compact_leaves_a_day_it_cannot_read_and_says_how_to_repair_it(varied: Path) -> None:
    day = f"{NOW:%Y-%m-%d}"
    folder = varied / "_index" / f"date={day}"
    (folder / "20990101T000000.000000Z-damaged.parquet").write_bytes(b"PAR1 damaged")
    done = cli("index", "compact", varied)
    assert_one_line_error(
        done, "1 day not compacted", f"agenttape index rebuild {varied} --since {day}"
    )
    assert len(list(folder.glob("*.parquet"))) == 2


# -- an S3-compatible server --------------------------------------------------------------------


def test_the_index_on_a_real_s3_compatible_server(
    s3: dict[str, Any],
    serve: Callable[..., Server],
) -> None:
    server = serve(echo_path)
    url = "s3://agent-runs/indexed"  # moto's buckets outlive its server: a prefix of our own
    with agenttape.Recorder(url, keep="errors", storage_options=s3) as recorder:
        for user_id in ("u_1", "u_7710", "u_7710"):
            with recorder.run(user_id=user_id):
                httpx.get(f"{server.url}/status/500/{user_id}")
    assert recorder.stats.written == 3
    store = open_store(url, s3)
    [parquet] = index_listing.index_files(store)
    with index_reader.IndexReader(store, [parquet]) as reader:
        sql = f"SELECT count(*) FROM {reader.source([parquet])} WHERE tags['user_id'] = 'u_7710'"
        assert reader.connection.sql(sql).fetchall() == [(2,)]
    everything = RunFilter({"user_id": "u_7710"}, None, False)
    from_index = list_indexed_runs(store, everything)
    assert from_index is not None and len(from_index) == 2
    assert sorted(from_index, key=lambda info: info.name) == sorted(
        list_runs(url, tags={"user_id": "u_7710"}, storage_options=s3), key=lambda info: info.name
    )
    environment = {
        "AWS_ACCESS_KEY_ID": s3["key"],
        "AWS_SECRET_ACCESS_KEY": s3["secret"],
        "AWS_ENDPOINT_URL": s3["client_kwargs"]["endpoint_url"],
        "AWS_DEFAULT_REGION": "us-east-1",
    }
    listed = cli("runs", url, "--tag", "user_id=u_7710", "--errors", env=environment)
    assert listed.returncode == 0 and listed.stderr == ""
    assert listed.stdout.count("failed") == 2
    rebuilt = cli("index", "rebuild", url, env=environment)
    assert (
        rebuilt.returncode == 0
        and "indexed 3 runs in 1 day; replaced 1 index file" in rebuilt.stdout
    )
    index_batch.write_rows(store, [row for row in _rows_of(store)])  # a second file for the day
    compacted = cli("index", "compact", url, env=environment)
    assert compacted.returncode == 0 and "merged 2 index files" in compacted.stdout
    assert len(index_listing.index_files(store)) == 1
    assert cli("runs", url, "--tag", "user_id=u_7710", env=environment).stdout == listed.stdout


def _rows_of(store: Any) -> list[row_format.IndexRow]:
    files = index_listing.index_files(store)
    with index_reader.IndexReader(store, files) as reader:
        return reader.select(files, since=None, errors=False, tags={})


def test_the_duckdb_query_of_the_docs_keeps_one_row_per_run_mid_compaction(varied: Path) -> None:
    page = (ROOT / "docs" / "run-index.md").read_text(encoding="utf-8")
    sql = page.split("### DuckDB", 1)[1].split("```sql", 1)[1].split("```", 1)[0]
    sql = sql.replace("'runs/_index/", f"'{varied}/_index/")
    [first, *_] = index_parquet(varied)
    shutil.copy(first, first.with_name("20990101T000000.000000Z-merged.parquet"))
    listed = [row[0] for row in duckdb.sql(sql).fetchall()]
    # What agenttape runs lists, but the run written after the index and the top-level one.
    assert listed == ["r_now", "r_hour", "r_kinds"]
    assert [info.run_id for info in list_runs(varied, tags={"user_id": "u_7710"}, since="7d")] == [
        "r_now",
        "r_late",
        "r_hour",
        "r_kinds",
    ]
