"""Stores without conditional writes (fragments and manifests): a deletion, a rebuild and a
compaction at once, in separate processes, leave every surviving run listed once and no
deleted one; a deletion killed at any step is finished by the next command; deleted rows
left in folded files are never shown; publishers whose clocks are off, or too slow, lose
and duplicate nothing."""

from __future__ import annotations

import datetime as _dt
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import pytest

from agenttape._production import deletions
from agenttape._production.erasure import retire
from agenttape._production.index import compaction, manifests
from agenttape._production.run_deletion import delete_runs
from agenttape._production.store import open_store
from agenttape._production.stored_runs import list_runs
from tests.cli_support import AGENTTAPE, cli, fresh_copies
from tests.test_erasure import KEPT, kill_delete_at_each_step, seed
from tests.test_fleet import (
    NO_CONDITIONAL_WRITES,
    RUNS_EACH,
    WRITERS,
    every_row_once,
    raw_index,
    raw_parquet_rows,
    s3_environment,
    start_writers,
)

pytest.importorskip("duckdb")
pytest.importorskip("pyarrow")

ROOT = Path(__file__).resolve().parent.parent
CRASH = Path(__file__).with_name("crash_after.py")
EVERY_RUN = {f"w{w}-{n}" for w in range(WRITERS) for n in range(RUNS_EACH)}
# The runs of writer w1 are deleted; the others stay.
SURVIVORS = {run_id for run_id in EVERY_RUN if not run_id.startswith("w1-")}


def written(target: Path) -> None:
    for writer in start_writers(str(target), None):
        assert writer.wait(timeout=300) == 0


def listed_once(url: str, options: dict[str, Any] | None = None) -> list[str]:
    found = [info.run_id for info in list_runs(url, storage_options=options)]
    assert len(found) == len(set(found)), "a run listed twice"
    return sorted(found)


def agenttape(*args: str, env: dict[str, str] | None = None) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [str(AGENTTAPE), *args],
        env={**os.environ, **NO_CONDITIONAL_WRITES, **(env or {})},
        text=True,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )


def slowed(*args: str, env: dict[str, str]) -> subprocess.Popen[str]:
    """``agenttape ARGS`` through tests/crash_after.py (to pause it, or set its clock off)."""
    return subprocess.Popen(
        [sys.executable, str(CRASH), *args],
        env={**os.environ, **NO_CONDITIONAL_WRITES, **env},
        text=True,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        cwd=ROOT,
    )


def wait_paused(process: subprocess.Popen[str]) -> None:
    """Until ``process`` (run by ``slowed``) says it paused."""
    assert process.stderr is not None
    for line in process.stderr:
        if line == "paused\n":
            return
    raise AssertionError(f"it never paused (exit status {process.wait()})")


def finish(process: subprocess.Popen[str]) -> tuple[int, str]:
    out, err = process.communicate(timeout=180)
    return process.returncode, out + err


def settle(url: str) -> None:
    """A last compaction with no grace period: what is left is each believed row once."""
    code, said = finish(agenttape("index", "compact", url, env={manifests.GRACE: "0"}))
    assert code == 0, said


def test_a_delete_and_a_compaction_at_once_without_conditional_writes(tmp_path: Path) -> None:
    target = tmp_path / "store"
    written(target)
    both = [
        agenttape("runs", "delete", str(target), "--tag", "writer=w1"),
        agenttape("index", "compact", str(target)),
    ]
    for process in both:
        code, said = finish(process)
        assert code == 0, said
    assert listed_once(str(target)) == sorted(SURVIVORS)
    store = open_store(target)
    assert all(stone.done for stone in deletions.tombstones(store))
    # Had the compaction's manifest tied with the deletion's and won, it still holds the
    # deleted rows, hidden by the tombstone; retiring the tombstone drops them for good.
    later = _dt.datetime.now(_dt.UTC) + deletions.RETIRE_AFTER + _dt.timedelta(hours=1)
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("AGENTTAPE_CONDITIONAL_WRITES", "off")
        assert retire(store, now=later) == 1
    settle(str(target))
    assert listed_once(str(target)) == sorted(SURVIVORS)
    every_row_once(store, SURVIVORS)


def test_a_rebuild_and_a_compaction_at_once_without_conditional_writes(tmp_path: Path) -> None:
    target = tmp_path / "store"
    written(target)
    both = [agenttape("index", "rebuild", str(target)), agenttape("index", "compact", str(target))]
    for process in both:
        code, said = finish(process)
        assert code == 0, said
    assert listed_once(str(target)) == sorted(EVERY_RUN)
    settle(str(target))
    every_row_once(open_store(target), EVERY_RUN)


