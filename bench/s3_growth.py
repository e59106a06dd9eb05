"""Scenario 3: replay time per request must not grow with the cassette: 200 vs 20,000
interactions, the same number of requests replayed from each."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from bench import _peers
from bench._fixtures import item_body, small_path
from bench._harness import Scenario, serve
from bench._replay import Call, httpx_calls

SIZES = (200, 20_000)
REPLAYED = 200
VCRPY_REPLAYED = 5
TARGET = 1.2


def grow(template: Any, base: str, size: int) -> list[Any]:
    """``size`` interactions shaped like a recorded one, each with its own URL and body."""
    interactions = []
    for i in range(size):
        body = item_body(i, 256)
        headers = [
            (name, str(len(body)) if name.lower() == "content-length" else value)
            for name, value in template.response.headers
        ]
        interactions.append(
            dataclasses.replace(
                template,
                request=dataclasses.replace(template.request, url=base + small_path(i)),
                response=dataclasses.replace(
                    template.response,
                    headers=headers,
                    body=body,
                    chunks=[(len(body), template.response.chunks[0][1])],
                ),
            )
        )
    return interactions


def prepare(work: Path) -> None:
    """200 GETs recorded for real; the larger cassettes repeat their shape, each written by
    its own library's writer (recording 20,000 through vcrpy alone takes hours)."""
    from agenttape._core import files
    from agenttape._core.meta import new_header
    from agenttape._core.wire import codec

    with serve() as base:
        _peers.record_agenttape(
            work / "recorded.msgpack",
            httpx_calls(base, [Call("GET", small_path(i)) for i in range(SIZES[0])]),
        )
    (work / "base").write_text(base)
    template = _peers.agenttape_interactions(work / "recorded.msgpack")[0]
    for size in SIZES:
        interactions = grow(template, base, size)
        files.write_atomic(work / f"{size}.msgpack", codec.encode(new_header(), interactions))
        _peers.write_cassetter(work / f"{size}.cassetter.yaml", interactions)
        _peers.write_vcrpy(work / f"{size}.vcrpy.yaml", interactions)


def main() -> None:
    scenario = Scenario(
        3,
        "Per-request replay time, 200 vs 20,000 interactions",
        "µs/request",
        "200",
        "bench.s3_growth",
    )
    work = scenario.dir
    if not scenario.is_worker:
        prepare(work)
    base = (work / "base").read_text()
    for library in ("agenttape", "cassetter", "vcrpy"):
        for size in SIZES:
            count = VCRPY_REPLAYED if library == "vcrpy" else REPLAYED
            picked = list(range(0, size, size // count))[:count]
            calls = [Call("GET", small_path(i)) for i in picked]
            expected = [item_body(i, 256) for i in picked]
            if library == "agenttape":
                opener = _peers.agenttape_opener(work / f"{size}.msgpack")
            elif library == "cassetter":
                opener = _peers.cassetter_opener(work / f"{size}.cassetter.yaml")
            else:
                opener = _peers.vcrpy_opener(work / f"{size}.vcrpy.yaml")
            name = f"{library} {size}"
            report = work / f"{library}-{size}.exact.json"
            scenario.time(
                name,
                _peers.timed(opener, httpx_calls(base, calls), expected, report),
                per=len(calls),
                note=f"{len(calls)} requests spread over the cassette",
                processes=1 if library == "vcrpy" else 2,
                failure=(
                    "cannot load: the YAML parser's budget of 250,000 nodes is breached"
                    if library == "cassetter" and size > 2000
                    else ""
                ),
                values=2 if library == "vcrpy" else None,
            )
    if scenario.is_worker:
        return
    cells = {
        library: (scenario.ratios({"x": f"{library} {SIZES[1]}"}, f"{library} {SIZES[0]}")["x"])
        for library in ("agenttape", "cassetter", "vcrpy")
    }
    holds = scenario.check("agenttape 20,000 / 200", cells["agenttape"], TARGET)
    small = scenario.result.value(f"agenttape {SIZES[0]}")
    scenario.line(
        "3",
        scenario.result.title,
        f"each library at 200 (agenttape {small * 1e6:.0f} µs)" if small else "",
        cells,
        f"≤ {TARGET}x",
        holds,
    )
    scenario.finish()


if __name__ == "__main__":
    main()
