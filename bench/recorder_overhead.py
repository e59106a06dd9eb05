"""What the production recorder costs a service, and how much memory it holds when the store stalls.

1. Overhead: 2,000 requests made by a service-shaped loop — a pool of worker threads, each
   handling agent runs of 4 requests (a ~2 KB JSON chat call, a tool GET, ...) — against a
   local server in its own process; wall and CPU time, and each run's latency, with no
   recorder, with ``keep="errors"`` (every run recorded, healthy ones dropped at the end),
   with ``keep="all"`` (every run written to a local folder, and to the run index when
   pyarrow is installed), with ``keep="all"`` and no run index (``all-unindexed``: what the
   index costs is the difference), and, for reference, with one plain
   ``use_cassette(mode="all")`` recording everything. Target: <= 1.1 x. Measured three
   ways: with an upstream that takes 10 ms per answer and 8 threads (a service with CPU to
   spare, as one waiting on model calls is); with 16 threads against a 5 ms upstream; and
   with an upstream that answers at once. The last two keep the client's CPU (its GIL) busy
   all the time, the worst case, where every microsecond the recorder spends is a
   microsecond the service loses.
2. Memory: 1,000 runs of ~20 KB each finish while the store stalls on every write; the
   memory the recorder holds stays within its queue limit (runs past it are counted as lost).

    python bench/recorder_overhead.py [--rounds 5] [--threads 8]
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import tracemalloc
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any
from unittest import mock

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import httpx  # noqa: E402

import agenttape  # noqa: E402
from agenttape._production.index import batch as index_batch  # noqa: E402

REQUESTS = 2_000
PER_RUN = 4
CHAT = json.dumps(
    {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "model": "gpt-4o-mini",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": "word " * 360}}],
    }
).encode()


def serve() -> None:
    """The API the service talks to, in its own process so it does not share our GIL."""
    from tests.servers import Reply, Seen, Server

    def app(seen: Seen) -> Reply:
        headers = [("Content-Type", "application/json")]
        if seen.path.startswith("/big"):
            return Reply(headers=headers, chunks=[b"z" * 20_000])
        # /slowN/...: the upstream takes N ms to answer, as a real tool or model does.
        first = seen.path.split("/")[1]
        stall = int(first[4:]) / 1000 if first.startswith("slow") else 0.0
        return Reply(headers=headers, chunks=[CHAT], stall=stall)

    server = Server(app)
    print(server.url, flush=True)
    sys.stdin.read()
    server.stop()


def start_server() -> tuple[subprocess.Popen[str], str]:
    process = subprocess.Popen(
        [sys.executable, __file__, "--serve"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        cwd=ROOT,
    )
    assert process.stdout is not None
    return process, process.stdout.readline().strip()


def agent_run(client: httpx.Client, url: str, number: int) -> None:
    """One agent run: a chat call, a tool lookup, a follow-up chat call, a status check."""
    prompt = {
        "model": "gpt-4o-mini",
        "messages": [{"role": "user", "content": f"order {number} " * 100}],
    }
    client.post(f"{url}/v1/chat/completions", json=prompt).raise_for_status()
    client.get(f"{url}/tools/orders/{number}").raise_for_status()
    client.post(f"{url}/v1/chat/completions", json={**prompt, "step": 2}).raise_for_status()
    client.get(f"{url}/status?run={number}").raise_for_status()


def workload(
    url: str, threads: int, variant: str, folder: Path
) -> tuple[float, float, list[float]]:
    """Wall and CPU time (all threads of this process) for REQUESTS requests, as runs handled
    by a pool of worker threads, and each run's latency. The recorder's writer is flushed
    after the timing: the service never waits for it."""
    runs = REQUESTS // PER_RUN
    recorder = None
    if variant == "all-unindexed":
        with mock.patch.object(index_batch, "can_write", lambda: False):
            recorder = agenttape.Recorder(folder, keep="all")
    elif variant not in ("off", "cassette"):
        recorder = agenttape.Recorder(folder, keep=variant)
    tape = agenttape.use_cassette(folder / "tape.msgpack", mode="all")

    with httpx.Client(limits=httpx.Limits(max_connections=threads)) as client:
        latencies: list[float] = []

        def handle(number: int) -> None:
            start = time.perf_counter()
            if recorder is None:
                agent_run(client, url, number)
            else:
                with recorder.run(request_number=number, tenant_id="t_3"):
                    agent_run(client, url, number)
            latencies.append(time.perf_counter() - start)

        for number in range(threads):  # connections and imports warm
            agent_run(client, url, -1 - number)
        latencies.clear()
        with ThreadPoolExecutor(threads) as pool:
            if variant == "cassette":
                tape.__enter__()
            start, cpu = time.perf_counter(), time.process_time()
            list(pool.map(handle, range(runs)))
            elapsed, cpu = time.perf_counter() - start, time.process_time() - cpu
            if variant == "cassette":
                tape.__exit__(None, None, None)
    if recorder is not None:
        recorder.close()
        stats = recorder.stats
        assert stats.lost == 0, stats
        assert stats.written == (runs if variant.startswith("all") else 0), stats
    return elapsed, cpu, latencies


VARIANTS = ("off", "errors", "all", "all-unindexed", "cassette")


def overhead(url: str, rounds: int, threads: int) -> dict[str, Any]:
    """Variants alternate within each round, so load from elsewhere hits them alike; the
    ratios are medians of per-round ratios to that round's run without recording."""
    wall: dict[str, list[float]] = {variant: [] for variant in VARIANTS}
    cpu: dict[str, list[float]] = {variant: [] for variant in VARIANTS}
    p50: dict[str, list[float]] = {variant: [] for variant in VARIANTS}
    p99: dict[str, list[float]] = {variant: [] for variant in VARIANTS}
    with tempfile.TemporaryDirectory() as folder:
        for round_number in range(rounds + 1):
            for variant in VARIANTS:
                gc.collect()
                target = Path(folder, f"{variant}{round_number}")
                elapsed, used, latencies = workload(url, threads, variant, target)
                if round_number:  # round 0 warms everything up
                    wall[variant].append(elapsed)
                    cpu[variant].append(used)
                    cuts = statistics.quantiles(latencies, n=100)
                    p50[variant].append(cuts[49])
                    p99[variant].append(cuts[98])

    def ratios(times: dict[str, list[float]]) -> dict[str, float]:
        return {
            variant: round(
                statistics.median(t / o for t, o in zip(times[variant], times["off"], strict=True)),
                3,
            )
            for variant in VARIANTS[1:]
        }

    def spread(times: dict[str, list[float]]) -> dict[str, list[float]]:
        """The lowest and highest per-round ratio: how far one round's figure can stray."""
        return {
            variant: [
                round(min(t / o for t, o in zip(times[variant], times["off"], strict=True)), 3),
                round(max(t / o for t, o in zip(times[variant], times["off"], strict=True)), 3),
            ]
            for variant in VARIANTS[1:]
        }

    return {
        "requests": REQUESTS,
        "runs": REQUESTS // PER_RUN,
        "threads": threads,
        "rounds": rounds,
        "wall_ratio": ratios(wall),
        "wall_ratio_per_round_range": spread(wall),
        "cpu_ratio": ratios(cpu),
        "median_wall_us_per_request": {
            variant: round(statistics.median(times) / REQUESTS * 1e6, 1)
            for variant, times in wall.items()
        },
        "median_cpu_us_per_request": {
            variant: round(statistics.median(times) / REQUESTS * 1e6, 1)
            for variant, times in cpu.items()
        },
        # How busy the client's CPU was without a recorder: near or over 1.0 is saturated.
        "cpu_busy_without_recorder": round(
            statistics.median(c / w for c, w in zip(cpu["off"], wall["off"], strict=True)), 2
        ),
        "run_latency_ms": {
            variant: {
                "p50": round(statistics.median(p50[variant]) * 1e3, 2),
                "p99": round(statistics.median(p99[variant]) * 1e3, 2),
            }
            for variant in VARIANTS
        },
        "p50_latency_ratio": ratios(p50),
        "p99_latency_ratio": ratios(p99),
    }


