"""Scenario 7: a 200 MB cassette (ten 20 MB bodies): peak memory of loading it, in a fresh
process, against the file's size."""

from __future__ import annotations

import json
import resource
import sys
import time
from pathlib import Path

from bench._harness import Scenario, json_from, serve
from bench._replay import Call, httpx_calls

BODIES = 10
TARGET = 2.0
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


def main() -> None:
    if len(sys.argv) == 3 and sys.argv[1] == "--measure":
        measure(Path(sys.argv[2]))
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
    scenario.note("Peers not run here: a 200 MB YAML cassette takes either of them minutes.")
    path.unlink()
    scenario.finish()


if __name__ == "__main__":
    main()
