"""Scenario 11: memory held per interaction while a cassette of 20,000 interactions replays
(tracemalloc, each library in a fresh process), against the recorded bytes per interaction."""

from __future__ import annotations

import gc
import json
import subprocess
import sys
import tracemalloc
from pathlib import Path

from bench import _peers
from bench._fixtures import item_body, small_path
from bench._harness import Scenario
from bench._replay import Call, httpx_calls
from bench.s3_growth import grow

SIZE = 20_000
SMALL = 2_000  # cassetter's YAML parser cannot load 20,000
REPLAYED = {"agenttape": 200, "cassetter": 200, "vcrpy": 5}


def measure(library: str, path: Path, base: str, size: int) -> None:
    """Run in a process of its own: prints the bytes tracemalloc sees held, with the
    cassette open and its requests replayed, beyond what the process held before opening."""
    import httpx

    opener = {
        "agenttape": _peers.agenttape_opener,
        "cassetter": _peers.cassetter_opener,
        "vcrpy": _peers.vcrpy_opener,
    }[library](path)
    count = REPLAYED[library]
    picked = list(range(0, size, size // count))[:count]
    calls = httpx_calls(base, [Call("GET", small_path(i)) for i in picked])
    # The library, httpx and one replay's worth of imports, before the first snapshot.
    __import__({"agenttape": "agenttape", "cassetter": "cassetter", "vcrpy": "vcr"}[library])
    httpx.Client().close()
    gc.collect()
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    with opener():
        bodies = calls()
        gc.collect()
        held = tracemalloc.get_traced_memory()[0] - before
    exact = sum(1 for i, body in zip(picked, bodies, strict=True) if body == item_body(i, 256))
    print(json.dumps({"held": held, "exact": exact, "replayed": len(picked)}))


def prepare(work: Path) -> None:
    """200 GETs recorded for real, grown to each size and written by each library's writer,
    as in scenario 3."""
    from agenttape._core import codec, files
    from agenttape._core.meta import new_header
    from bench._harness import serve

    with serve() as base:
        _peers.record_agenttape(
            work / "recorded.msgpack",
            httpx_calls(base, [Call("GET", small_path(i)) for i in range(200)]),
        )
    (work / "base").write_text(base)
    template = _peers.agenttape_interactions(work / "recorded.msgpack")[0]
    for size in (SMALL, SIZE):
        interactions = grow(template, base, size)
        files.write_atomic(work / f"{size}.msgpack", codec.encode(new_header(), interactions))
        _peers.write_cassetter(work / f"{size}.cassetter.yaml", interactions)
        _peers.write_vcrpy(work / f"{size}.vcrpy.yaml", interactions)


def run_measure(library: str, path: Path, base: str, size: int) -> dict[str, int] | None:
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "bench.s11_memory",
            "--measure",
            library,
            str(path),
            base,
            str(size),
        ],
        capture_output=True,
        text=True,
    )
    if done.returncode != 0:
        print(done.stderr[-600:], file=sys.stderr)
        return None
    return json.loads(done.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


def main() -> None:
    if len(sys.argv) == 6 and sys.argv[1] == "--measure":
        measure(sys.argv[2], Path(sys.argv[3]), sys.argv[4], int(sys.argv[5]))
        return
    scenario = Scenario(
        11,
        "Memory held per interaction while replaying 20,000 interactions",
        "B",
        "recorded",
        "bench.s11_memory",
    )
    work = scenario.dir
    prepare(work)
    base = (work / "base").read_text()
    stored = _peers.agenttape_interactions(work / f"{SIZE}.msgpack")
    recorded = sum(
        len(i.response.body)
        + len(i.request.url)
        + sum(len(n) + len(v) for n, v in i.request.headers + i.response.headers)
        for i in stored
    ) / len(stored)
    del stored
    scenario.add("recorded", recorded, note="bytes per interaction: URL, headers and body")
    cells: dict[str, float | None] = {}
    for library, suffix in (
        ("agenttape", "msgpack"),
        ("cassetter", "cassetter.yaml"),
        ("vcrpy", "vcrpy.yaml"),
    ):
        why = ""
        for size in (SIZE, SMALL):
            result = run_measure(library, work / f"{size}.{suffix}", base, size)
            name = f"{library} {size}"
            if result is None:
                why = (
                    "cannot load: the YAML parser's budget of 250,000 nodes is breached"
                    if library == "cassetter" and size > SMALL
                    else "failed: see the log"
                )
                scenario.missing(name, why)
                continue
            per = result["held"] / size
            scenario.add(
                name,
                per,
                note=(
                    f"bytes per interaction; {result['exact']}/{result['replayed']} replayed "
                    "bodies byte-exact"
                ),
            )
            if cells.get(library) is None:
                cells[library] = per / recorded
                if size != SIZE:
                    scenario.note(f"{library}: measured at {size:,} interactions ({why})")
    mine = cells.get("agenttape")
    others = [value for key, value in cells.items() if key != "agenttape" and value is not None]
    holds = scenario.check(
        "agenttape held / best peer held",
        mine / min(others) if mine is not None and others else None,
        1.0,
    )
    scenario.line(
        "11",
        "Memory held per replayed interaction, 20,000 interactions (tracemalloc)",
        f"recorded {recorded:,.0f} B/interaction",
        cells,
        "≤ every peer",
        holds,
    )
    scenario.finish()


if __name__ == "__main__":
    main()
