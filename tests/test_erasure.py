"""Retention and erasure: ``agenttape runs delete`` removes run files and index rows together,
and a deletion killed at any step is finished by the next delete, compaction or rebuild,
never showing a run that is gone nor bringing a deleted run back."""

from __future__ import annotations

import datetime as _dt
import os
import shutil
from pathlib import Path
from typing import Any

import pytest
import time_machine

import agenttape
from agenttape._production import deletions
from agenttape._production.erasure import apply_retention, retire
from agenttape._production.index import batch as index_batch
from agenttape._production.index import listing as index_listing
from agenttape._production.index import reader as index_reader
from agenttape._production.index import rows as row_format
from agenttape._production.index.rebuild import rebuild_index
from agenttape._production.run_deletion import delete_runs
from agenttape._production.store import FsspecStore, Store, open_store
from agenttape._production.stored_runs import list_runs
from tests.cli_support import assert_one_line_error, cli, fresh_copies, write_run
from tests.command_server import commands

duckdb = pytest.importorskip("duckdb")
pytest.importorskip("pyarrow")

NOW = _dt.datetime.now(_dt.UTC).replace(microsecond=0)
ROOT = Path(__file__).resolve().parent.parent
# u_9 asks to be forgotten; the others stay. Two days, so the index rewrite spans two files.
RUNS = {
    "r_a": ("u_9", NOW - _dt.timedelta(days=1)),
    "r_b": ("u_1", NOW - _dt.timedelta(days=1)),
    "r_c": ("u_9", NOW),
    "r_d": ("u_1", NOW),
    "r_e": ("u_9", NOW - _dt.timedelta(minutes=5)),
}
GONE = {"r_a", "r_c", "r_e"}
KEPT = set(RUNS) - GONE


def seed(store: Path) -> None:
    for run_id, (user, created) in RUNS.items():
        write_run(store, run_id, created, {"user_id": user})
    rebuild_index(store)


def index_rows(store: Store) -> list[str]:
    """Every row of every index file, duplicates included: what Spark or Athena would see."""
    files = index_listing.index_files(store)
    if not files:
        return []
    with index_reader.IndexReader(store, files) as reader:
        found = reader.connection.sql(f"SELECT run_id FROM {reader.source(files)}").fetchall()
    return sorted(run_id for (run_id,) in found)


def listed(url: str, options: dict[str, Any] | None = None) -> set[str]:
    return {info.run_id for info in list_runs(url, storage_options=options)}


def run_files(store: Store) -> set[str]:
    return {
        stored.name.rsplit("/", 1)[-1].removesuffix(".msgpack")
        for stored in store.files()
        if stored.name.endswith(".msgpack")
    }


def crash_run(after: int, *args: str, env: dict[str, str] | None = None) -> tuple[int, int]:
    """Run ``agenttape ARGS`` killed before its ``after``-th change to the store; its exit
    status and the number of changes it made when it ran to the end."""
    environment = {**os.environ, **(env or {}), "CRASH_AFTER": str(after)}
    done = commands().run(list(args), env=environment, cwd=ROOT, crash=True)
    changes = 0
    for line in done.stderr.splitlines():
        if line.startswith("changes: "):
            changes = int(line.split()[1])
    assert done.returncode in (0, -9), done.stderr
    return done.returncode, changes


def test_delete_by_tag_removes_the_files_and_the_index_rows_together(tmp_path: Path) -> None:
    seed(tmp_path)
    dry = cli("runs", "delete", tmp_path, "--tag", "user_id=u_9", "--dry-run")
    assert dry.returncode == 0 and "would delete 3 runs" in dry.stdout
    assert all(run_id in dry.stdout for run_id in GONE)
    assert listed(str(tmp_path)) == set(RUNS)
    done = cli("runs", "delete", tmp_path, "--tag", "user_id=u_9")
    assert done.returncode == 0, done.stderr
    assert "deleted 3 runs: 3 run files and 3 index rows removed" in done.stdout
    store = open_store(tmp_path)
    assert listed(str(tmp_path)) == KEPT == run_files(store)
    assert index_rows(store) == sorted(KEPT)
    for again in (("index", "compact", tmp_path), ("index", "rebuild", tmp_path)):
        assert cli(*again).returncode == 0
        assert listed(str(tmp_path)) == KEPT
        assert index_rows(store) == sorted(KEPT)


