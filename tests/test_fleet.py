"""Many hosts on one store with no lock service: writer processes, each with its own recorder,
never lose or duplicate a run or an index row; two compactions at once leave every row once;
a compaction killed at any step loses nothing and the next one finishes its work."""

from __future__ import annotations

import collections
import os
import subprocess
import sys
import textwrap
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from agenttape._production.index import batch as index_batch
from agenttape._production.index import claims, manifests
from agenttape._production.index import compaction as index_compaction
from agenttape._production.index import listing as index_listing
from agenttape._production.index import reader as index_reader
from agenttape._production.index import rows as row_format
from agenttape._production.store import FsspecStore, Store, StoredFile, open_store
from agenttape._production.stored_runs import list_runs
from tests.cli_support import AGENTTAPE, fresh_copies
from tests.command_server import commands
from tests.test_erasure import crash_run, index_rows

pytest.importorskip("duckdb")
pytest.importorskip("pyarrow")

ROOT = Path(__file__).resolve().parent.parent
WRITERS = 4
RUNS_EACH = 40
# The store a compaction is killed in at each step: four index files of ten rows. Each file
# adds a kill point (its deletion) like the others, so a larger store repeats the same steps.
KILL_WRITERS, KILL_RUNS_EACH = 2, 20
WRITER = textwrap.dedent(
    """
    import json, sys
    import agenttape
    url, writer, count, options = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
    recorder = agenttape.Recorder(url, keep="all", storage_options=json.loads(options) or None)
    for number in range(count):
        with recorder.run(f"{writer}-{number}", writer=writer):
            pass
        if number % 10 == 9:
            recorder.flush()  # a batch of the index every ten runs: many small files
    recorder.close()
    assert recorder.stats.written == count, recorder.stats
    """
)


def s3_environment(s3: dict[str, Any]) -> dict[str, str]:
    return {
        "AWS_ACCESS_KEY_ID": s3["key"],
        "AWS_SECRET_ACCESS_KEY": s3["secret"],
        "AWS_ENDPOINT_URL": s3["client_kwargs"]["endpoint_url"],
        "AWS_DEFAULT_REGION": "us-east-1",
    }


def start_writers(
    url: str, options: dict[str, Any] | None, writers: int = WRITERS, runs_each: int = RUNS_EACH
) -> list[subprocess.Popen[str]]:
    import json

    return [
        subprocess.Popen(
            [sys.executable, "-c", WRITER, url, f"w{writer}", str(runs_each), json.dumps(options)],
            text=True,
            stderr=subprocess.PIPE,
        )
        for writer in range(writers)
    ]


def write_kill_template(template: Path) -> None:
    for writer in start_writers(str(template), None, KILL_WRITERS, KILL_RUNS_EACH):
        assert writer.wait(timeout=300) == 0


