"""Many hosts on one store with no lock service: writer processes, each with its own recorder,
never lose or duplicate a run or an index row; two compactions at once leave every row once;
a compaction killed at any step loses nothing and the next one finishes its work."""

from __future__ import annotations

import collections
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from agenttape._production import claims, run_index
from agenttape._production.store import Store, open_store
from agenttape._production.stored_runs import list_runs
from tests.cli_support import AGENTTAPE
from tests.test_erasure import crash_run, index_rows

pytest.importorskip("duckdb")
pytest.importorskip("pyarrow")

ROOT = Path(__file__).resolve().parent.parent
WRITERS = 4
RUNS_EACH = 40
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


def start_writers(url: str, options: dict[str, Any] | None) -> list[subprocess.Popen[str]]:
    import json

    return [
        subprocess.Popen(
            [sys.executable, "-c", WRITER, url, f"w{writer}", str(RUNS_EACH), json.dumps(options)],
            text=True,
            stderr=subprocess.PIPE,
        )
        for writer in range(WRITERS)
    ]


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
    files_before = len(run_index.index_files(store))
    rows_before = len(index_rows(store))
    listed = [info.run_id for info in list_runs(url, storage_options=options)]
    assert sorted(listed) == sorted(expected)
    every_row_once(store, expected)
    said = compact_twice_at_once(url, env)
    every_row_once(store, expected)
    assert len(run_index.index_files(store)) == 1
    assert sorted(info.run_id for info in list_runs(url, storage_options=options)) == sorted(
        expected
    )
    assert not store.listing(claims.CLAIMS)[1]
    return (
        f"{WRITERS} writers x {RUNS_EACH} runs: {files_before} index files, {rows_before} rows; "
        f"two compactions at once said {said}; after: "
        f"{len(run_index.index_files(store))} file, {len(index_rows(store))} rows, each once"
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
    [day] = {found.day for found in run_index.index_files(store)}
    held = claims.acquire(store, day)
    assert held is not None
    done = run_index.compact(store)
    assert done.busy == [day] and done.files == 0
    claims.release(store, held)
    assert run_index.compact(store).busy == []


def _kill_compaction_at_each_step(
    url: str, options: dict[str, Any] | None, env: dict[str, str], fresh: Any
) -> list[str]:
    report = []
    after = 1
    while True:
        target = fresh(after)
        store = open_store(target, options)
        expected = set(index_rows(store))
        before = len(run_index.index_files(store))
        code, changes = crash_run(after, "index", "compact", target, env=env)
        if code == 0:
            assert changes == after - 1
            break
        # Nothing lost: every run still listed, every row still in some index file.
        assert {info.run_id for info in list_runs(target, storage_options=options)} == expected
        assert set(index_rows(store)) == expected
        rows_killed = len(index_rows(store))
        following = subprocess.run(
            [str(AGENTTAPE), "index", "compact", target],
            env={**os.environ, **env},
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        assert following.returncode == 0, following.stderr
        every_row_once(store, expected)
        assert len(run_index.index_files(store)) == 1
        report.append(
            f"killed before change {after}: {before} files -> {rows_killed} rows "
            f"(each run at least once) -> next compaction -> "
            f"{len(index_rows(store))} rows in 1 file, each once"
        )
        after += 1
    assert after > 4
    return report


def test_a_compaction_killed_at_each_step_is_finished_by_the_next(tmp_path: Path) -> None:
    template = tmp_path / "template"
    for writer in start_writers(str(template), None):
        assert writer.wait(timeout=300) == 0

    def fresh(after: int) -> str:
        import shutil

        target = tmp_path / f"kill{after}"
        shutil.copytree(template, target)
        return str(target)

    print("\n".join(_kill_compaction_at_each_step("", None, {}, fresh)))


def test_a_compaction_killed_at_each_step_on_s3(tmp_path: Path, s3: dict[str, Any]) -> None:
    template = tmp_path / "template"
    for writer in start_writers(str(template), None):
        assert writer.wait(timeout=300) == 0
    filesystem = open_store("s3://agent-runs/x", s3)
    assert hasattr(filesystem, "fs")

    def fresh(after: int) -> str:
        url = f"s3://agent-runs/compact-{after}"
        filesystem.fs.put(str(template), url.removeprefix("s3://"), recursive=True)
        return url

    print("\n".join(_kill_compaction_at_each_step("", s3, s3_environment(s3), fresh)))
