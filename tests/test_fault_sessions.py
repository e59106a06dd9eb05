"""Faults that are not HTTP answers: a WebSocket session closed by the server with a code after
N messages, and a gRPC call ended with a status. What each real client library raises must be
what it raises when a live server does the same."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import aiohttp
import grpc
import pytest
from websockets.exceptions import ConnectionClosedError
from websockets.sync.client import connect as connect_sync

try:
    from websockets.asyncio.client import connect
except ImportError:  # websockets 12: the asyncio client there is the legacy one
    from websockets.legacy.client import connect  # type: ignore[assignment]

import agenttape
from tests.cli_support import cli
from tests.grpc_support import GrpcServer, stubs
from tests.servers import WebSocketServer
from tests.websocket_support import UPDATE

pb, services = stubs()


# -- WebSocket ----------------------------------------------------------------------------------


async def until_closed(url: str, say: str) -> tuple[list[Any], str, int | None]:
    """The messages received until the server closed, the error, and its close code."""
    async with connect(url) as ws:
        got = [await ws.recv()]
        with pytest.raises(ConnectionClosedError) as caught:
            await ws.send(say)  # or the close is already there
            while True:
                got.append(await ws.recv())
    received = caught.value.rcvd
    return got, type(caught.value).__name__, received.code if received else None


def record(ws_server: WebSocketServer, path: Path) -> list[Any]:
    """A session of two server messages around one client message, recorded."""

    async def talk() -> list[Any]:
        async with connect(ws_server.url) as ws:
            got = [await ws.recv()]
            await ws.send(json.dumps(UPDATE))
            got += [await ws.recv(), await ws.recv()]
        return got

    with agenttape.use_cassette(path, mode="all"):
        live = asyncio.run(talk())
    ws_server.stop()
    return live


def test_an_injected_close_is_what_the_client_sees_when_a_live_server_closes(
    ws_server: WebSocketServer, tmp_path: Path
) -> None:
    live_path, path = tmp_path / "live.msgpack", tmp_path / "tape.msgpack"
    with agenttape.use_cassette(live_path, mode="all"):
        live = asyncio.run(until_closed(ws_server.url, "bye"))  # the server closes with 4000
    record(ws_server, path)
    item = agenttape.fault("close", after_frames=1, code=4000)
    with agenttape.use_cassette(path, mode="none", faults=[item]) as tape:
        replayed = asyncio.run(until_closed(ws_server.url, json.dumps(UPDATE)))
        [fired] = tape.faults_fired
    assert live == ([b'{"type": "session.created"}'.decode()], "ConnectionClosedError", 4000)
    assert replayed == live
    assert (fired.fault, fired.index) == (item, 0)


@pytest.mark.parametrize("after_frames", [0, 1, 2])
def test_the_close_comes_after_that_many_server_messages(
    ws_server: WebSocketServer, tmp_path: Path, after_frames: int
) -> None:
    path = tmp_path / "tape.msgpack"
    live = record(ws_server, path)
    item = agenttape.fault("close", after_frames=after_frames, code=1011)

    def talk() -> tuple[list[Any], int | None]:
        got: list[Any] = []
        with connect_sync(ws_server.url) as ws, pytest.raises(ConnectionClosedError) as caught:
            got.append(ws.recv())
            ws.send(json.dumps(UPDATE))
            while True:
                got.append(ws.recv())
        return got, caught.value.rcvd.code if caught.value.rcvd else None

    with agenttape.use_cassette(path, mode="none", faults=[item]):
        got, code = talk()
    assert got == live[:after_frames]
    assert code == 1011


def test_aiohttp_sees_the_injected_close_code(ws_server: WebSocketServer, tmp_path: Path) -> None:
    path = tmp_path / "tape.msgpack"
    live = record(ws_server, path)
    item = agenttape.fault("close", on="GET 127.0.0.1:*/v1/realtime", after_frames=2, code=1013)

    async def talk() -> tuple[list[Any], aiohttp.WSMsgType, int | None]:
        async with aiohttp.ClientSession() as http, http.ws_connect(ws_server.url) as ws:
            got = [await ws.receive_str()]
            await ws.send_str(json.dumps(UPDATE))
            got.append(await ws.receive_str())
            ending = await ws.receive()
            return got, ending.type, ws.close_code

    with agenttape.use_cassette(path, mode="none", faults=[item]):
        got, kind, code = asyncio.run(talk())
    assert got == live[:2]
    assert (kind, code) == (aiohttp.WSMsgType.CLOSE, 1013)


# -- gRPC ---------------------------------------------------------------------------------------


@pytest.fixture
def search_recorded(tmp_path: Path) -> tuple[Path, Any, Any]:
    """A cassette of one Search call, one failed live with RESOURCE_EXHAUSTED, and one Scroll;
    the server stopped."""
    path = tmp_path / "vectors.msgpack"
    server = GrpcServer()
    stub = services.VectorsStub(grpc.insecure_channel(server.target))
    with agenttape.use_cassette(path, mode="all"):
        stub.Search(pb.SearchRequest(collection="docs", limit=2))
        with pytest.raises(grpc.RpcError) as live:
            stub.Search(pb.SearchRequest(collection="full"))
        list(stub.Scroll(pb.ScrollRequest(collection="k", count=3)))
    server.stop()
    return path, stub, live.value


@pytest.mark.parametrize("code", ["RESOURCE_EXHAUSTED", "UNAVAILABLE", "DEADLINE_EXCEEDED"])
def test_an_injected_status_is_the_rpc_error_grpcio_raises(
    search_recorded: tuple[Path, Any, Any], code: str
) -> None:
    path, stub, live = search_recorded
    item = agenttape.fault("grpc_status", on="*/vectors.v1.Vectors/*", code=code)
    with agenttape.use_cassette(path, mode="none", faults=[item]) as tape:
        with pytest.raises(grpc.RpcError) as unary:
            stub.Search(pb.SearchRequest(collection="docs", limit=2))
        with pytest.raises(grpc.RpcError):
            stub.Search(pb.SearchRequest(collection="full"))
        stream = stub.Scroll(pb.ScrollRequest(collection="k", count=3))
        with pytest.raises(grpc.RpcError) as streamed:
            next(stream)
        assert [fired.index for fired in tape.faults_fired] == [0, 1, 2]
    wanted = getattr(grpc.StatusCode, code)
    for error in (unary.value, streamed.value):
        assert isinstance(error, grpc.RpcError) and isinstance(error, grpc.Call)
        assert error.code() is wanted
        assert error.details() == f"{code} (injected by agenttape)"
    if code == "RESOURCE_EXHAUSTED":  # as a live server's: the same type and code
        assert type(live).__mro__[1:] and live.code() is unary.value.code()


def test_grpc_aio_sees_the_injected_status(search_recorded: tuple[Path, Any, Any]) -> None:
    path, _, _ = search_recorded
    item = agenttape.fault("grpc_status", code="UNAVAILABLE", times=1)
    target = agenttape.load(path).interactions[0].request.url.split("/")[2]

    async def call() -> grpc.StatusCode:
        async with grpc.aio.insecure_channel(target) as channel:
            stub = services.VectorsStub(channel)
            with pytest.raises(grpc.aio.AioRpcError) as caught:
                await stub.Search(pb.SearchRequest(collection="docs", limit=2))
            return caught.value.code()

    with agenttape.use_cassette(path, mode="none", faults=[item]):
        assert asyncio.run(call()) is grpc.StatusCode.UNAVAILABLE


def test_a_code_that_is_no_status_is_named() -> None:
    from agenttape._core.faults.sessions import check

    with pytest.raises(ValueError, match="not a gRPC status"):
        check(agenttape.fault("grpc_status", code="EXHAUSTED"))
    with pytest.raises(ValueError, match="not a close code"):
        check(agenttape.fault("close", code=1006))
    check(agenttape.fault("grpc_status", code=14))
    check(agenttape.fault("close", after_frames=3))


def test_a_status_injected_while_recording_is_stored_and_shown_as_injected(
    tmp_path: Path,
) -> None:
    path = tmp_path / "vectors.msgpack"
    item = agenttape.fault("grpc_status", on="*/vectors.v1.Vectors/Scroll", code=14)
    with GrpcServer() as server:
        stub = services.VectorsStub(grpc.insecure_channel(server.target))
        with agenttape.use_cassette(path, mode="all", faults=[item]):
            stub.Search(pb.SearchRequest(collection="docs", limit=2))
            stub.Search(pb.SearchRequest(collection="docs", limit=3))
            with pytest.raises(grpc.RpcError) as caught:
                list(stub.Scroll(pb.ScrollRequest(collection="k", count=3)))
        assert [name for name, _, _ in server.servicer.seen] == ["Search", "Search"]
    assert caught.value.code() is grpc.StatusCode.UNAVAILABLE
    description = "grpc_status(code=14) on */vectors.v1.Vectors/Scroll"
    table = cli("show", path)
    assert table.returncode == 0, table.stderr
    rows = table.stdout.splitlines()
    assert "grpc UNAVAILABLE (injected)" in rows[4]  # the title, the header, two calls
    assert "(injected)" not in rows[2] + rows[3]
    assert rows[-1] == f"#2 injected: {description}"
    detail = cli("show", path, "-i", "2").stdout
    assert f"injected: {description} (a fault's answer, not the network's)" in detail
    assert "injected" not in cli("show", path, "-i", "1").stdout
    assert json.loads(cli("show", path, "--json").stdout)["interactions"][2]["injected"] == (
        description
    )
    assert f"\n    injected: {description}\n" in cli("textconv", path).stdout
    page = tmp_path / "page.html"
    assert cli("view", path, "-o", page).returncode == 0
    html = page.read_text()
    assert f'"injected": "{description}' in html or f'"injected":"{description}' in html
    assert "alert injected" in html  # the page's script shows it in the detail panel
