"""Instructions per request, counted by valgrind: the same replays and recording as scenarios 1,
4, 8c and 10, each contestant against its floor, without the noise of a shared machine.

On a machine whose timings move by a tenth from run to run (other tenants, a hypervisor), a
change worth a few microseconds cannot be told from the noise; the instructions a request
executes can: the same run counts the same to a millionth. They are not time: a path that
touches more memory costs more than its instructions say, which ``--cache`` shows (simulated
first-level and last-level misses per request), and system calls are not counted. Each figure
is the difference between a run of ``LARGE`` and one of ``SMALL`` requests, divided by the
difference, so start-up, imports and the cassette's load cancel out; other sizes move it by a
few percent (collections and table growth fall elsewhere), so compare figures taken with the
same sizes. Needs ``valgrind`` on PATH; takes about ten minutes.

    python -m bench.instructions [--cache]
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from bench import _peers
from bench._fixtures import item_path
from bench._harness import serve
from bench._replay import Call, httpx_calls

SMALL, LARGE = 200, 1000
OUTPUT = Path(__file__).with_name("INSTRUCTIONS.md")

# scenario -> (title, contestants, the contestant the others are compared with)
SCENARIOS: dict[str, tuple[str, tuple[str, ...], str]] = {
    "httpx": (
        "Replay of GETs through httpx (scenario 1)",
        ("floor", "agenttape", "cassetter"),
        "floor",
    ),
    "urllib3": (
        "Replay of GETs through urllib3 directly (scenario 8c)",
        ("floor", "agenttape", "cassetter"),
        "floor",
    ),
    "aiohttp": (
        "Replay of GETs through aiohttp (scenario 10)",
        ("floor", "agenttape", "cassetter"),
        "floor",
    ),
    "record": ("Recording GETs through httpx (scenario 4)", ("live", "agenttape"), "live"),
}


def calls_for(scenario: str, contestant: str, urls: list[str], work: Path) -> _peers.Calls:
    from bench.s8_clients import urllib3_calls
    from bench.s10_aiohttp import aiohttp_calls

    floor = work / f"{scenario}.msgpack" if contestant == "floor" else None
    if scenario == "urllib3":
        return urllib3_calls(urls, floor)
    if scenario == "aiohttp":
        return aiohttp_calls(urls, floor)
    base, _, _ = urls[0].partition("/items")
    return httpx_calls(base, [Call("GET", url[len(base) :]) for url in urls], floor)


def opener_for(scenario: str, contestant: str, work: Path) -> _peers.Opener:
    if scenario == "record":
        if contestant == "live":
            return _peers.no_cassette
        serial = itertools.count()

        def open_new() -> contextlib.AbstractContextManager[Any]:
            import agenttape

            # A new cassette each time: one recorded over would be read and kept first.
            path = work / f"recorded-{os.getpid()}-{next(serial)}.msgpack"
            return agenttape.use_cassette(path, mode="all")

        return open_new
    if contestant == "agenttape":
        return _peers.agenttape_opener(work / f"{scenario}.msgpack")
    if contestant == "cassetter":
        return _peers.cassetter_opener(work / f"{scenario}.cassetter.yaml")
    return _peers.no_cassette


def worker(scenario: str, contestant: str, count: int, work: Path) -> None:
    """The measured process: a warm-up of 20 requests, then ``count`` more, each batch in a
    cassette (or none) opened for it."""
    base = (work / "base").read_text()
    urls = [base + item_path(i) for i in range(count)]
    opener = opener_for(scenario, contestant, work)
    warm = calls_for(scenario, contestant, urls[:20], work)
    run = calls_for(scenario, contestant, urls, work)
    with opener():
        warm()
    with opener():
        run()


def measured(scenario: str, contestant: str, count: int, work: Path, cache: bool) -> list[int]:
    """Instructions (and with ``cache``, D1 and LL misses) of one worker process."""
    tool = ["--tool=cachegrind", "--cache-sim=yes", "--cachegrind-out-file=/dev/null"]
    if not cache:
        tool = ["--tool=callgrind", "--callgrind-out-file=/dev/null"]
    command = ["valgrind", *tool, sys.executable, "-m", "bench.instructions", "--worker"]
    output = subprocess.run(
        [*command, scenario, contestant, str(count), str(work)],
        env={**os.environ, "PYTHONHASHSEED": "0"},
        capture_output=True,
        text=True,
        check=True,
        cwd=Path(__file__).parent.parent,
    ).stderr
    names = ("I\\s+refs", "D1\\s+misses", "LL\\s+misses") if cache else ("Collected",)
    found = []
    for name in names:
        match = re.search(rf"==\d+== {name}\s*:\s*([\d,]+)", output)
        if match is None:
            raise RuntimeError(f"valgrind printed no {name}:\n{output[-2000:]}")
        found.append(int(match.group(1).replace(",", "")))
    return found


def prepare(work: Path) -> None:
    """The cassettes the replays read, recorded once against the bench server."""
    from bench.s8_clients import urllib3_calls
    from bench.s10_aiohttp import aiohttp_calls

    base = (work / "base").read_text()
    urls = [base + item_path(i) for i in range(LARGE)]
    makers: dict[str, Any] = {
        "httpx": httpx_calls(base, [Call("GET", item_path(i)) for i in range(LARGE)]),
        "urllib3": urllib3_calls(urls),
        "aiohttp": aiohttp_calls(urls),
    }
    for name, make in makers.items():
        _peers.record_agenttape(work / f"{name}.msgpack", make)
        _peers.write_cassetter(
            work / f"{name}.cassetter.yaml", _peers.agenttape_interactions(work / f"{name}.msgpack")
        )


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.instructions", description=__doc__)
    parser.add_argument("--cache", action="store_true", help="simulate the caches too (slower)")
    parser.add_argument("--worker", nargs=4, metavar=("SCENARIO", "CONTESTANT", "N", "DIR"))
    args = parser.parse_args()
    if args.worker:
        scenario, contestant, count, work = args.worker
        worker(scenario, contestant, int(count), Path(work))
        return
    if shutil.which("valgrind") is None:
        parser.error("valgrind is not on PATH (Debian: apt-get install valgrind)")
    work = Path(tempfile.mkdtemp(prefix="agenttape-instructions-"))
    columns = ["instructions"] + (["D1 misses", "LL misses"] if args.cache else [])
    lines = [
        "# Instructions per request",
        "",
        f"Written by `python -m bench.instructions{' --cache' if args.cache else ''}` "
        f"(valgrind; Python {sys.version.split()[0]}): ({LARGE} - {SMALL} requests) / "
        f"{LARGE - SMALL}, so start-up and loading cancel out. Lower is better; the ratio is "
        "to the first contestant of each scenario.",
        "",
        "| scenario | contestant | " + " | ".join(columns) + " | ratio |",
        "|---|---|" + "---|" * len(columns) + "---|",
    ]
    try:
        with serve() as base:
            (work / "base").write_text(base)
            prepare(work)
            for scenario, (title, contestants, baseline) in SCENARIOS.items():
                figures: dict[str, list[float]] = {}
                for contestant in contestants:
                    small = measured(scenario, contestant, SMALL, work, args.cache)
                    large = measured(scenario, contestant, LARGE, work, args.cache)
                    figures[contestant] = [
                        (b - a) / (LARGE - SMALL) for a, b in zip(small, large, strict=True)
                    ]
                for contestant in contestants:
                    values = figures[contestant]
                    cells = " | ".join(f"{value:,.0f}" for value in values)
                    ratio = values[0] / figures[baseline][0]
                    lines.append(f"| {title} | {contestant} | {cells} | {ratio:.2f}x |")
                    print(lines[-1], flush=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    OUTPUT.write_text("\n".join(lines) + "\n")
    print(f"written: {OUTPUT}")


if __name__ == "__main__":
    main()
