"""Scenario 7: a 200 MB cassette (ten 20 MB bodies): peak memory of loading it, and of
replaying every body from it, each in a fresh process, against the file's size."""

from __future__ import annotations

import json
import resource
import sys
import time
from pathlib import Path

from bench._harness import Scenario, json_from, serve
from bench._replay import Call, httpx_calls

BODIES = 10
TARGET = 1.1
REPLAY_TARGET = 0.5
"""Replay holds one body at a time (read from the file when played): a cassette larger than
memory replays."""
RUNS = 3


def peak_resident() -> int:
    """This process's peak resident memory in bytes (VmHWM: unlike ru_maxrss, not carried
    over from the parent that started it)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def measure(path: Path) -> None:
    """Run in a process of its own: prints the peak resident memory the load added."""
    import agenttape

    before = peak_resident()
    start = time.process_time()
    cassette = agenttape.load(path)
    seconds = time.process_time() - start
    after = peak_resident()
    assert len(cassette.interactions) == BODIES
    print(json.dumps({"added": after - before, "seconds": seconds}))


def measure_replay(path: Path, base: str) -> None:
    """Run in a process of its own: prints the peak resident memory that opening the
    cassette and replaying every recorded GET added, each body checked and let go before the
    next."""
    import gc
    import hashlib

    import httpx

    import agenttape

    httpx.Client().close()
    before = peak_resident()
    digests = []
    with agenttape.use_cassette(path), httpx.Client() as client:
        for i in range(BODIES):
            digests.append(hashlib.sha256(client.get(f"{base}/big/{i}").content).hexdigest())
            # httpx's response and its stream refer to each other, live or replayed: each
            # read response waits for the collector, which few allocations never start.
            gc.collect()
    after = peak_resident()
    print(json.dumps({"added": after - before, "bodies": len(set(digests))}))


def main() -> None:
    if len(sys.argv) == 3 and sys.argv[1] == "--measure":
        measure(Path(sys.argv[2]))
        return
    if len(sys.argv) == 4 and sys.argv[1] == "--replay":
        measure_replay(Path(sys.argv[2]), sys.argv[3])
        return
    scenario = Scenario(7, "Load of a 200 MB cassette: peak memory", "MB", "file", "bench.s7_big")
    work = scenario.dir
    path = work / "big.msgpack"
    with serve() as base:
        from bench import _peers

        _peers.record_agenttape(
            path, httpx_calls(base, [Call("GET", f"/big/{i}") for i in range(BODIES)])
        )
    size = path.stat().st_size
    runs = []
    for _ in range(RUNS):
        runs.append(json_from("bench.s7_big", "--measure", str(path)))
    added = max(run["added"] for run in runs)
    seconds = min(run["seconds"] for run in runs)
    scenario.add("file", float(size), note="bytes")
    scenario.add("agenttape peak added", float(added), note=f"bytes, worst of {RUNS} processes")
    scenario.add("agenttape load", seconds, note="seconds, best of the same processes")
    replays = [json_from("bench.s7_big", "--replay", str(path), base) for _ in range(RUNS)]
    replayed = max(run["added"] for run in replays)
    scenario.add(
        "agenttape replay peak added",
        float(replayed),
        note=f"bytes, worst of {RUNS} processes; {replays[0]['bodies']} distinct bodies replayed",
    )
    scenario.check("agenttape replay peak / file size", replayed / size, REPLAY_TARGET)
    ratio = added / size
    holds = scenario.check("agenttape peak / file size", ratio, TARGET)
    scenario.line(
        "7",
        scenario.result.title,
        f"file {size / 1e6:.0f} MB",
        {"agenttape": ratio, "cassetter": None, "vcrpy": None},
        f"≤ {TARGET:g}x file",
        holds,
    )
    scenario.line(
        "7b",
        "Replay of every body of the 200 MB cassette: peak memory",
        f"file {size / 1e6:.0f} MB",
        {"agenttape": replayed / size, "cassetter": None, "vcrpy": None},
        f"≤ {REPLAY_TARGET:g}x file (bodies read from the file when played)",
        replayed / size <= REPLAY_TARGET,
    )
    scenario.note("Peers not run here: a 200 MB YAML cassette takes either of them minutes.")
    path.unlink()
    scenario.finish()


if __name__ == "__main__":
    main()