def stalled_store_memory(url: str, threads: int) -> dict[str, Any]:
    import fsspec
    from fsspec.implementations.memory import MemoryFileSystem

    gate = threading.Event()

    class StallingFileSystem(MemoryFileSystem):
        protocol = "benchstall"
        store: dict[str, Any] = {}  # noqa: RUF012
        pseudo_dirs = [""]  # noqa: RUF012

        def pipe_file(self, path: str, value: bytes, *args: Any, **kwargs: Any) -> None:
            gate.wait()
            super().pipe_file(path, value, *args, **kwargs)

    fsspec.register_implementation("benchstall", StallingFileSystem, clobber=True)
    limit = 4 * 1024 * 1024
    runs = 1_000
    recorder = agenttape.Recorder("benchstall://runs", keep="all", max_queue_bytes=limit)
    with httpx.Client() as client:
        client.get(f"{url}/big/warm")
        gc.collect()
        tracemalloc.start()
        baseline = tracemalloc.get_traced_memory()[0]

        def handle(number: int) -> None:
            with recorder.run(n=number):
                client.get(f"{url}/big/{number}").raise_for_status()

        start = time.perf_counter()
        with ThreadPoolExecutor(threads) as pool:
            list(pool.map(handle, range(runs)))
        elapsed = time.perf_counter() - start
        gc.collect()
        held = tracemalloc.get_traced_memory()[0] - baseline
        peak = tracemalloc.get_traced_memory()[1] - baseline
        tracemalloc.stop()
    stats = recorder.stats
    gate.set()
    recorder.close()
    return {
        "runs": runs,
        "bytes_per_run": 20_000,
        "bytes_recorded_total": runs * 20_000,
        "queue_limit": limit,
        "queued_bytes_while_stalled": stats.queued_bytes,
        "traced_memory_held_while_stalled": held,
        "traced_memory_peak": peak,
        "kept": stats.kept,
        "dropped_as_lost": stats.dropped,
        "written_after_release": recorder.stats.written,
        "wall_s_while_stalled": round(elapsed, 3),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--threads", type=int, default=8)
    parser.add_argument("--serve", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve:
        serve()
        return
    process, url = start_server()
    try:
        results = {
            "overhead_with_10ms_upstream": overhead(f"{url}/slow10", args.rounds, args.threads),
            "overhead_with_5ms_upstream_saturated": overhead(f"{url}/slow5", args.rounds, 16),
            "overhead_saturated": overhead(url, args.rounds, args.threads),
            "stalled_store": stalled_store_memory(url, args.threads),
            "cpus": os.cpu_count(),
        }
    finally:
        assert process.stdin is not None
        process.stdin.close()
        process.wait(10)
    print(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