def test_delete_before_and_by_run_id(tmp_path: Path) -> None:
    seed(tmp_path)
    day = f"{NOW:%Y-%m-%d}"
    done = delete_runs(tmp_path, before=_dt.datetime.fromisoformat(f"{day}T00:00:00+00:00"))
    assert sorted(info.run_id for info in done.runs) == ["r_a", "r_b"]
    assert done.rows == 2
    assert listed(str(tmp_path)) == {"r_c", "r_d", "r_e"}
    by_id = cli("runs", "delete", tmp_path, "r_d")
    assert by_id.returncode == 0 and "deleted 1 run: 1 run file and 1 index row" in by_id.stdout
    assert listed(str(tmp_path)) == {"r_c", "r_e"}
    assert index_rows(open_store(tmp_path)) == ["r_c", "r_e"]
    assert_one_line_error(cli("runs", "delete", tmp_path), "say which runs to delete")
    assert_one_line_error(cli("runs", "delete", tmp_path, "nope"), "run nope is not in store")


def test_a_run_written_after_its_deletion_started_stays_hidden(tmp_path: Path) -> None:
    """A writer's batch that lands after the index was rewritten (its row written late)
    does not bring the run back: readers, compaction and rebuild honour the tombstone."""
    seed(tmp_path)
    store = open_store(tmp_path)
    late = row_format.describe(
        {"run_id": "r_c", "created_at": NOW, "tags": {"user_id": "u_9"}},
        f"{NOW:%Y-%m-%d}/r_c.msgpack",
        10,
    )
    delete_runs(tmp_path, tags={"user_id": "u_9"})
    index_batch.write_rows(store, [late])
    assert "r_c" in index_rows(store)
    assert listed(str(tmp_path)) == KEPT
    assert cli("index", "compact", tmp_path).returncode == 0
    assert index_rows(store) == sorted(KEPT)


def kill_delete_at_each_step(url: str, fresh: Any, env: dict[str, str], options: Any) -> list[str]:
    """Kill ``runs delete --tag user_id=u_9`` before each of its changes to the store; after
    each kill the listing shows exactly the runs not deleted, whatever finishes the work."""
    report = []
    nexts = [
        ("runs", "delete", "--tag", "user_id=u_9"),
        ("index", "compact"),
        ("index", "rebuild"),
    ]
    after = 1
    while True:
        target = fresh(after)
        code, changes = crash_run(after, "runs", "delete", target, "--tag", "user_id=u_9", env=env)
        if code == 0:
            assert changes == after - 1, (changes, after)
            break
        store = open_store(target, options)
        seen = listed(target, options)
        started = bool(deletions.tombstones(store))
        # Once the tombstone is written no deleted run is listed; never a run listed whose
        # file is gone, never a kept run hidden.
        assert seen == (KEPT if started else set(RUNS)), (after, seen)
        assert seen <= run_files(store)
        rows_before = index_rows(store)
        finisher = nexts[after % len(nexts)]
        following = commands().run(
            [*finisher[:2], target, *finisher[2:]], env={**os.environ, **env}
        )
        assert following.returncode == 0, following.stderr
        expected = KEPT if started or finisher[0] == "runs" else set(RUNS)
        assert listed(target, options) == expected == run_files(store), (after, finisher)
        rows_after = index_rows(store)
        assert rows_after == sorted(expected), (after, finisher, rows_after)
        assert all(stone.done for stone in deletions.tombstones(store))
        report.append(
            f"killed before change {after}: index rows {rows_before} -> "
            f"'{' '.join(finisher)}' -> {rows_after}"
        )
        after += 1
    assert after > 5
    return report


def test_a_delete_killed_at_each_step_is_finished_by_the_next_command(tmp_path: Path) -> None:
    template = tmp_path / "template"
    seed(template)

    fresh = fresh_copies(template, tmp_path)

    report = kill_delete_at_each_step("", fresh, {}, None)
    print("\n".join(report))


