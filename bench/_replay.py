"""Replay through httpx, shared by the scenarios that time it: the floor (httpx's own
MockTransport answering from memory), agenttape, cassetter and vcrpy on the same requests."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench import _peers
from bench._harness import Scenario, serve

JSON_HEADERS = {"Content-Type": "application/json"}


@dataclass(frozen=True)
class Call:
    method: str
    path: str
    body: bytes = b""


def floor_transport(hx: Any, interactions: list[Any]) -> Any:
    """MockTransport answering with the recorded heads and bodies, found by URL and body."""
    table = {(i.request.url, i.request.body): i.response for i in interactions}

    def handler(request: Any) -> Any:
        response = table[str(request.url), request.content]
        return hx.Response(response.status, headers=response.headers, content=response.body)

    return hx.MockTransport(handler)


def httpx_calls(base: str, calls: list[Call], floor_from: Path | None = None) -> _peers.Calls:
    """Makes ``calls`` with one httpx client, built at first use inside the worker."""
    state: dict[str, Any] = {}

    def run() -> list[bytes]:
        if "client" not in state:
            import httpx

            transport = None
            if floor_from is not None:
                transport = floor_transport(httpx, _peers.agenttape_interactions(floor_from))
            state["client"] = httpx.Client(transport=transport)
        request = state["client"].request
        return [
            request(
                call.method, base + call.path, content=call.body or None, headers=JSON_HEADERS
            ).content
            for call in calls
        ]

    return run


def record_all(work: Path, name: str, calls: list[Call]) -> str:
    """Records ``calls`` against the bench server with agenttape and cassetter, then writes
    the same interactions as vcrpy YAML; returns the server's base URL (stopped by now)."""
    with serve() as base:
        make = httpx_calls(base, calls)
        _peers.record_agenttape(work / f"{name}.msgpack", make)
        _peers.record_cassetter(work / f"{name}.cassetter.yaml", make)
    _peers.write_vcrpy(
        work / f"{name}.vcrpy.yaml", _peers.agenttape_interactions(work / f"{name}.msgpack")
    )
    (work / f"{name}.base").write_text(base)
    return base


def replay_scenario(
    scenario: Scenario,
    name: str,
    calls: list[Call],
    expected: list[bytes],
    body: bool,
    vcrpy_sample: int,
    target: float,
) -> None:
    work = scenario.dir
    if not scenario.is_worker:
        record_all(work, name, calls)
    base = (work / f"{name}.base").read_text()
    step = max(1, len(calls) // vcrpy_sample)
    cassette = work / f"{name}.msgpack"
    contestants = [
        (
            "floor",
            _peers.no_cassette,
            httpx_calls(base, calls, floor_from=cassette),
            calls,
            expected,
        ),
        ("agenttape", _peers.agenttape_opener(cassette), httpx_calls(base, calls), calls, expected),
        (
            "cassetter",
            _peers.cassetter_opener(work / f"{name}.cassetter.yaml", body=body),
            httpx_calls(base, calls),
            calls,
            expected,
        ),
        (
            "vcrpy",
            _peers.vcrpy_opener(work / f"{name}.vcrpy.yaml", body=body),
            httpx_calls(base, calls[::step]),
            calls[::step],
            expected[::step],
        ),
    ]
    for contestant, opener, run, made, want in contestants:
        note = "" if len(made) == len(calls) else f"{len(made)} requests spread over the cassette"
        time_contestant(scenario, work, contestant, opener, run, want, len(made), note)
    if scenario.is_worker:
        return
    line_against_floor(scenario, work, target)


def time_contestant(
    scenario: Scenario, work: Path, name: str, opener: Any, run: Any, want: Any, per: int, note: str
) -> None:
    """Times one contestant in processes of its own; what it got back is kept beside, for
    ``note_exactness``. vcrpy, slow, takes one process."""
    scenario.time(
        name,
        _peers.timed(opener, run, want, work / f"{name}.exact.json"),
        per=per,
        note=note,
        processes=1 if name == "vcrpy" else None,
    )


def line_against_floor(
    scenario: Scenario,
    work: Path,
    target: float,
    title: str | None = None,
    under_cassetter: bool = False,
) -> None:
    """The scenario's line in the table: agenttape and the peers as ratios to the library's
    own floor, whether agenttape's holds the target (``under_cassetter``: and is ahead of
    cassetter), and each row's exactness."""
    note_exactness(scenario, work)
    cells = scenario.ratios({c: c for c in ("agenttape", "cassetter", "vcrpy")}, "floor")
    holds = scenario.check("agenttape / floor", cells["agenttape"], target)
    wanted = f"≤ {target}x floor"
    if under_cassetter:
        wanted += ", under cassetter"
        mine, theirs = cells["agenttape"], cells["cassetter"]
        ahead = scenario.check(
            "agenttape / cassetter", mine / theirs if mine is not None and theirs else None, 1.0
        )
        holds = None if holds is None or ahead is None else holds and ahead
    floor = scenario.result.value("floor")
    scenario.line(
        str(scenario.result.number),
        title or scenario.result.title,
        f"floor {floor * 1e6:.0f} µs/request" if floor else "floor failed",
        cells,
        wanted,
        holds,
    )


def note_exactness(scenario: Scenario, work: Path) -> None:
    """Adds to each row how many of the bodies its contestant got back were byte-exact."""
    for row in scenario.result.rows:
        exact = _peers.exactness(work / f"{row.name}.exact.json")
        row.note = "; ".join(part for part in (row.note, exact) if part)
