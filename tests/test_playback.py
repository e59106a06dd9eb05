"""The replay walk: one sequence of steps, the same whichever way a library drives it."""

from __future__ import annotations

import asyncio
import time

from agenttape._core.matching.matcher import Matcher
from agenttape._core.matching.replay_queue import ReplayQueue
from agenttape._core.models import Interaction, Request, Response
from agenttape._core.playback import Schedule, Walk


def _stream_and_tool_call() -> tuple[ReplayQueue, Interaction]:
    """A streamed answer whose second piece was sent after the client made a tool call: the
    second piece waits for that call's turn."""
    stream = Interaction(
        Request("GET", "http://127.0.0.1/events", [], b""),
        Response(200, body=b"firstsecond", chunks=[(5, 0.01), (6, 0.5)]),
        started_at=100.0,
        ttfb=0.01,
        duration=0.6,
    )
    tool_call = Interaction(
        Request("POST", "http://127.0.0.1/tool", [], b"{}"),
        Response(200, body=b"ok"),
        started_at=100.2,
        duration=0.01,
    )
    queue = ReplayQueue(Matcher())
    queue.add(stream, played=True)
    queue.add(tool_call, played=False)
    return queue, stream


def _walk(flushed: list[int]) -> tuple[Walk, ReplayQueue]:
    """The stream's walk; ``before_turn`` makes the tool call, as a client does once what
    was sent before the waiting piece reached it."""
    queue, stream = _stream_and_tool_call()
    precedents = queue.precedents(stream)
    assert precedents is not None
    schedule = Schedule.of(stream, False, precedents)

    def before_turn() -> None:
        flushed.append(len(flushed))
        queue.take(queue.key(Request("POST", "http://127.0.0.1/tool", [], b"{}")))

    return Walk.of(stream, schedule, before_turn=before_turn), queue


def test_sync_iteration_runs_before_turn_once_for_the_waiting_piece() -> None:
    flushed: list[int] = []
    walk, _queue = _walk(flushed)
    assert list(walk) == [b"first", b"second"]
    assert flushed == [0]
    assert walk.ending == "eof"


def test_async_iteration_runs_before_turn_as_sync_iteration_does() -> None:
    flushed: list[int] = []
    walk, _queue = _walk(flushed)

    async def read() -> list[bytes]:
        return [piece async for piece in walk]

    assert asyncio.run(read()) == [b"first", b"second"]
    assert flushed == [0]
    assert walk.ending == "eof"


def test_polling_runs_before_turn_once_and_hands_over_the_same_steps() -> None:
    flushed: list[int] = []
    walk, _queue = _walk(flushed)
    steps: list[object] = []
    while True:
        step = walk.poll()
        if isinstance(step, float):
            time.sleep(step)
            continue
        steps.append(step)
        if isinstance(step, str):
            break
    assert steps == [b"first", b"second", "eof"]
    assert flushed == [0]
    assert walk.poll() == "eof"