def test_a_delete_killed_at_each_step_on_an_s3_compatible_server(
    tmp_path: Path, s3: dict[str, Any]
) -> None:
    template = tmp_path / "template"
    seed(template)
    environment = {
        "AWS_ACCESS_KEY_ID": s3["key"],
        "AWS_SECRET_ACCESS_KEY": s3["secret"],
        "AWS_ENDPOINT_URL": s3["client_kwargs"]["endpoint_url"],
        "AWS_DEFAULT_REGION": "us-east-1",
    }
    filesystem = FsspecStore("s3://agent-runs/x", s3)  # s3fs copies a folder in one call

    def fresh(after: int) -> str:
        url = f"s3://agent-runs/erase-{after}"
        filesystem.fs.put(str(template), url.removeprefix("s3://"), recursive=True)
        return url

    report = kill_delete_at_each_step("", fresh, environment, s3)
    print("\n".join(report))


def test_a_recorder_with_retention_deletes_whole_old_days_a_share_at_a_time(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    old = NOW - _dt.timedelta(days=100)
    for number in range(5):
        write_run(tmp_path, f"r_old{number}", old, {"user_id": "u_1"})
    write_run(tmp_path, "r_new", NOW, {"user_id": "u_1"})
    rebuild_index(tmp_path)
    store = open_store(tmp_path)
    assert apply_retention(store, _dt.timedelta(days=90), limit=2) == 2
    # Hidden at once, index day gone at once; the files go a share at a time.
    assert listed(str(tmp_path)) == {"r_new"}
    assert index_rows(store) == ["r_new"]
    assert len(run_files(store)) == 4
    assert apply_retention(store, _dt.timedelta(days=90), limit=2) == 2
    assert apply_retention(store, _dt.timedelta(days=90), limit=2) == 1
    assert run_files(store) == {"r_new"}
    assert all(stone.done for stone in deletions.tombstones(store))
    assert apply_retention(store, _dt.timedelta(days=90), limit=2) == 0
    write_run(tmp_path, "r_old9", old, {"user_id": "u_1"})  # a late file in an old day
    assert listed(str(tmp_path)) == {"r_new"}
    rebuild_index(tmp_path)
    assert index_rows(store) == ["r_new"]
    for number in range(3):
        write_run(tmp_path, f"r_older{number}", old, {"user_id": "u_1"})
    rebuild_index(tmp_path)
    with agenttape.Recorder(tmp_path, keep="all", retention="90d") as recorder:
        with recorder.run(user_id="u_2"):
            pass
        recorder.flush()
    assert len(listed(str(tmp_path))) == 2
    assert not {name for name in run_files(store) if name.startswith("r_old")}


def _deleted_files(store: Store) -> list[str]:
    return sorted(stored.name for stored in store.listing(deletions.DELETED)[1])


def _late_row(run_id: str) -> row_format.IndexRow:
    """The row of a deleted run, as a writer's batch that lands after the deletion holds it."""
    return row_format.describe(
        {"run_id": run_id, "created_at": NOW, "tags": {"user_id": "u_9"}},
        f"{NOW:%Y-%m-%d}/{run_id}.msgpack",
        10,
    )


def _age_done_markers(store: Store, days: int) -> None:
    """Make every done marker say it was written ``days`` ago (as if that long had passed)."""
    old = row_format.stamp(_dt.datetime.now(_dt.UTC) - _dt.timedelta(days=days))
    for name in _deleted_files(store):
        if name.endswith(deletions.DONE_SUFFIX):
            base = name.partition("@")[0].removesuffix(deletions.DONE_SUFFIX)
            store.delete(name)
            store.write(f"{base}@{old}{deletions.DONE_SUFFIX}", b"")


def test_done_tombstones_are_retired_by_a_compaction_and_a_late_row_stays_gone(
    tmp_path: Path,
) -> None:
    """A done tombstone is kept while a writer's batch may still land (``RETIRE_AFTER``),
    then a compaction rewrites its days without its runs (the row a late batch brought goes)
    and removes its files: a listing no longer reads one file per deletion."""
    seed(tmp_path)
    store = open_store(tmp_path)
    delete_runs(tmp_path, tags={"user_id": "u_9"})
    delete_runs(tmp_path, run_ids=["r_b"])
    assert len(_deleted_files(store)) == 4  # two tombstones, each marked done
    index_batch.write_rows(store, [_late_row("r_c")])  # lands after the deletion
    assert cli("index", "compact", tmp_path).returncode == 0
    assert len(_deleted_files(store)) == 4  # too recent to retire
    assert listed(str(tmp_path)) == {"r_d"}
    later = _dt.datetime.now(_dt.UTC) + deletions.RETIRE_AFTER
    assert retire(store, now=later - _dt.timedelta(hours=1)) == 0
    index_batch.write_rows(store, [_late_row("r_e")])  # still within the window
    assert retire(store, now=later + _dt.timedelta(minutes=1)) == 2
    assert _deleted_files(store) == []
    assert listed(str(tmp_path)) == {"r_d"} == run_files(store)
    assert index_rows(store) == ["r_d"]
    for again in (("index", "compact", tmp_path), ("index", "rebuild", tmp_path)):
        assert cli(*again).returncode == 0
        assert listed(str(tmp_path)) == {"r_d"}
        assert index_rows(store) == ["r_d"]


def test_the_newest_day_rule_stays_and_hides_late_files_in_old_days(tmp_path: Path) -> None:
    seed(tmp_path)
    store = open_store(tmp_path)
    # An hour's retention at noon of the runs' day: in the first hour after midnight the
    # cutoff would be the day before, with nothing older to delete.
    with time_machine.travel(NOW.replace(hour=12, minute=0, second=0), tick=False):
        apply_retention(store, _dt.timedelta(days=0, hours=1))
        [stone] = deletions.tombstones(store)
        assert stone.before and stone.done
        _age_done_markers(store, 30)
        assert retire(store) == 0
    assert [found.name for found in deletions.tombstones(store)] == [stone.name]


def test_a_retirement_killed_at_each_step_is_finished_by_the_next_compaction(
    tmp_path: Path,
) -> None:
    template = tmp_path / "template"
    seed(template)
    delete_runs(template, tags={"user_id": "u_9"})
    index_batch.write_rows(open_store(template), [_late_row("r_c")])
    _age_done_markers(open_store(template), 3)
    report: list[str] = []
    after = 1
    while True:
        target = tmp_path / f"kill{after}"
        shutil.copytree(template, target)
        store = open_store(target)
        code, changes = crash_run(after, "index", "compact", str(target))
        if code == 0:
            assert changes == after - 1, (changes, after)
            assert _deleted_files(store) == []
            break
        assert listed(str(target)) == KEPT, after
        rows_before, left = index_rows(store), _deleted_files(store)
        compacted = commands().run(["index", "compact", str(target)], env=dict(os.environ))
        assert compacted.returncode == 0, compacted.stderr
        assert listed(str(target)) == KEPT == run_files(store), after
        assert index_rows(store) == sorted(KEPT), after
        assert _deleted_files(store) == [], (after, _deleted_files(store))
        report.append(
            f"killed before change {after}: rows {rows_before}, {len(left)} files in _deleted/ "
            f"-> 'index compact' -> rows {index_rows(store)}, 0 files"
        )
        after += 1
    assert after > 4
    print("\n".join(report))


def test_a_writer_drops_a_row_that_waited_too_long_rather_than_write_it_late(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    clock = [1000.0]
    monkeypatch.setattr(index_batch.time, "monotonic", lambda: clock[0])
    batch = index_batch.Batch()
    old, new = _late_row("r_old"), _late_row("r_new")
    batch.add(old)
    clock[0] += index_batch.MAX_ROW_WAIT - 10
    batch.add(new)
    assert batch.keep(batch.take()) == 0  # the store refused them: both wait
    clock[0] += 20
    assert batch.keep(batch.take()) == 1  # refused again: the older one is dropped
    assert [row.run_id for row in batch.take()] == ["r_new"]
    assert deletions.RETIRE_AFTER.total_seconds() > index_batch.MAX_ROW_WAIT
