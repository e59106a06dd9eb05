"""Scenario 12: memory held per interaction while a cassette of 20,000 interactions replays
(tracemalloc, each library in a fresh process), against the recorded bytes per interaction."""

from __future__ import annotations

import contextlib
import gc
import json
import subprocess
import sys
import tracemalloc
from pathlib import Path
from typing import Any

from bench import _peers
from bench._fixtures import item_body, small_path
from bench._harness import Scenario
from bench._replay import Call, httpx_calls
from bench.s3_growth import grow

SIZE = 20_000
SMALL = 2_000  # cassetter's YAML parser cannot load 20,000
WARM = 10  # a cassette replayed once before measuring: the imports a replay needs
REPLAYED = {"agenttape": 200, "cassetter": 200, "vcrpy": 5}


def measure(library: str, path: Path, base: str, size: int, trace: bool) -> None:
    """Run in a process of its own: prints the bytes tracemalloc sees held (``trace``), or
    the growth of resident memory (tracemalloc off, as its own records would count), with
    the cassette open and its requests replayed, beyond what the process held before."""
    import httpx

    opener = {
        "agenttape": _peers.agenttape_opener,
        "cassetter": _peers.cassetter_opener,
        "vcrpy": _peers.vcrpy_opener,
    }[library](path)
    count = REPLAYED[library]
    picked = list(range(0, size, size // count))[:count]
    calls = httpx_calls(base, [Call("GET", small_path(i)) for i in picked])
    # The library, httpx and one replay's worth of imports, before the first snapshot: one
    # request replayed from the smaller cassette, so the modules a replay loads (code held
    # once per process, not per interaction) are not counted.
    warm = path.with_name(path.name.replace(f"{size}.", f"{WARM}.", 1))
    with _closing_opener(library, warm):
        httpx_calls(base, [Call("GET", small_path(0))])()
    httpx.Client().close()
    gc.collect()
    resident = resident_bytes()
    if trace:
        tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    with opener():
        bodies = calls()
        gc.collect()
        held = tracemalloc.get_traced_memory()[0] - before
        resident = resident_bytes() - resident
    exact = sum(1 for i, body in zip(picked, bodies, strict=True) if body == item_body(i, 256))
    print(json.dumps({"held": held, "resident": resident, "exact": exact, "replayed": len(picked)}))


def _closing_opener(library: str, path: Path) -> contextlib.AbstractContextManager[Any]:
    """The cassette at ``path``, opened for a block and closed after it (the vcrpy opener
    of the other scenarios stays open)."""
    if library == "vcrpy":
        import vcr

        return vcr.use_cassette(str(path), record_mode="none", match_on=_peers.URL_MATCH)
    opener = _peers.agenttape_opener if library == "agenttape" else _peers.cassetter_opener
    return opener(path)()


def _holds(cells: dict[str, float | None]) -> bool | None:
    """At most the recorded bytes, and at most what cassetter holds (when it loads)."""
    ours, theirs = cells.get("agenttape"), cells.get("cassetter")
    if ours is None:
        return None
    return ours <= 1.0 and (theirs is None or ours <= theirs)


def resident_bytes() -> int:
    """This process's resident memory: it counts what a library allocates outside Python's
    allocator (cassetter parses in Rust), which tracemalloc does not see."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    return 0


def prepare(work: Path) -> None:
    """200 GETs recorded for real, grown to each size and written by each library's writer,
    as in scenario 3."""
    from agenttape._core import files
    from agenttape._core.meta import new_header
    from agenttape._core.wire import codec
    from bench._harness import serve

    with serve() as base:
        _peers.record_agenttape(
            work / "recorded.msgpack",
            httpx_calls(base, [Call("GET", small_path(i)) for i in range(200)]),
        )
    (work / "base").write_text(base)
    template = _peers.agenttape_interactions(work / "recorded.msgpack")[0]
    for size in (WARM, SMALL, SIZE):
        interactions = grow(template, base, size)
        files.write_atomic(work / f"{size}.msgpack", codec.encode(new_header(), interactions))
        _peers.write_cassetter(work / f"{size}.cassetter.yaml", interactions)
        _peers.write_vcrpy(work / f"{size}.vcrpy.yaml", interactions)


def run_measure(library: str, path: Path, base: str, size: int) -> dict[str, int] | None:
    """tracemalloc's figure from one fresh process, resident growth from another."""
    result: dict[str, int] = {}
    for how in ("trace", "resident"):
        command = [sys.executable, "-m", "bench.s12_memory", "--measure", library]
        command += [str(path), base, str(size), how]
        done = subprocess.run(command, capture_output=True, text=True)
        if done.returncode != 0:
            print(done.stderr[-600:], file=sys.stderr)
            return None
        measured = json.loads(done.stdout.strip().splitlines()[-1])
        result.update(measured if how == "trace" else {"resident": measured["resident"]})
    return result


def main() -> None:
    if len(sys.argv) == 7 and sys.argv[1] == "--measure":
        library, path, base, size, how = sys.argv[2:]
        measure(library, Path(path), base, int(size), how == "trace")
        return
    scenario = Scenario(
        12,
        "Memory held per interaction while replaying 20,000 interactions",
        "B",
        "recorded",
        "bench.s12_memory",
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
                    f"bytes per interaction; resident memory (no tracemalloc) grew "
                    f"{result['resident'] / size:,.0f} B per interaction; "
                    f"{result['exact']}/{result['replayed']} replayed bodies byte-exact"
                ),
            )
            if cells.get(library) is None:
                cells[library] = per / recorded
                if size != SIZE:
                    scenario.note(f"{library}: measured at {size:,} interactions ({why})")
    scenario.note(
        "tracemalloc sees Python's allocator only: memory a library holds outside it "
        "(cassetter keeps its cassette in Rust) shows in the resident growth noted per row."
    )
    scenario.line(
        "12",
        "Memory held per replayed interaction, 20,000 interactions (tracemalloc)",
        f"recorded {recorded:,.0f} B/interaction",
        cells,
        "≤ 1x recorded, ≤ cassetter",
        _holds(cells),
    )
    scenario.finish()


if __name__ == "__main__":
    main()
