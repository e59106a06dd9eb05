"""How fast ``agenttape runs`` answers from the run index at fleet scale, beside reading headers.

1. The index: a store of 1,000,000 runs over the last 30 days. Each day before the last six
   hours is one compacted index file (as ``agenttape index compact`` leaves it), with one run
   file in the day's folder; the last six hours are real run files, indexed as four busy
   recorder processes leave them under a compaction every ten minutes: one compacted file up
   to the last compaction, then a batch a minute from each process; the runs of the last
   minute are in no batch yet (in flight: named in the writers' lists of runs in flight) and
   are found from their files. Two such stores,
   with 10,000 and 2,000 run files in the last six hours (``--recent``): listing the newest
   day's folder, how runs in flight are found, grows with it. Timed: the whole command, in a
   new process, ``agenttape runs STORE --tag user_id=U --since 7d``, in a local folder and on
   an S3-compatible server (moto's, on 127.0.0.1).
2. The header scan, for comparison: a store of 20,000 run files (local) and 2,000 (S3) over the
   last 7 days and no index, listed with the same command; the time per run, times the
   233,000 runs a store of 1,000,000 over 30 days holds in 7 days, is the extrapolation shown.

    python bench/run_index.py [--runs 1000000] [--recent 10000,2000] [--scan 20000] [--no-s3]

Writes bench/RUN_INDEX.md (shown in the documentation) and prints the figures as JSON.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as _dt
import json
import os
import platform
import random
import re
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from agenttape._core import meta  # noqa: E402
from agenttape._core.models import Interaction, Request, Response  # noqa: E402
from agenttape._core.wire import codec  # noqa: E402
from agenttape._production.index import pending as index_pending  # noqa: E402
from agenttape._production.index import rows as index_rows  # noqa: E402
from agenttape._production.index.rows import IndexRow  # noqa: E402
from agenttape._production.store import FsspecStore, StoredFile, open_store  # noqa: E402

AGENTTAPE = Path(sys.executable).parent / "agenttape"
DAY = re.compile(r"\d{4}-\d{2}-\d{2}")
DAYS = 30
RECENT = _dt.timedelta(hours=6)
IN_FLIGHT = _dt.timedelta(seconds=60)
COMPACTED = _dt.timedelta(minutes=10)
PROCESSES = 4
USERS = 50_000
TIMINGS = 5
# The timed runs of each listing (``--timings``).
timings = [TIMINGS]
SCAN_BUCKET = "scanned-runs"


def run_file(run_id: str, created: _dt.datetime, tags: dict[str, Any]) -> bytes:
    """A kept run as the recorder writes it: a chat call, a tool call, a second chat call."""
    chat = Request(
        "POST",
        "https://api.openai.com/v1/chat/completions",
        [("content-type", "application/json")],
        json.dumps(
            {"model": "gpt-4o-mini", "messages": [{"role": "user", "content": "x" * 600}]}
        ).encode(),
    )
    answer = Response(
        200, headers=[("content-type", "application/json")], body=b'{"choices": []}' + b" " * 900
    )
    tool = Request("GET", f"https://orders.internal/orders/{run_id[:8]}")
    interactions = [
        Interaction(chat, answer, started_at=created.timestamp()),
        Interaction(tool, Response(200, body=b'{"status": "shipped"}')),
        Interaction(chat, answer),
    ]
    header = {
        **meta.new_header(tags, run_id=run_id),
        "created_at": created,
        "run": {"status": "ok", "reasons": [], "duration": 1.5, "interactions": 3},
    }
    return codec.encode(header, interactions)


def tags_for(rng: random.Random) -> dict[str, Any]:
    return {
        "user_id": f"u_{rng.randrange(USERS):05d}",
        "tenant_id": f"t_{rng.randrange(200):03d}",
        "plan": rng.choice(("free", "pro", "team")),
        "beta": rng.random() < 0.1,
    }


def index_row(rng: random.Random, run_id: str, created: _dt.datetime) -> IndexRow:
    failed = rng.random() < 0.03
    day = created.strftime("%Y-%m-%d")
    return IndexRow(
        day=day,
        run_id=run_id,
        created=created,
        status="failed" if failed else "ok",
        reasons=["HTTP 500 from POST https://api.openai.com/v1/chat/completions"] if failed else [],
        n=rng.randrange(2, 14),
        size=rng.randrange(8_000, 200_000),
        path=f"{day}/{run_id}.msgpack",
        hosts=["api.openai.com", "orders.internal"],
        models=["gpt-4o-mini"],
        tags=tags_for(rng),
        duration=round(rng.uniform(0.5, 30.0), 3),
    )


def build(
    put: Callable[[str, bytes], None], runs: int, recent: int, now: _dt.datetime, days: int
) -> dict[str, Any]:
    """Fill a store through ``put`` (see the module's description); the user to look for and how many runs
    of theirs a 7-day listing shows."""
    rng = random.Random(7)
    older = runs - recent
    start = now - RECENT - _dt.timedelta(days=days)
    span = (now - RECENT - start).total_seconds()
    files: dict[str, bytes] = {}
    # The older days are made and written one day at a time: 10,000,000 rows at once would
    # not fit in memory. The user looked for is chosen first (a recent run's), so the rows
    # of the week can be counted as they are made.
    user = tags_for(random.Random(3))["user_id"]
    # The user's runs of the last 8 days: the runs a listing of the last 7 days shows are
    # counted when it runs (a kept store is listed again later).
    recent_days = now - _dt.timedelta(days=8)
    seen: list[str] = []
    index_files = index_bytes = 0
    rows: list[IndexRow] = []

    def write_day(rows: list[IndexRow]) -> None:
        nonlocal index_files, index_bytes
        data = index_rows.encode(rows)
        put(index_rows.file_name(rows[0].day, index_rows.stamp(rows[-1].created)), data)
        index_files += 1
        index_bytes += len(data)
        placeholder = rows[-1]
        put(placeholder.path, run_file(placeholder.run_id, placeholder.created, placeholder.tags))

    for number in range(older):
        created = start + _dt.timedelta(seconds=span * number / older)
        row = index_row(rng, f"{rng.getrandbits(128):032x}", created)
        if rows and row.day != rows[0].day:
            write_day(rows)
            rows = []
        rows.append(row)
        if row.tags["user_id"] == user and created >= recent_days:
            seen.append(created.isoformat())
    if rows:
        write_day(rows)
    # The last six hours: real run files, indexed in batches except the last minute's.
    compaction = now - COMPACTED
    compacted: dict[str, list[IndexRow]] = defaultdict(list)
    minutes: dict[tuple[str, int, int], list[IndexRow]] = defaultdict(list)
    recent_rows = []
    for number in range(recent):
        created = now - RECENT + RECENT * (number + 0.5) / recent
        run_id = f"{rng.getrandbits(128):032x}"
        tags = tags_for(rng)
        if number == recent - 1:
            tags["user_id"] = user  # a run in flight: the answer needs the files too
        name = f"{created:%Y-%m-%d}/{run_id}.msgpack"
        data = run_file(run_id, created, tags)
        files[name] = data
        header, interactions = codec.decode(data, name)
        row = index_rows.describe(header, name, len(data), interactions)
        recent_rows.append(row)
        if created >= now - IN_FLIGHT:
            # Named in flight as a writer that wakes up for each run names it (the most
            # lists a reader can meet).
            writer = f"{rng.getrandbits(64):016x}"
            files[index_pending.pending_name(writer)] = index_pending.encode_pending(
                [StoredFile(name, len(data))]
            )
            continue
        if created < compaction:
            compacted[row.day].append(row)
        else:
            minute = int((created - compaction).total_seconds() // 60)
            minutes[(row.day, minute, rng.randrange(PROCESSES))].append(row)
    for day, rows in compacted.items():
        files[index_rows.file_name(day, index_rows.stamp(rows[-1].created))] = index_rows.encode(
            rows
        )
    for (day, _minute, _process), rows in minutes.items():
        files[index_rows.file_name(day, index_rows.stamp(rows[-1].created))] = index_rows.encode(
            rows
        )
    seen += [
        row.created.isoformat()
        for row in recent_rows
        if row.tags["user_id"] == user and row.created
    ]
    for name, data in files.items():
        put(name, data)
    return {
        "user": user,
        "user_runs": seen,
        "index_files": index_files + sum(1 for name in files if name.startswith("_index/")),
        "index_bytes": index_bytes
        + sum(len(d) for n, d in files.items() if n.startswith("_index/")),
        "run_files": sum(1 for name in files if not name.startswith("_index/")),
        "in_flight": sum(
            1 for row in recent_rows if row.created and row.created >= now - IN_FLIGHT
        ),
    }


def build_scan(put: Callable[[str, bytes], None], runs: int, now: _dt.datetime) -> str:
    """``runs`` run files over the last 7 days, no index; the user to look for."""
    rng = random.Random(11)
    user = ""
    for number in range(runs):
        created = now - _dt.timedelta(days=7) * (number + 0.5) / runs
        run_id = f"{rng.getrandbits(128):032x}"
        tags = tags_for(rng)
        user = user or tags["user_id"]
        put(f"{created:%Y-%m-%d}/{run_id}.msgpack", run_file(run_id, created, tags))
    return user


def time_runs(
    store: str,
    user: str,
    env: dict[str, str],
    check: Callable[[str], None],
    scratch: Path,
    cold: bool = False,
) -> dict[str, Any]:
    """The whole command in a new process, the median of several; the first answer checked.
    The process runs as installed: its bytecode compiled once (as pip leaves it; the warm-up
    run writes it to ``scratch``), not on every start, whatever PYTHONDONTWRITEBYTECODE says
    here. Its cache folder (the index footers) is ``scratch``'s, kept from run to run, or with
    ``cold`` a new empty one each run. Beside the wall time: the process's CPU time and the
    machine's 1-minute load average (other work shares it)."""
    command = [str(AGENTTAPE), "runs", store, "--tag", f"user_id={user}", "--since", "7d"]
    environment = {**os.environ, **env, "PYTHONPYCACHEPREFIX": str(scratch / "bytecode")}
    environment.pop("PYTHONDONTWRITEBYTECODE", None)
    environment["AGENTTAPE_CACHE_DIR"] = str(scratch / "cache")
    times, cpu, loads = [], [], []
    for attempt in range(timings[0] + 1):
        if cold:
            environment["AGENTTAPE_CACHE_DIR"] = tempfile.mkdtemp(dir=scratch, prefix="cold-")
        loads.append(os.getloadavg()[0])
        used = resource.getrusage(resource.RUSAGE_CHILDREN)
        began = time.perf_counter()
        done = subprocess.run(command, capture_output=True, text=True, env=environment, check=False)
        took = time.perf_counter() - began
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        assert done.returncode == 0, done.stderr
        if attempt == 0:  # a first run warms the OS's file cache and writes the bytecode
            check(done.stdout)
            warning = done.stderr.strip()
        else:
            times.append(took)
            cpu.append(after.ru_utime - used.ru_utime + after.ru_stime - used.ru_stime)
    return {
        "median_s": round(statistics.median(times), 3),
        "min_s": round(min(times), 3),
        "max_s": round(max(times), 3),
        "cpu_s": round(statistics.median(cpu), 3),
        "load": [round(min(loads), 2), round(max(loads), 2)],
        "stderr": warning,
    }


def in_flight_lookup(store: Any) -> dict[str, Any]:
    """What finding the runs the index does not hold yet costs: listing the newest day's
    folder on a local disk (it grows with the runs of the day); on an object store, listing
    and reading the writers' lists of runs in flight (it grows with the runs of the last
    minute)."""
    folders, _files = store.listing()
    newest = max(folder for folder in folders if DAY.fullmatch(folder))
    day_files = len(store.listing(newest)[1])
    times = []
    for _ in range(3):
        began = time.perf_counter()
        if store.lists_cheaply:
            store.listing(newest)
        else:
            lists = index_pending.pending_files(store)
            for data in store.read_many([stored.name for stored in lists]):
                assert not isinstance(data, Exception)
                index_pending.decode_pending(data)
        times.append(time.perf_counter() - began)
    return {"files": day_files, "median_s": round(statistics.median(times), 3)}


def listed(user_runs: list[str]) -> Callable[[str], None]:
    def check(output: str) -> None:
        week = _dt.datetime.now(_dt.UTC) - _dt.timedelta(days=7)
        expected = sum(1 for text in user_runs if _dt.datetime.fromisoformat(text) >= week)
        rows = [line for line in output.splitlines()[1:] if line.strip()]
        assert len(rows) == expected, (len(rows), expected, output[:500])

    return check


@contextmanager
def s3_server(buckets: list[str]) -> Iterator[dict[str, Any]]:
    """moto's S3-compatible server on 127.0.0.1, in its own process, with these buckets."""
    from tests.servers import refused_port

    port = refused_port()
    process = subprocess.Popen(
        [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    endpoint = f"http://127.0.0.1:{port}"
    try:
        import boto3

        client = boto3.client(
            "s3",
            endpoint_url=endpoint,
            aws_access_key_id="testing",
            aws_secret_access_key="testing",
            region_name="us-east-1",
        )
        for _ in range(100):
            try:
                client.list_buckets()
                break
            except Exception:
                time.sleep(0.1)
        for bucket in buckets:
            client.create_bucket(Bucket=bucket)
        yield {
            "storage_options": {
                "key": "testing",
                "secret": "testing",
                "client_kwargs": {"endpoint_url": endpoint, "region_name": "us-east-1"},
            },
            "env": {
                "AWS_ACCESS_KEY_ID": "testing",
                "AWS_SECRET_ACCESS_KEY": "testing",
                "AWS_ENDPOINT_URL": endpoint,
                "AWS_DEFAULT_REGION": "us-east-1",
            },
        }
    finally:
        process.terminate()
        process.wait(10)


class Uploads:
    """Puts files through fsspec's concurrent ``pipe``, 500 a call: one request at a time,
    uploading a store of a million rows and ten thousand runs takes minutes."""

    def __init__(self, store: FsspecStore) -> None:
        self.store = store
        self.pending: dict[str, bytes] = {}
        self.bytes = 0

    def __call__(self, name: str, data: bytes) -> None:
        self.pending[self.store.location(name)] = data
        self.bytes += len(data)
        if len(self.pending) >= 500 or self.bytes >= 64 << 20:
            self.send()

    def send(self) -> None:
        if self.pending:
            self.store.fs.pipe(self.pending)
            self.pending = {}
            self.bytes = 0


def per_run(seconds: float, runs: int) -> float:
    return seconds / runs


def index_case(
    runs: int,
    recent: int,
    now: _dt.datetime,
    folder: Path,
    s3: dict[str, Any] | None,
    bucket: str,
    days: int,
) -> dict[str, Any]:
    """One store shape, timed in a local folder and (with ``s3``) on the S3-compatible server,
    to which the local folder is copied. A store already in ``folder`` (``--keep``) is reused:
    10,000,000 runs take a quarter of an hour to make."""
    local = folder / f"runs-{recent}-{runs}-{days}d"
    described = local.with_suffix(".json")
    case: dict[str, Any] = {"recent": recent}
    if described.exists():
        store = json.loads(described.read_text(encoding="utf-8"))
        case["built_at"] = store["built_at"]
    else:
        began = time.perf_counter()
        store = build(open_store(local).write, runs, recent, now, days)
        store["built_at"] = now.isoformat()
        case["build_local_s"] = round(time.perf_counter() - began, 1)
        described.write_text(json.dumps(store), encoding="utf-8")
    case["store"] = {key: value for key, value in store.items() if key != "user_runs"}
    case["runs"], case["days"] = runs, days
    scratch = Path(tempfile.mkdtemp(prefix="agenttape-bench-"))
    case["index_local"] = time_runs(
        str(local), store["user"], {}, listed(store["user_runs"]), scratch
    )
    case["index_local"]["in_flight_lookup"] = in_flight_lookup(open_store(local))
    if s3 is not None:
        url = f"s3://{bucket}/prod"
        began = time.perf_counter()
        uploads = Uploads(FsspecStore(url, s3["storage_options"]))
        for path in sorted(local.rglob("*")):
            if path.is_file():
                uploads(path.relative_to(local).as_posix(), path.read_bytes())
        uploads.send()
        case["upload_s3_s"] = round(time.perf_counter() - began, 1)
        case["index_s3"] = time_runs(
            url, store["user"], s3["env"], listed(store["user_runs"]), scratch
        )
        case["index_s3_cold"] = time_runs(
            url, store["user"], s3["env"], listed(store["user_runs"]), scratch, cold=True
        )
        lookup = in_flight_lookup(
            open_store(url, {**s3["storage_options"], "skip_instance_cache": True})
        )
        case["index_s3"]["in_flight_lookup"] = case["index_s3_cold"]["in_flight_lookup"] = lookup
    shutil.rmtree(scratch, ignore_errors=True)
    return case


def scan_case(
    put: Callable[[str, bytes], None], store: str, env: dict[str, str], scanned: int, runs: int
) -> dict[str, Any]:
    user = build_scan(put, scanned, _dt.datetime.now(_dt.UTC))
    if hasattr(put, "send"):
        put.send()
    with tempfile.TemporaryDirectory(prefix="agenttape-bench-") as scratch:
        timed = time_runs(store, user, env, lambda output: None, Path(scratch))
    return {
        **timed,
        "runs": scanned,
        "per_run_ms": round(per_run(timed["median_s"], scanned) * 1e3, 3),
        "extrapolated_1m_7d_s": round(per_run(timed["median_s"], scanned) * runs * 7 / DAYS, 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=1_000_000)
    parser.add_argument(
        "--recent", default="10000,2000", help="run files of the last six hours, one store each"
    )
    parser.add_argument("--scan", type=int, default=20_000)
    parser.add_argument("--scan-s3", type=int, default=2_000)
    parser.add_argument("--no-s3", action="store_true")
    parser.add_argument("--days", type=int, default=DAYS, help="days the runs span")
    parser.add_argument("--no-scan", action="store_true", help="time the index alone")
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "RUN_INDEX.md")
    parser.add_argument(
        "--keep", type=Path, help="make the index stores in this folder, or reuse those there"
    )
    parser.add_argument("--timings", type=int, default=TIMINGS, help="timed runs of each listing")
    parser.add_argument("--json", type=Path, help="write the figures to this file as well")
    parser.add_argument(
        "--with",
        dest="earlier",
        type=Path,
        action="append",
        default=[],
        help="figures of an earlier run (its --json file) to show beside these",
    )
    args = parser.parse_args()
    timings.clear()
    timings.append(args.timings)
    now = _dt.datetime.now(_dt.UTC)
    sizes = [int(size) for size in args.recent.split(",")]
    results: dict[str, Any] = {"runs": args.runs, "days": args.days}
    with (
        tempfile.TemporaryDirectory(prefix="agenttape-index-bench-") as folder,
        contextlib.nullcontext(None)
        if args.no_s3
        else s3_server([SCAN_BUCKET, *(f"index-{size}" for size in sizes)]) as s3,
    ):
        if args.keep:
            args.keep.mkdir(parents=True, exist_ok=True)
        results["cases"] = [
            # Buckets apart: moto scans a whole bucket to list a folder.
            index_case(
                args.runs, size, now, args.keep or Path(folder), s3, f"index-{size}", args.days
            )
            for size in sizes
        ]
        scan_local = Path(folder, "scan")
        if not args.no_scan:
            results["scan_local"] = scan_case(
                open_store(scan_local).write, str(scan_local), {}, args.scan, args.runs
            )
        if s3 is not None and not args.no_scan:
            scan_url = f"s3://{SCAN_BUCKET}/prod"
            uploads = Uploads(FsspecStore(scan_url, s3["storage_options"]))
            results["scan_s3"] = scan_case(uploads, scan_url, s3["env"], args.scan_s3, args.runs)
    results["machine"] = (
        f"{platform.platform()}, Python {platform.python_version()}, {os.cpu_count()} CPUs"
    )
    print(json.dumps(results, indent=2))
    if args.json:
        args.json.write_text(json.dumps(results, indent=2), encoding="utf-8")
    for earlier in args.earlier:
        results["cases"] += json.loads(earlier.read_text(encoding="utf-8"))["cases"]
    args.out.write_text(report(results), encoding="utf-8")


def report(results: dict[str, Any]) -> str:
    lines = [
        "# Run index: `agenttape runs` at fleet scale",
        "",
        f"Written by `python bench/run_index.py`. Machine: {results['machine']}.",
        "",
        "Each store: its runs spread over the days given; the last six hours' runs are run "
        "files, those of the last minute not indexed yet. Command: "
        "`agenttape runs STORE --tag user_id=U --since 7d`, a new process each time, as "
        "installed (bytecode compiled), "
        f"median of {timings[0]} (least{DASH}most), after one warm-up; the process's CPU time "
        "(median) and the machine's 1-minute load average while timed (the machine's 2 cores "
        "are shared with other work). On the S3 stand-in, *warm*: the footers of past days' "
        "index files are in the user's cache folder (kept by the warm-up run); *cold*: the "
        "cache folder is empty each time. A local folder is read in place, without the cache. "
        "Target: ≤ 2 s.",
        "",
        "| store | index files | where | wall | CPU | load | finding the runs in flight |",
        "|---|---|---|---|---|---|---|",
    ]
    cases = sorted(results["cases"], key=lambda case: -case.get("runs", results["runs"]))
    for case in cases:
        runs, days = case.get("runs", results["runs"]), case.get("days", results["days"])
        store = case["store"]
        for where, key in (
            ("local folder", "index_local"),
            ("S3 stand-in (moto, 127.0.0.1), warm", "index_s3"),
            ("S3 stand-in (moto, 127.0.0.1), cold", "index_s3_cold"),
        ):
            if key not in case:
                continue
            timed, listing = case[key], case[key]["in_flight_lookup"]
            load = timed.get("load")
            lines.append(
                f"| {runs:,} runs over {days} days | {store['index_files']:,} "
                f"({store['index_bytes'] / 1e6:.0f} MB) | {where} | "
                f"{timed['median_s']:.2f} s ({timed['min_s']:.2f}{DASH}{timed['max_s']:.2f}) | "
                + (f"{timed['cpu_s']:.2f} s" if "cpu_s" in timed else DASH)
                + " | "
                + (f"{load[0]:.1f}{DASH}{load[1]:.1f}" if load else DASH)
                + f" | {listing['median_s']:.2f} s ({listing['files']:,} run files in the "
                f"newest day, {store['in_flight']} in flight) |"
            )
    lines += [
        "",
        "Finding the runs whose batch is still in flight: on a local disk, `agenttape runs` "
        "lists the newest day's folder (milliseconds for thousands of files); on an object "
        "store, where that costs a request per 1,000 files of the day, it lists `_pending/` "
        "and reads the lists writers leave there naming their runs in flight (here one list "
        "per run: a writer woken for each), while the index is fetched.",
    ]
    scans = [(where, key) for where, key in SCANS if key in results]
    if scans:
        lines += [
            "",
            "Reading the headers instead (no index), measured on a smaller store and "
            f"extrapolated to the {results['runs'] * 7 // results['days']:,} runs a 7-day "
            "listing of this store reads — not measured at that size:",
            "",
            f"| store | measured | per run | {results['runs']:,} runs, 7 days (extrapolated) |",
            "|---|---|---|---|",
        ]
    for where, key in scans:
        scan = results[key]
        lines.append(
            f"| {where} | {scan['median_s']:.2f} s for {scan['runs']:,} runs | "
            f"{scan['per_run_ms']:.2f} ms | {scan['extrapolated_1m_7d_s']:,.0f} s |"
        )
    lines.append("")
    return "\n".join(lines)


DASH = "\u2013"
SCANS = (("local folder", "scan_local"), ("S3-compatible (moto, 127.0.0.1)", "scan_s3"))


if __name__ == "__main__":
    main()
