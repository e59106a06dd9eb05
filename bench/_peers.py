"""The contestants: how each library records, loads, saves and replays, in one place.

Every import happens inside a function, so a worker process only ever imports the library it
times (and the floor imports none of them).
"""

from __future__ import annotations

import contextlib
import gc
import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench._harness import TimeFunc

Calls = Callable[[], list[bytes]]
Opener = Callable[[], contextlib.AbstractContextManager[Any]]

URL_MATCH = ["method", "scheme", "host", "port", "path", "query"]


# -- recording (untimed preparation) --------------------------------------------------------


def record_agenttape(path: Path, calls: Callable[[], Any]) -> None:
    import agenttape

    with agenttape.use_cassette(path, mode="all"):
        calls()


def record_cassetter(path: Path, calls: Callable[[], Any]) -> None:
    import cassetter

    with cassetter.use_cassette(path, record_mode="all"):
        calls()


def agenttape_interactions(path: Path) -> list[Any]:
    import agenttape

    return list(agenttape.load(path).interactions)


def write_vcrpy(path: Path, interactions: list[Any]) -> None:
    """The same interactions in vcrpy's own YAML, written by vcrpy's serializer (recording
    them through vcrpy costs minutes: each recorded request scans every earlier one)."""
    from vcr.cassette import Cassette
    from vcr.record_mode import RecordMode
    from vcr.request import Request

    cassette = Cassette(str(path), record_mode=RecordMode.ALL)
    for interaction in interactions:
        request, response = interaction.request, interaction.response
        headers: dict[str, list[str]] = {}
        for name, value in response.headers:
            headers.setdefault(name, []).append(value)
        cassette.append(
            Request(request.method, request.url, request.body or None, dict(request.headers)),
            {
                "status": {"code": response.status, "message": response.reason},
                "headers": headers,
                "body": {"string": response.body},
            },
        )
    cassette._save(force=True)


def write_cassetter(path: Path, interactions: list[Any]) -> None:
    """The same interactions in cassetter's YAML, through cassetter's own record path."""
    from cassetter import Cassette, RecordMode

    cassette = Cassette(str(path), record_mode=RecordMode.ALL)
    cassette.load()
    for interaction in interactions:
        request, response = interaction.request, interaction.response
        cassette.record(
            method=request.method,
            uri=request.url,
            request_headers=_multi(request.headers),
            request_body=request.body,
            status=response.status,
            response_headers=_multi(response.headers),
            response_body=response.body,
            order=cassette.reserve_record_order(),
            expected=None,
        )
    cassette.save()


def _multi(headers: list[tuple[str, str]]) -> dict[str, list[str]]:
    result: dict[str, list[str]] = {}
    for name, value in headers:
        result.setdefault(name, []).append(value)
    return result


# -- replay ----------------------------------------------------------------------------------


def agenttape_opener(path: Path, **options: Any) -> Opener:
    def open_() -> contextlib.AbstractContextManager[Any]:
        import agenttape

        return agenttape.use_cassette(path, **options)

    return open_


def cassetter_opener(path: Path, body: bool = False) -> Opener:
    def open_() -> contextlib.AbstractContextManager[Any]:
        import cassetter

        match_on = ["method", "uri", "body"] if body else None
        return cassetter.use_cassette(path, record_mode="none", match_on=match_on)

    return open_


def vcrpy_opener(path: Path, body: bool = False) -> Opener:
    """Opened once per worker and kept open (playback repeats on): loading the YAML again
    for every measurement would cost more than the measurement."""
    state: dict[str, Any] = {}

    def open_() -> contextlib.AbstractContextManager[Any]:
        if "stack" not in state:
            import vcr

            stack = contextlib.ExitStack()
            stack.enter_context(
                vcr.use_cassette(
                    str(path),
                    record_mode="none",
                    allow_playback_repeats=True,
                    match_on=[*URL_MATCH, "body"] if body else URL_MATCH,
                )
            )
            state["stack"] = stack
        return contextlib.nullcontext()

    return open_


def no_cassette() -> contextlib.AbstractContextManager[Any]:
    return contextlib.nullcontext()


def timed(opener: Opener, calls: Calls, expected: list[bytes], report: Path) -> TimeFunc:
    """``calls`` inside a freshly opened cassette per measurement; opening is not timed.

    Replay never waits on I/O, so the clock is the process's CPU time: on a machine shared
    with other work, wall-clock figures measure the neighbours as much as the code. Opening
    leaves the garbage collector as much to do as it created (the previous cassette freed,
    the new one read); a collection before the clock starts keeps that work out of the
    timed calls, for every contestant alike, instead of billing it to whichever one the
    collector's thresholds happen to fall in. Writes to ``report`` how many replayed bodies
    came back byte-exact, so the table can say which contestant served the recorded bytes.
    """

    def run(loops: int) -> float:
        total = 0.0
        bodies: list[bytes] = []
        for _ in range(loops):
            with opener():
                gc.collect()
                start = time.process_time()
                bodies = calls()
                total += time.process_time() - start
        exact = sum(1 for got, want in zip(bodies, expected, strict=False) if got == want)
        report.write_text(json.dumps({"exact": exact, "total": len(expected)}))
        return total

    return run


def exactness(report: Path) -> str:
    if not report.exists():
        return ""
    data = json.loads(report.read_text())
    if data["exact"] == data["total"]:
        return "bodies byte-exact"
    return f"{data['exact']}/{data['total']} bodies byte-exact"
