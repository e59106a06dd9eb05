"""What a compaction of the run index costs itself: wall time, CPU time, bytes read and written.

Takes a store ``bench/run_index.py`` built (``--keep DIR``; only its ``_index/`` is copied, the
store itself is not changed) and, on a fresh copy for each case, in a new process:

1. ``compact``: ``agenttape index compact`` as the bench leaves the store (every day one
   compacted file but the newest, which holds the batches of four busy writers since the last
   compaction): the every-few-minutes job.
2. ``compact, manifests``: the same with ``AGENTTAPE_CONDITIONAL_WRITES=off`` (merged file and
   manifest, garbage left for the grace period).
3. ``every day rewritten``: each day merged again, from one file too: what a deletion whose runs
   are spread over every day (or a retirement of one) pays at most.

CPU is the child's user + system time; bytes are what the compaction itself read and wrote
through system calls (``/proc/self/io``: ``rchar``, ``wchar``), measured around the call, after
DuckDB and pyarrow are imported. Also timed alone: building the tag filters of one day.

    python bench/compaction_cost.py STORE [--repeat 3] [--out FILE]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
CASES = ("compact", "compact, manifests", "every day rewritten")

CHILD = """
import json, os, resource, sys, time
import duckdb, pyarrow, pyarrow.parquet
sys.path.insert(0, sys.argv[3])
from agenttape._production import stored_runs
from agenttape._production.index import compaction, listing
from agenttape._production.store import open_store

def io():
    with open("/proc/self/io") as handle:
        fields = dict(line.split(": ") for line in handle.read().splitlines())
    return int(fields["rchar"]), int(fields["wchar"])

case, store = sys.argv[1], sys.argv[2]
before = io()
usage = resource.getrusage(resource.RUSAGE_SELF)
started = time.perf_counter()
if case == "every day rewritten":
    opened = open_store(store)
    days = {found.day for found in listing.index_files(opened)}
    done = compaction.compact(opened, rewrite=days, only=True)
else:
    done = stored_runs.compact_index(store)
wall = time.perf_counter() - started
after_usage = resource.getrusage(resource.RUSAGE_SELF)
after = io()
cpu = (after_usage.ru_utime - usage.ru_utime) + (after_usage.ru_stime - usage.ru_stime)
print(json.dumps({"wall": wall, "cpu": cpu, "read": after[0] - before[0],
                  "written": after[1] - before[1], "days": done.days, "files": done.files,
                  "rows": done.rows}))
"""


def index_size(store: Path) -> tuple[int, int]:
    files = list((store / "_index").rglob("*.parquet"))
    return len(files), sum(path.stat().st_size for path in files)


def measure(case: str, source: Path, work: Path) -> dict[str, Any]:
    target = work / "store"
    if target.exists():
        shutil.rmtree(target)
    shutil.copytree(source / "_index", target / "_index")
    env = {**os.environ}
    if case == "compact, manifests":
        env["AGENTTAPE_CONDITIONAL_WRITES"] = "off"
    done = subprocess.run(
        [sys.executable, "-c", CHILD, case, str(target), str(ROOT)],
        capture_output=True,
        text=True,
        env=env,
        check=True,
    )
    result: dict[str, Any] = json.loads(done.stdout)
    result["after"] = index_size(target)
    return result


def tag_filter_cost(source: Path) -> dict[str, float]:
    """Building one full day's tag filters alone, and writing its whole file."""
    import pyarrow.parquet as pq

    sys.path.insert(0, str(ROOT))
    from agenttape._production.index import rows, tag_filters

    days = sorted((source / "_index").iterdir())
    table = pq.read_table(next(days[-2].glob("*.parquet"))).select(rows.schema().names)
    started = time.process_time()
    tag_filters.of(table, rows.ROW_GROUP)
    filters = time.process_time() - started
    started = time.process_time()
    rows.parquet_bytes(table)
    whole = time.process_time() - started
    return {"rows": table.num_rows, "filters": filters, "file": whole}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("store", type=Path)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    files, size = index_size(args.store)
    results: dict[str, Any] = {"index_files": files, "index_bytes": size, "cases": {}}
    with tempfile.TemporaryDirectory(prefix="agenttape-compaction-") as work:
        for case in CASES:
            runs = [measure(case, args.store, Path(work)) for _ in range(args.repeat)]
            results["cases"][case] = {
                "runs": runs,
                "wall": statistics.median(run["wall"] for run in runs),
                "cpu": statistics.median(run["cpu"] for run in runs),
            }
            print(case, json.dumps(results["cases"][case]["runs"][-1]), flush=True)
    results["tag_filters"] = tag_filter_cost(args.store)
    results["load"] = os.getloadavg()
    text = json.dumps(results, indent=2)
    print(text)
    if args.out:
        args.out.write_text(text + "\n")


if __name__ == "__main__":
    main()