def compact_twice_at_once(url: str, env: dict[str, str]) -> list[str]:
    both = [
        subprocess.Popen(
            [str(AGENTTAPE), "index", "compact", url],
            env={**os.environ, **env},
            text=True,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        for _ in range(2)
    ]
    said = []
    for compaction in both:
        out, err = compaction.communicate(timeout=120)
        assert compaction.returncode == 0, err
        said.append(out.strip() + err.strip())
    return said


def every_row_once(store: Store, expected: set[str]) -> None:
    rows = index_rows(store)
    counts = collections.Counter(rows)
    assert set(counts) == expected
    assert [run_id for run_id, count in counts.items() if count != 1] == []


def _many_writers_then_two_compactions(
    url: str, options: dict[str, Any] | None, env: dict[str, str]
) -> str:
    writers = start_writers(url, options)
    for writer in writers:
        _out, err = writer.communicate(timeout=300)
        assert writer.returncode == 0, err
    store = open_store(url, options)
    expected = {f"w{w}-{n}" for w in range(WRITERS) for n in range(RUNS_EACH)}
    files_before = len(index_listing.index_files(store))
    rows_before = len(index_rows(store))
    listed = [info.run_id for info in list_runs(url, storage_options=options)]
    assert sorted(listed) == sorted(expected)
    every_row_once(store, expected)
    said = compact_twice_at_once(url, env)
    every_row_once(store, expected)
    assert len(index_listing.index_files(store)) == 1
    assert sorted(info.run_id for info in list_runs(url, storage_options=options)) == sorted(
        expected
    )
    assert not store.listing(claims.CLAIMS)[1]
    return (
        f"{WRITERS} writers x {RUNS_EACH} runs: {files_before} index files, {rows_before} rows; "
        f"two compactions at once said {said}; after: "
        f"{len(index_listing.index_files(store))} file, {len(index_rows(store))} rows, each once"
    )


def test_many_writer_processes_and_two_compactions_on_a_folder(tmp_path: Path) -> None:
    print(_many_writers_then_two_compactions(str(tmp_path / "store"), None, {}))


def test_many_writer_processes_and_two_compactions_on_s3(s3: dict[str, Any]) -> None:
    url = "s3://agent-runs/fleet"
    print(_many_writers_then_two_compactions(url, s3, s3_environment(s3)))


def test_a_second_compaction_leaves_a_claimed_day_to_the_first(tmp_path: Path) -> None:
    writers = start_writers(str(tmp_path), None)
    for writer in writers:
        assert writer.wait(timeout=300) == 0
    store = open_store(tmp_path)
    [day] = {found.day for found in index_listing.index_files(store)}
    with claims.held(store, day) as held:
        assert held is not None
        done = index_compaction.compact(store)
        assert done.busy == [day] and done.files == 0
    assert index_compaction.compact(store).busy == []


def raw_index(store: Store) -> tuple[list[str], list[str]]:
    """Every Parquet file under the index and every manifest, believed or not: what an engine
    globbing ``_index/*/*.parquet`` reads, and the manifests beside them."""
    listed = [stored.name for stored in store.walk(row_format.INDEX)]
    return (
        [name for name in listed if row_format.INDEX_FILE.fullmatch(name)],
        [name for name in listed if manifests.MANIFEST_FILE.fullmatch(name)],
    )


def _kill_compaction_at_each_step(
    url: str, options: dict[str, Any] | None, env: dict[str, str], fresh: Any, steps: int = 5
) -> list[str]:
    report = []
    after = 1
    while True:
        target = fresh(after)
        store = open_store(target, options)
        expected = set(index_rows(store))
        before = len(index_listing.index_files(store))
        code, changes = crash_run(after, "index", "compact", target, env=env)
        if code == 0:
            assert changes == after - 1
            break
        # Nothing lost: every run still listed, every row still in some index file.
        assert {info.run_id for info in list_runs(target, storage_options=options)} == expected
        assert set(index_rows(store)) == expected
        rows_killed = len(index_rows(store))
        files_killed = len(raw_index(store)[0])
        following = commands().run(["index", "compact", target], env={**os.environ, **env})
        assert following.returncode == 0, following.stderr
        every_row_once(store, expected)
        assert len(index_listing.index_files(store)) == 1
        parquet, published = raw_index(store)
        # Nothing left behind either: with no grace period, the next compaction deletes what
        # the killed one folded or wrote unpublished.
        assert len(parquet) == 1 and len(published) <= 1
        report.append(
            f"killed before change {after}: {before} files -> {rows_killed} rows read "
            f"(each run at least once; {files_killed} files) -> next compaction -> "
            f"{len(index_rows(store))} rows in 1 file, each once"
            + (f" ({len(published)} manifest)" if published else "")
        )
        after += 1
    assert after > steps
    return report


def _written_copies(tmp_path: Path) -> Callable[[int], str]:
    """The store the writer processes leave, written once; a fresh copy of it per kill."""
    template = tmp_path / "template"
    write_kill_template(template)
    return fresh_copies(template, tmp_path)


def test_a_compaction_killed_at_each_step_is_finished_by_the_next(tmp_path: Path) -> None:
    fresh = _written_copies(tmp_path)

    print("\n".join(_kill_compaction_at_each_step("", None, {}, fresh)))


def test_a_compaction_killed_at_each_step_on_s3(tmp_path: Path, s3: dict[str, Any]) -> None:
    template = tmp_path / "template"
    write_kill_template(template)
    filesystem = FsspecStore("s3://agent-runs/x", s3)  # s3fs copies a folder in one call

    def fresh(after: int) -> str:
        url = f"s3://agent-runs/compact-{after}"
        filesystem.fs.put(str(template), url.removeprefix("s3://"), recursive=True)
        return url

    print("\n".join(_kill_compaction_at_each_step("", s3, s3_environment(s3), fresh)))


# -- stores without conditional creates: fragments and manifests ------------------------------

NO_CONDITIONAL_WRITES = {"AGENTTAPE_CONDITIONAL_WRITES": "off"}


def test_many_writer_processes_and_two_compactions_without_conditional_writes(
    tmp_path: Path,
) -> None:
    """``local://`` goes through fsspec's local filesystem, which has no conditional create:
    compactions publish manifests, and two at once both publish version 1 (or one builds on
    the other's): readers believe one, and every row is read once."""
    url = f"local://{tmp_path / 'store'}"
    store = open_store(url)
    assert not store.conditional_creates
    report = _many_writers_then_two_compactions(url, None, {})
    parquet, published = raw_index(store)
    assert published, "the compactions published no manifest"
    versions = sorted(manifests.version_of(name) for name in published)
    # The garbage waits for its grace period; without one, a third compaction deletes it.
    third = subprocess.run(
        [str(AGENTTAPE), "index", "compact", url],
        env={**os.environ, manifests.GRACE: "0"},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert third.returncode == 0, third.stderr
    assert "published by manifests" in third.stdout
    expected = {f"w{w}-{n}" for w in range(WRITERS) for n in range(RUNS_EACH)}
    every_row_once(store, expected)
    after, after_published = raw_index(store)
    assert len(after) == 1 and len(after_published) == 1
    print(
        f"{report}; raw: {len(parquet)} Parquet files, manifests of versions {versions}; "
        f"third compaction (no grace): {len(after)} file, {len(after_published)} manifest"
    )


def _tie(tmp_path: Path, winner_is_extra: bool) -> str:
    """Two compactions from one state publish version 1 each; one of them (``extra``) also
    folded a fragment the other never saw. Made by compacting two copies and putting the
    extra one's output, manifest and fragment beside the other's."""
    import shutil

    base = tmp_path / "base"
    for writer in start_writers(str(base), None):
        assert writer.wait(timeout=300) == 0
    extra = tmp_path / "extra"
    shutil.copytree(base, extra)
    store, other = open_store(base), open_store(extra)
    [day] = {found.day for found in index_listing.index_files(store)}
    before = set(raw_index(other)[0])
    index_batch.write_rows(other, [row_format.unreadable(StoredFile(f"{day}/late.msgpack", 1), "")])
    [late] = set(raw_index(other)[0]) - before
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("AGENTTAPE_CONDITIONAL_WRITES", "off")
        assert index_compaction.compact(store).by_manifests
        assert index_compaction.compact(other).by_manifests
    [theirs] = raw_index(other)[1]
    [output] = [name for name in raw_index(other)[0] if manifests.is_merged(name)]
    # The names decide the tie: the greater uuid is believed.
    uuid_ = "f" * 32 if winner_is_extra else "0" * 32
    store.write(f"{theirs.rsplit('/', 1)[0]}/{1:012d}-{uuid_}.json", other.read(theirs))
    store.write(output, other.read(output))
    store.write(late, other.read(late))
    assert len(raw_index(store)[1]) == 2
    expected = {f"w{w}-{n}" for w in range(WRITERS) for n in range(RUNS_EACH)} | {"late"}
    every_row_once(store, expected)
    believed = [found.name for found in index_listing.index_files(store)]
    # The loser's output is ignored; a fragment only the loser folded is still read.
    assert (output in believed) == winner_is_extra
    assert (late in believed) != winner_is_extra
    rows_tied = len(index_rows(store))
    raw_rows, raw_files = raw_parquet_rows(store), len(raw_index(store)[0])
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("AGENTTAPE_CONDITIONAL_WRITES", "off")
        patch.setenv(manifests.GRACE, "0")
        index_compaction.compact(store)
    every_row_once(store, expected)
    assert len(raw_index(store)[0]) == 1 and len(raw_index(store)[1]) == 1
    return (
        f"tie at version 1, {'extra' if winner_is_extra else 'first'} compaction believed: "
        f"{raw_rows} rows in all {raw_files} files, {rows_tied} read, each "
        f"once; next compaction: {len(index_rows(store))} rows in 1 file"
    )


def raw_parquet_rows(store: Store) -> int:
    """Rows in every Parquet file of the index, believed or not."""
    files = [
        row_format.IndexFile(name, name.split("date=")[1][:10]) for name in raw_index(store)[0]
    ]
    with index_reader.IndexReader(store, files) as reader:
        [(count,)] = reader.connection.sql(
            f"SELECT count(*) FROM {reader.source(files)}"
        ).fetchall()
    return int(count)


@pytest.mark.parametrize("winner_is_extra", [True, False], ids=["extra-wins", "extra-loses"])
def test_two_compactions_publishing_one_version(tmp_path: Path, winner_is_extra: bool) -> None:
    print(_tie(tmp_path, winner_is_extra))


def test_a_compaction_killed_at_each_step_without_conditional_writes(tmp_path: Path) -> None:
    """Killed before its output, before its manifest, or before any of its deletions (no
    grace period, so it deletes at once): the next compaction leaves one file, rows once."""
    fresh = _written_copies(tmp_path)

    env = {**NO_CONDITIONAL_WRITES, manifests.GRACE: "0"}
    print("\n".join(_kill_compaction_at_each_step("", None, env, fresh)))


def test_a_compaction_killed_at_each_step_on_fsspec_without_conditional_writes(
    tmp_path: Path,
) -> None:
    """``local://``: fsspec's own local filesystem, with no conditional create and one
    request for many deletions: merged file, manifest, deletions."""
    template = tmp_path / "template"
    write_kill_template(template)
    fresh = fresh_copies(template, tmp_path, "local://")

    report = _kill_compaction_at_each_step("", None, {manifests.GRACE: "0"}, fresh, steps=3)
    print("\n".join(report))


def test_many_writer_processes_and_two_compactions_on_s3_without_conditional_writes(
    s3: dict[str, Any],
) -> None:
    """An S3-compatible server used as if it had no ``If-None-Match``: manifests there too."""
    url = "s3://agent-runs/fleet-manifests"
    env = {**s3_environment(s3), **NO_CONDITIONAL_WRITES}
    report = _many_writers_then_two_compactions(url, s3, env)
    _parquet, published = raw_index(open_store(url, s3))
    assert published
    print(f"{report}; manifests of versions {sorted(map(manifests.version_of, published))}")
