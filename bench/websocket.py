"""Scenario 9: WebSocket sessions with the websockets library's asyncio client.

9a. Replaying a 2,000-frame session (1,000 JSON text frames sent, each answered by one)
    against its floor: the same client exchanging the same frames with the same library's
    echo server in the same process over a Unix socket (no network; the server side runs
    websockets' own protocol, as any local echo does). Both open the session, exchange every
    frame and close; the replay includes opening the cassette.
9b. Time to the first server frame while recording, against the same connection unrecorded,
    to a server in another process on 127.0.0.1 (from the start of ``connect``: the
    handshake included), the median of values of 40 sessions each.

Compression is off on both sides in both measures, so neither pays for deflate.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import subprocess
import sys
import time
from typing import Any

from bench._harness import Scenario, TimeFunc

FRAMES = 1000  # sent by the client; as many come back: 2,000 frames
SESSIONS = 40  # sessions opened per timed value of 9b, so one value is not one connect
FIRST_FRAME_TARGET_MS = 2.0
REPLAY_TARGET = 1.3

SERVER = """
import asyncio, json, sys
from websockets.asyncio.server import serve

async def handler(ws):
    await ws.send(json.dumps({"type": "session.created"}))
    async for message in ws:
        event = json.loads(message)
        await ws.send(json.dumps({"type": "ack", "n": event["n"], "text": event["text"]}))

async def main():
    async with serve(handler, "127.0.0.1", 0, compression=None) as server:
        print(server.sockets[0].getsockname()[1], flush=True)
        await asyncio.get_running_loop().run_in_executor(None, sys.stdin.read)

asyncio.run(main())
"""


def event(n: int) -> str:
    return json.dumps({"type": "input_text.append", "n": n, "text": f"chunk {n} of the prompt"})


async def handler(ws: Any) -> None:
    await ws.send(json.dumps({"type": "session.created"}))
    async for message in ws:
        document = json.loads(message)
        await ws.send(json.dumps({"type": "ack", "n": document["n"], "text": document["text"]}))


async def converse(connection: Any) -> int:
    """The session: the greeting, then each event sent and its answer read."""
    async with connection as ws:
        await ws.recv()
        for n in range(FRAMES):
            await ws.send(event(n))
            await ws.recv()
    return FRAMES


def floor() -> TimeFunc:
    state: dict[str, Any] = {}

    def run(loops: int) -> float:
        from websockets.asyncio.client import unix_connect
        from websockets.asyncio.server import unix_serve

        if "loop" not in state:
            loop = asyncio.new_event_loop()
            path = f"/tmp/agenttape-bench-ws-{os.getpid()}.sock"

            async def start() -> Any:
                return await unix_serve(handler, path, compression=None)

            state["server"] = loop.run_until_complete(start())
            state["loop"], state["path"] = loop, path
        loop, path = state["loop"], state["path"]
        total = 0.0
        for _ in range(loops):
            start = time.perf_counter()
            loop.run_until_complete(converse(unix_connect(path, compression=None)))
            total += time.perf_counter() - start
        return total

    return run


def replay(cassette: str, url: str) -> TimeFunc:
    state: dict[str, Any] = {}

    def run(loops: int) -> float:
        from websockets.asyncio.client import connect

        import agenttape

        loop = state.setdefault("loop", asyncio.new_event_loop())
        total = 0.0
        for _ in range(loops):
            start = time.perf_counter()
            with agenttape.use_cassette(cassette) as tape:
                loop.run_until_complete(converse(connect(url, compression=None)))
            total += time.perf_counter() - start
            if not tape.all_played:
                raise RuntimeError("the session was not replayed whole")
        return total

    return run


def first_frame(url: str, recording: str | None) -> TimeFunc:
    state: dict[str, Any] = {}

    def run(loops: int) -> float:
        from websockets.asyncio.client import connect

        import agenttape

        loop = state.setdefault("loop", asyncio.new_event_loop())

        async def first() -> float:
            start = time.perf_counter()
            async with connect(url, compression=None) as ws:
                await ws.recv()
                return time.perf_counter() - start

        total = 0.0
        for _ in range(loops):
            with (
                agenttape.use_cassette(recording, mode="all")
                if recording is not None
                else contextlib.nullcontext()
            ):
                for _ in range(SESSIONS):
                    total += loop.run_until_complete(first())
        return total

    return run


def record(url: str, cassette: str) -> None:
    from websockets.asyncio.client import connect

    import agenttape

    with agenttape.use_cassette(cassette, mode="all"):
        asyncio.run(converse(connect(url, compression=None)))
    [interaction] = agenttape.load(cassette).interactions
    frames = interaction.frames or []
    data = [f for f in frames if f.opcode == "text"]
    if len(data) != 2 * FRAMES + 1:
        raise RuntimeError(f"recorded {len(data)} text frames, expected {2 * FRAMES + 1}")


def main() -> None:
    scenario = Scenario(
        9,
        "WebSocket session (websockets asyncio client)",
        "ms",
        "in-memory echo",
        "bench.websocket",
        processes=2,
        values=3,
    )
    work = scenario.dir
    cassette = str(work / "session.msgpack")
    server = None
    if not scenario.is_worker:
        server = subprocess.Popen(
            [sys.executable, "-c", SERVER],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        assert server.stdout is not None
        port = server.stdout.readline().strip()
        (work / "url").write_text(f"ws://127.0.0.1:{port}/v1/realtime")
        record((work / "url").read_text(), cassette)
    url = (work / "url").read_text()
    try:
        scenario.time("echo (floor)", floor())
        scenario.time("agenttape replay", replay(cassette, url))
        scenario.time("first frame, live", first_frame(url, None), per=SESSIONS, values=5)
        scenario.time(
            "first frame, recording",
            first_frame(url, str(work / "first.msgpack")),
            per=SESSIONS,
            values=5,
        )
    finally:
        if server is not None:
            assert server.stdin is not None
            server.stdin.close()
            server.wait(timeout=30)
    if scenario.is_worker:
        return
    ratio = scenario.ratios({"agenttape": "agenttape replay"}, "echo (floor)")
    echo = scenario.result.value("echo (floor)")
    scenario.line(
        "9a",
        "replay of a 2,000-frame session",
        f"echo {echo * 1000:.1f} ms" if echo else "",
        ratio,
        f"≤ {REPLAY_TARGET}x",
        scenario.check("replay / echo", ratio["agenttape"], REPLAY_TARGET),
    )
    live = scenario.result.value("first frame, live")
    recorded = scenario.result.value("first frame, recording")
    delta = (recorded - live) * 1000 if live is not None and recorded is not None else None
    scenario.line(
        "9b",
        "first server frame while recording",
        f"live {live * 1000:.2f} ms" if live else "",
        {"agenttape": delta},
        f"≤ +{FIRST_FRAME_TARGET_MS:g} ms",
        scenario.check("recording - live, ms", delta, FIRST_FRAME_TARGET_MS),
        style="ms",
    )
    scenario.note(
        "9a floor: the websockets asyncio client and a websockets echo server in one event "
        "loop over a Unix socket, exchanging the same 1,000 JSON events and 1,000 answers "
        "(compression off); the replay opens the cassette, connects, exchanges and closes."
    )
    scenario.finish()


if __name__ == "__main__":
    main()
