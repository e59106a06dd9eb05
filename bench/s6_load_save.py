"""Scenario 6: the 2,000-interaction cassette of scenario 1: load time in a fresh process,
save time, and file size, against the same interactions in cassetter's and vcrpy's files."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from bench._fixtures import item_path
from bench._harness import Scenario, TimeFunc
from bench._replay import Call, record_all

COUNT = 2000
LOAD_TARGET = 0.2
SAVE_TARGET = 1.0
SIZE_TARGET = 1.0
FILES = {"agenttape": "s1.msgpack", "cassetter": "s1.cassetter.yaml", "vcrpy": "s1.vcrpy.yaml"}


def load(library: str, path: Path) -> Any:
    if library == "agenttape":
        import agenttape

        return agenttape.load(path)
    if library == "cassetter":
        from cassetter import Cassette, RecordMode

        cassette = Cassette(str(path), record_mode=RecordMode.NONE)
        cassette.load()
        return cassette
    from vcr.cassette import Cassette

    return Cassette.load(path=str(path))


def save(library: str, cassette: Any, path: Path) -> None:
    """Each library's own write of a loaded cassette to a new file."""
    if library == "agenttape":
        cassette.path = path
        cassette.save()
    elif library == "cassetter":
        cassette._path = str(path)
        cassette._dirty = True
        cassette.save()
    else:
        cassette._path = str(path)
        cassette._save(force=True)


def import_library(library: str) -> None:
    """What each library's ``load`` runs on, imported before the timing starts. agenttape
    imports its cassette module on first use of ``agenttape.load``, not with ``agenttape``:
    naming it here imports it, as ``import vcr.cassette`` does vcrpy's."""
    if library == "agenttape":
        from agenttape import load  # noqa: F401
    elif library == "cassetter":
        import cassetter  # noqa: F401
    else:
        import vcr.cassette  # noqa: F401


def timed_load(library: str, path: Path) -> TimeFunc:
    """The first load in a fresh process (one value per worker); imports are not timed."""

    def run(loops: int) -> float:
        import_library(library)
        total = 0.0
        for _ in range(loops):
            start = time.process_time()
            load(library, path)
            total += time.process_time() - start
        return total

    return run


def timed_save(library: str, path: Path, out: Path) -> TimeFunc:
    """Wall clock: writing is I/O (agenttape also fsyncs the file and its folder)."""

    def run(loops: int) -> float:
        cassette = load(library, path)
        total = 0.0
        for _ in range(loops):
            start = time.perf_counter()
            save(library, cassette, out)
            total += time.perf_counter() - start
        return total

    return run


def main() -> None:
    scenario = Scenario(
        6,
        "Cassette of 2,000 interactions: load, save, size",
        "ms",
        "cassetter",
        "bench.s6_load_save",
        processes=2,
        values=3,
    )
    work = scenario.dir
    if not scenario.is_worker:
        record_all(work, "s1", [Call("GET", item_path(i)) for i in range(COUNT)])
    for library, name in FILES.items():
        scenario.time(
            f"load {library}",
            timed_load(library, work / name),
            processes=6 if library != "vcrpy" else 2,
            values=1,
            warmups=0,
            note="first load in a fresh process",
        )
    for library, name in FILES.items():
        scenario.time(
            f"save {library}",
            timed_save(library, work / name, work / f"saved-{name}"),
            processes=1,
            values=3 if library != "vcrpy" else 2,
        )
    if scenario.is_worker:
        return
    for library, name in FILES.items():
        scenario.add(f"size {library}", float((work / name).stat().st_size), note="bytes")
    libraries = ("agenttape", "cassetter", "vcrpy")
    for kind, over, target, label in (
        ("load", "cassetter", LOAD_TARGET, "6a"),
        ("save", "cassetter", SAVE_TARGET, "6b"),
        ("size", "vcrpy", SIZE_TARGET, "6c"),
    ):
        cells = scenario.ratios({c: f"{kind} {c}" for c in libraries}, f"{kind} {over}")
        holds = scenario.check(f"agenttape {kind} / {over} {kind}", cells["agenttape"], target)
        base = scenario.result.value(f"{kind} {over}")
        shown = (
            f"{base / 1e6:.1f} MB"
            if kind == "size" and base
            else f"{base * 1000:.0f} ms"
            if base
            else "failed"
        )
        scenario.line(
            label,
            {
                "load": "Load in a fresh process",
                "save": "Save",
                "size": "File size",
            }[kind],
            f"{over} {shown}",
            cells,
            f"≤ {target:g}x {over}",
            holds,
        )
    scenario.finish()


if __name__ == "__main__":
    main()
