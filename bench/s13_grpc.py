"""Scenario 13: gRPC calls with grpcio.

13a. Replaying 2,000 unary calls (2,000 different requests, each answered by a 256-byte
     message) on a sync channel, against grpcio's own in-process floor: the same client
     calling a grpcio server in the same process that answers from memory, over 127.0.0.1.
     The replay includes opening the cassette; the server is gone.
13b. The same on a ``grpc.aio`` channel, beside cassetter (which records ``grpc.aio``
     channels only, made while its cassette is active).
13c. Recording the 2,000 calls against making them live (sync), and 13d on ``grpc.aio``
     beside cassetter.

Messages are protobuf's own ``StringValue`` (requests) and ``BytesValue`` (answers), so no
code generation runs and every contestant serializes the same way.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import os
import time
from concurrent import futures
from typing import Any

from bench._harness import Scenario, TimeFunc

CALLS = int(os.environ.get("BENCH_GRPC_CALLS", "2000"))
METHOD = "/bench.Vectors/Search"
REPLAY_TARGET = 3.0
RECORD_TARGET = 1.5
ANSWER = bytes(range(256))


def _messages() -> tuple[Any, Any]:
    from google.protobuf import wrappers_pb2

    return wrappers_pb2.StringValue, wrappers_pb2.BytesValue


def start_server() -> tuple[Any, str]:
    """grpcio's server in this process, answering every call from memory."""
    import grpc

    request_type, answer_type = _messages()
    answer = answer_type(value=ANSWER)

    def search(request: Any, context: Any) -> Any:
        return answer

    handler = grpc.method_handlers_generic_handler(
        "bench.Vectors",
        {
            "Search": grpc.unary_unary_rpc_method_handler(
                search,
                request_deserializer=request_type.FromString,
                response_serializer=answer_type.SerializeToString,
            )
        },
    )
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
    server.add_generic_rpc_handlers((handler,))
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    return server, f"127.0.0.1:{port}"


def _stub(channel: Any) -> Any:
    request_type, answer_type = _messages()
    return channel.unary_unary(
        METHOD,
        request_serializer=request_type.SerializeToString,
        response_deserializer=answer_type.FromString,
    )


def calls_sync(target: str) -> None:
    import grpc

    request_type, _ = _messages()
    with grpc.insecure_channel(target) as channel:
        search = _stub(channel)
        for n in range(CALLS):
            if search(request_type(value=f"query {n}")).value != ANSWER:
                raise RuntimeError("wrong answer")


async def calls_aio(target: str) -> None:
    import grpc

    request_type, _ = _messages()
    async with grpc.aio.insecure_channel(target) as channel:
        search = _stub(channel)
        for n in range(CALLS):
            if (await search(request_type(value=f"query {n}"))).value != ANSWER:
                raise RuntimeError("wrong answer")


def _tape(peer: str, path: str, mode: str) -> Any:
    if peer == "cassetter":
        import cassetter

        return cassetter.use_cassette(
            path, record_mode="all" if mode == "all" else "none", intercept=["grpc"]
        )
    import agenttape

    return agenttape.use_cassette(path, mode=mode)


def timed(
    peer: str | None,
    aio: bool,
    target: str | None,
    cassette: str | None,
    mode: str,
    cpu: bool = False,
) -> TimeFunc:
    """Seconds for ``loops`` rounds of the 2,000 calls: live (``peer`` None, against a
    server this worker starts), or under ``peer``'s cassette. ``cpu``: the process's CPU
    time (the in-process server's threads included), which other work on a shared machine
    inflates less than the wall clock; replays and their floor are measured so, recordings
    and live calls on the wall clock."""
    clock = time.process_time if cpu else time.perf_counter
    state: dict[str, Any] = {}

    def run(loops: int) -> float:
        address = target
        if address is None:
            if "server" not in state:
                state["server"], state["target"] = start_server()
            address = state["target"]
        total = 0.0
        for number in range(loops):
            path = cassette
            if mode == "all":
                path = f"{cassette}.{os.getpid()}.{number}"
            gc.collect()
            start = clock()
            with _tape(peer, path, mode) if peer else contextlib.nullcontext():
                if aio:
                    asyncio.run(calls_aio(address))
                else:
                    calls_sync(address)
            total += clock() - start
        return total

    return run


