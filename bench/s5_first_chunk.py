"""Scenario 5: time to the first chunk of an SSE stream while recording it; the server
pauses 200 ms between chunks, so a recorder that buffers shows at once."""

from __future__ import annotations

import contextlib
import time
from typing import Any

from bench._fixtures import SSE_EVENTS
from bench._harness import Scenario, TimeFunc, serve
from bench.s4_record import recorder

TARGET_MS = 2.0


def first_chunk(opener: Any, url: str) -> TimeFunc:
    state: dict[str, Any] = {}

    def run(loops: int) -> float:
        if "client" not in state:
            import httpx

            state["client"] = httpx.Client()
        client = state["client"]
        total = 0.0
        for _ in range(loops):
            with opener():
                start = time.perf_counter()
                with client.stream("GET", url) as response:
                    chunks = response.iter_bytes()
                    first = next(chunks)
                    total += time.perf_counter() - start
                    rest = b"".join(chunks)
            if first + rest != b"".join(SSE_EVENTS):
                raise RuntimeError("the stream came back changed")
        return total

    return run


def main() -> None:
    scenario = Scenario(
        5,
        "Time to first SSE chunk while recording (200 ms between chunks)",
        "ms",
        "off",
        "bench.s5_first_chunk",
        processes=2,
        values=3,
    )
    work = scenario.dir
    server = contextlib.nullcontext("") if scenario.is_worker else serve()
    with server as started:
        if started:
            (work / "base").write_text(started)
        url = (work / "base").read_text() + "/stream"
        for library in ("off", "agenttape", "cassetter", "vcrpy"):
            scenario.time(library, first_chunk(recorder(library, work), url))
    if scenario.is_worker:
        return
    off = scenario.result.value("off")
    cells: dict[str, float | None] = {}
    for library in ("agenttape", "cassetter", "vcrpy"):
        value = scenario.result.value(library)
        cells[library] = (value - off) * 1000 if value is not None and off is not None else None
    holds = scenario.check("agenttape - off, ms", cells["agenttape"], TARGET_MS)
    scenario.line(
        "5",
        scenario.result.title,
        f"off {off * 1000:.1f} ms" if off else "",
        cells,
        f"≤ +{TARGET_MS:g} ms",
        holds,
        style="ms",
    )
    scenario.finish()


if __name__ == "__main__":
    main()