def test_a_compaction_during_a_rebuild_leaves_each_row_once(tmp_path: Path) -> None:
    """The rebuild listed the index and read the day's runs; a compaction folds the day's
    batches meanwhile, before the rebuild writes anything: the rebuild's manifest folds the
    compaction's file too (its rows are the rebuild's), where deleting the files it listed
    left both the compaction's file and its own believed, every row twice."""
    target = tmp_path / "store"
    written(target)
    store = open_store(target)
    rebuild = slowed("index", "rebuild", str(target), env={"PAUSE_BEFORE": "1:8"})
    wait_paused(rebuild)
    code, said = finish(agenttape("index", "compact", str(target)))
    assert code == 0, said
    code, said = finish(rebuild)
    assert code == 0, said
    every_row_once(store, EVERY_RUN)
    assert listed_once(str(target)) == sorted(EVERY_RUN)


def test_a_delete_killed_at_each_step_without_conditional_writes(tmp_path: Path) -> None:
    template = tmp_path / "template"
    seed(template)

    fresh = fresh_copies(template, tmp_path)

    print("\n".join(kill_delete_at_each_step("", fresh, NO_CONDITIONAL_WRITES, None)))


def test_deleted_rows_left_in_folded_files_are_never_shown(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The files a deletion's manifest folded still hold the deleted rows until the grace
    period ends; no listing shows them meanwhile, not even once the tombstone is retired.
    The first compaction after the grace period deletes those bytes."""
    monkeypatch.setenv("AGENTTAPE_CONDITIONAL_WRITES", "off")
    seed(tmp_path)
    store = open_store(tmp_path)
    rows_before = raw_parquet_rows(store)
    delete_runs(tmp_path, tags={"user_id": "u_9"})
    assert raw_parquet_rows(store) == rows_before + len(KEPT)  # the old rows are all there
    hidden = {info.run_id for info in list_runs(tmp_path)}
    assert hidden == KEPT
    assert {info.run_id for info in list_runs(tmp_path, tags={"user_id": "u_9"})} == set()
    # Two days on, a compaction retires the tombstone: the folded files still hold the rows.
    later = _dt.datetime.now(_dt.UTC) + deletions.RETIRE_AFTER + _dt.timedelta(hours=1)
    assert retire(store, now=later) == 1
    assert deletions.tombstones(store) == []
    assert raw_parquet_rows(store) > len(KEPT)
    assert {info.run_id for info in list_runs(tmp_path)} == KEPT
    assert {info.run_id for info in list_runs(tmp_path, tags={"user_id": "u_9"})} == set()
    assert cli("runs", tmp_path, "--tag", "user_id=u_9").stdout.count("r_") == 0
    # The grace period over, the next compaction deletes them: the bytes are gone.
    monkeypatch.setenv(manifests.GRACE, "0")
    compaction.compact(store)
    assert raw_parquet_rows(store) == len(KEPT)
    every_row_once(store, KEPT)


def test_a_compaction_whose_clock_is_behind_loses_nothing(tmp_path: Path) -> None:
    """A host whose clock is an hour behind writes its merged file; meanwhile another host
    collects garbage. By the merged file's name it is an hour old, past the grace period;
    by the store's clock it was just written, so it is kept, and the slow host's manifest,
    published next, names a file that is there."""
    target = tmp_path / "store"
    written(target)
    store = open_store(target)
    grace = {manifests.GRACE: "60"}
    behind = slowed(
        "index",
        "compact",
        str(target),
        env={"PAUSE_AFTER": "1:4", "CLOCK_OFFSET": "-3600", **grace},
    )
    wait_paused(behind)
    assert [name for name in raw_index(store)[0] if manifests.is_merged(name)]
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("AGENTTAPE_CONDITIONAL_WRITES", "off")
        patch.setenv(manifests.GRACE, "60")
        assert compaction.compact(store, only=True).collected == 0
    code, said = finish(behind)
    assert code == 0, said
    every_row_once(store, EVERY_RUN)
    assert listed_once(str(target)) == sorted(EVERY_RUN)


def test_a_compaction_whose_clock_is_ahead_does_not_hold_garbage_back(tmp_path: Path) -> None:
    """A manifest published by a host an hour ahead says it was published an hour from now;
    by the store's clock its garbage is due once the grace period has passed."""
    target = tmp_path / "store"
    written(target)
    store = open_store(target)
    ahead = slowed("index", "compact", str(target), env={"CLOCK_OFFSET": "3600"})
    code, said = finish(ahead)
    assert code == 0, said
    [published] = raw_index(store)[1]
    assert manifests.decode(published, store.read(published)).at > time.time() + 3000
    time.sleep(1.5)
    code, said = finish(agenttape("index", "compact", str(target), env={manifests.GRACE: "1"}))
    assert code == 0, said
    assert len(raw_index(store)[0]) == 1
    every_row_once(store, EVERY_RUN)


def test_a_publish_after_half_the_grace_period_is_refused_and_says_what_to_do(
    tmp_path: Path,
) -> None:
    target = tmp_path / "store"
    written(target)
    store = open_store(target)
    files_before = sorted(raw_index(store)[0])
    slow = slowed(
        "index", "compact", str(target), env={"PAUSE_AFTER": "1:1.5", manifests.GRACE: "2"}
    )
    code, said = finish(slow)
    assert code == 2, said
    assert "not published" in said and "nothing was changed" in said
    assert "Run 'agenttape index compact' again" in said and manifests.GRACE in said
    assert sorted(raw_index(store)[0]) == files_before and raw_index(store)[1] == []
    every_row_once(store, EVERY_RUN)
    code, said = finish(agenttape("index", "compact", str(target)))
    assert code == 0, said
    every_row_once(store, EVERY_RUN)
    assert listed_once(str(target)) == sorted(EVERY_RUN)


def test_index_status_says_which_path_a_store_takes_and_why(
    tmp_path: Path, s3: dict[str, Any]
) -> None:
    seed(tmp_path / "folder")
    folder = cli("index", "status", tmp_path / "folder")
    assert folder.returncode == 0, folder.stderr
    assert "go through conditional writes" in folder.stdout
    assert "probed: a second create of one name was refused" in folder.stdout
    assert "index: 2 files read over 2 days" in folder.stdout
    off = cli("index", "status", tmp_path / "folder", env=NO_CONDITIONAL_WRITES)
    assert "go through fragments and manifests" in off.stdout
    assert "set by the environment: AGENTTAPE_CONDITIONAL_WRITES=off" in off.stdout
    fsspec_local = cli("index", "status", f"local://{tmp_path / 'folder'}")
    assert "go through fragments and manifests" in fsspec_local.stdout
    assert "has no create that exactly one of two writers wins" in fsspec_local.stdout
    on_s3 = cli("index", "status", "s3://agent-runs/status", env=s3_environment(s3))
    assert on_s3.returncode == 0, on_s3.stderr
    assert "go through conditional writes" in on_s3.stdout and "probed" in on_s3.stdout
    assert not open_store("s3://agent-runs/status", s3).walk("")  # the probe left nothing


SKEWED_WRITER = textwrap.dedent(
    """
    import sys, time
    import time_machine
    time_machine.travel(time.time() + float(sys.argv[3]), tick=True).start()
    import agenttape
    url, writer = sys.argv[1], sys.argv[2]
    recorder = agenttape.Recorder(url, keep="all")
    for number in range(40):
        with recorder.run(f"{writer}-{number}", writer=writer):
            pass
        if number % 10 == 9:
            recorder.flush()
    recorder.close()
    """
)


def test_writers_whose_clocks_are_off_lose_and_duplicate_nothing(tmp_path: Path) -> None:
    """Three writer processes, one an hour behind and one an hour ahead, then two compactions
    at once and one more with no grace period: every run listed once, every row once."""
    target = tmp_path / "store"
    offsets = {"behind": "-3600", "on_time": "0", "ahead": "3600"}
    writers = [
        subprocess.Popen([sys.executable, "-c", SKEWED_WRITER, str(target), name, offset])
        for name, offset in offsets.items()
    ]
    assert [writer.wait(timeout=300) for writer in writers] == [0, 0, 0]
    expected = {f"{name}-{number}" for name in offsets for number in range(40)}
    assert listed_once(str(target)) == sorted(expected)
    both = [agenttape("index", "compact", str(target)) for _ in range(2)]
    for process in both:
        code, said = finish(process)
        assert code == 0, said
    assert listed_once(str(target)) == sorted(expected)
    every_row_once(open_store(target), expected)
    settle(str(target))
    assert listed_once(str(target)) == sorted(expected)
    every_row_once(open_store(target), expected)


def test_a_delete_a_rebuild_and_compactions_at_once_on_s3_without_conditional_writes(
    s3: dict[str, Any],
) -> None:
    """The S3-compatible server used as if it had no ``If-None-Match``: a deletion and a
    compaction at once, then a rebuild and a compaction at once, separate processes."""
    url = "s3://agent-runs/fleet-deletes"
    for writer in start_writers(url, s3):
        assert writer.wait(timeout=300) == 0
    environment = s3_environment(s3)
    for pair in (
        [("runs", "delete", url, "--tag", "writer=w1"), ("index", "compact", url)],
        [("index", "rebuild", url), ("index", "compact", url)],
    ):
        for process in [agenttape(*args, env=environment) for args in pair]:
            code, said = finish(process)
            assert code == 0, said
        assert listed_once(url, s3) == sorted(SURVIVORS)
    store = open_store(url, s3)
    assert all(stone.done for stone in deletions.tombstones(store))
    later = _dt.datetime.now(_dt.UTC) + deletions.RETIRE_AFTER + _dt.timedelta(hours=1)
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("AGENTTAPE_CONDITIONAL_WRITES", "off")
        assert retire(store, now=later) == 1
    code, said = finish(
        agenttape("index", "compact", url, env={**environment, manifests.GRACE: "0"})
    )
    assert code == 0, said
    assert listed_once(url, s3) == sorted(SURVIVORS)
    every_row_once(store, SURVIVORS)
