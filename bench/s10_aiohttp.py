"""Scenario 10: replay 1,000 GETs through aiohttp, against a floor that serves the recorded
response bytes from memory through aiohttp's own connector, protocol and parser."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from bench import _peers
from bench._fixtures import item_body, item_path
from bench._harness import Scenario, serve
from bench._replay import line_against_floor, time_contestant

COUNT = 1000
TARGET = 1.2


def memory_connector(interactions: list[Any]) -> Any:
    """A connector whose connections are in-memory transports: each request written to one
    is answered with the recorded response, head and body as they came off the wire."""
    import aiohttp
    from aiohttp.client_proto import ResponseHandler

    from agenttape._adapters import wire

    answers = {}
    for interaction in interactions:
        response = interaction.response
        target = interaction.request.url.split("/", 3)[3]
        answers[f"GET /{target}"] = wire.render_head(response) + b"".join(
            wire.render_body(response, True)
        )

    class MemoryTransport(asyncio.Transport):
        def __init__(self, protocol: Any, loop: asyncio.AbstractEventLoop) -> None:
            super().__init__()
            self._protocol = protocol
            self._loop = loop
            self._sent = b""
            self._closing = False

        def write(self, data: Any) -> None:
            self._sent += bytes(data)
            end = self._sent.find(b"\r\n\r\n")
            if end < 0:
                return
            line = self._sent[: self._sent.find(b" HTTP/1.1\r\n")].decode()
            self._sent = self._sent[end + 4 :]
            self._loop.call_soon(self._protocol.data_received, answers[line])

        def writelines(self, chunks: Any) -> None:
            self.write(b"".join(chunks))

        def is_closing(self) -> bool:
            return self._closing

        def close(self) -> None:
            if not self._closing:
                self._closing = True
                self._loop.call_soon(self._protocol.connection_lost, None)

        def abort(self) -> None:
            self.close()

        def get_extra_info(self, name: str, default: Any = None) -> Any:
            return default

        def can_write_eof(self) -> bool:
            return False

        def get_write_buffer_size(self) -> int:
            return 0

        def set_write_buffer_limits(self, high: int | None = None, low: int | None = None) -> None:
            pass

        def pause_reading(self) -> None:
            pass

        def resume_reading(self) -> None:
            pass

        def is_reading(self) -> bool:
            return True

    class MemoryConnector(aiohttp.BaseConnector):
        async def _create_connection(self, req: Any, traces: Any, timeout: Any) -> Any:
            loop = asyncio.get_running_loop()
            protocol = ResponseHandler(loop)
            protocol.connection_made(MemoryTransport(protocol, loop))
            return protocol

    return MemoryConnector()


def aiohttp_calls(urls: list[str], floor_from: Path | None = None) -> _peers.Calls:
    state: dict[str, Any] = {}

    async def fetch_all() -> list[bytes]:
        if "session" not in state:
            import aiohttp

            connector = (
                memory_connector(_peers.agenttape_interactions(floor_from))
                if floor_from is not None
                else None
            )
            state["session"] = aiohttp.ClientSession(connector=connector)
        session = state["session"]
        out = []
        for url in urls:
            async with session.get(url) as response:
                out.append(await response.read())
        return out

    def run() -> list[bytes]:
        loop = state.get("loop")
        if loop is None:
            loop = state["loop"] = asyncio.new_event_loop()
        return loop.run_until_complete(fetch_all())

    return run


def record_all(work: Path, urls: list[str]) -> None:
    _peers.record_agenttape(work / "gets.msgpack", aiohttp_calls(urls))
    _peers.record_cassetter(work / "gets.cassetter.yaml", aiohttp_calls(urls))
    _peers.write_vcrpy(
        work / "gets.vcrpy.yaml", _peers.agenttape_interactions(work / "gets.msgpack")
    )


def main() -> None:
    scenario = Scenario(
        10, "Replay 1,000 GETs through aiohttp", "µs/request", "floor", "bench.s10_aiohttp"
    )
    work = scenario.dir
    paths = [item_path(i) for i in range(COUNT)]
    if not scenario.is_worker:
        with serve() as base:
            record_all(work, [base + path for path in paths])
        (work / "base").write_text(base)
    base = (work / "base").read_text()
    urls = [base + path for path in paths]
    expected = [item_body(i) for i in range(COUNT)]
    sample = slice(None, None, COUNT // 20)
    plan = [
        ("floor", _peers.no_cassette, aiohttp_calls(urls, work / "gets.msgpack"), expected),
        (
            "agenttape",
            _peers.agenttape_opener(work / "gets.msgpack"),
            aiohttp_calls(urls),
            expected,
        ),
        (
            "cassetter",
            _peers.cassetter_opener(work / "gets.cassetter.yaml"),
            aiohttp_calls(urls),
            expected,
        ),
        (
            "vcrpy",
            _peers.vcrpy_opener(work / "gets.vcrpy.yaml"),
            aiohttp_calls(urls[sample]),
            expected[sample],
        ),
    ]
    for name, opener, run, want in plan:
        note = "" if len(want) == COUNT else f"{len(want)} requests spread over the cassette"
        time_contestant(scenario, work, name, opener, run, want, len(want), note)
    if scenario.is_worker:
        return
    line_against_floor(scenario, work, TARGET, under_cassetter=True)
    scenario.finish()


if __name__ == "__main__":
    main()