def record_all(work: Any) -> str:
    """The cassettes replayed in 13a and 13b, recorded from a server since stopped."""
    server, target = start_server()
    try:
        with _tape("agenttape", str(work / "sync.msgpack"), "all"):
            calls_sync(target)
        with _tape("agenttape", str(work / "aio.msgpack"), "all"):
            asyncio.run(calls_aio(target))
        try:
            with _tape("cassetter", str(work / "aio.cassetter.yaml"), "all"):
                asyncio.run(calls_aio(target))
        except ImportError:
            pass
    finally:
        server.stop(None).wait()
    return target


def main() -> None:
    scenario = Scenario(
        13,
        "gRPC unary calls (grpcio)",
        "ms",
        "in-process server",
        "bench.s13_grpc",
        processes=2,
        values=3,
    )
    work = scenario.dir
    if not scenario.is_worker:
        (work / "target").write_text(record_all(work))
    target = (work / "target").read_text()
    try:
        import cassetter  # noqa: F401

        has_cassetter = (work / "aio.cassetter.yaml").exists()
    except ImportError:
        has_cassetter = False
    sync, aio_ = str(work / "sync.msgpack"), str(work / "aio.msgpack")
    scenario.time("sync floor", timed(None, False, None, None, "none", cpu=True))
    scenario.time("agenttape replay, sync", timed("agenttape", False, target, sync, "none", True))
    scenario.time("sync live", timed(None, False, None, None, "none"))
    scenario.time("agenttape record, sync", timed("agenttape", False, None, str(work / "r"), "all"))
    scenario.time("aio floor", timed(None, True, None, None, "none", cpu=True))
    scenario.time("agenttape replay, aio", timed("agenttape", True, target, aio_, "none", True))
    scenario.time("aio live", timed(None, True, None, None, "none"))
    scenario.time("agenttape record, aio", timed("agenttape", True, None, str(work / "ra"), "all"))
    if has_cassetter:
        yaml = str(work / "aio.cassetter.yaml")
        scenario.time("cassetter replay, aio", timed("cassetter", True, target, yaml, "none", True))
        scenario.time(
            "cassetter record, aio", timed("cassetter", True, None, str(work / "rc.yaml"), "all")
        )
    else:
        scenario.missing("cassetter replay, aio", "cassetter is not installed")
        scenario.missing("cassetter record, aio", "cassetter is not installed")
    if scenario.is_worker:
        return
    lines: tuple[tuple[str, str, str, str, dict[str, str], float], ...] = (
        (
            "13a",
            "replay of 2,000 unary calls (sync channel)",
            "sync floor",
            "grpcio",
            {"agenttape": "agenttape replay, sync"},
            REPLAY_TARGET,
        ),
        (
            "13b",
            "replay of 2,000 unary calls (grpc.aio)",
            "aio floor",
            "grpcio",
            {"agenttape": "agenttape replay, aio", "cassetter": "cassetter replay, aio"},
            REPLAY_TARGET,
        ),
        (
            "13c",
            "recording 2,000 unary calls (sync channel)",
            "sync live",
            "live",
            {"agenttape": "agenttape record, sync"},
            RECORD_TARGET,
        ),
        (
            "13d",
            "recording 2,000 unary calls (grpc.aio)",
            "aio live",
            "live",
            {"agenttape": "agenttape record, aio", "cassetter": "cassetter record, aio"},
            RECORD_TARGET,
        ),
    )
    for label, title, baseline, shown, peers, bar in lines:
        measured = scenario.result.value(baseline)
        cells = scenario.ratios(peers, baseline)
        measure = peers["agenttape"].replace("agenttape ", "").split(", ")
        scenario.line(
            label,
            title,
            f"{shown} {measured * 1000:.0f} ms" if measured else "",
            cells,
            f"≤ {bar:g}x",
            scenario.check(
                f"{measure[0]} / {baseline.split()[1]}, {measure[1]}", cells["agenttape"], bar
            ),
        )
    scenario.note(
        "13 floor: grpcio's client calling a grpcio server in the same process over "
        "127.0.0.1 that answers every call from memory; the replays run with that server "
        "stopped and include opening the cassette; replays and floors are CPU time of the "
        "process (the server's threads included), recordings and live calls wall clock, "
        "recording includes writing the cassette. cassetter "
        "records grpc.aio channels only, and replays without the recorded metadata."
    )
    scenario.finish()


if __name__ == "__main__":
    main()
