"""httpx-ws sessions (``connect_ws``, ``aconnect_ws``): recorded frame by frame against a
real server, replayed with the server stopped, compared byte for byte."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest
from httpx_ws import (
    WebSocketDisconnect,
    WebSocketNetworkError,
    WebSocketUpgradeError,
    aconnect_ws,
    connect_ws,
)

import agenttape
from tests.servers import App, Server, WebSocketServer, refused_port
from tests.websocket_support import AUDIO, REFUSAL, UPDATE, conversation, refusing_server


def _version(distribution: str) -> tuple[int, ...]:
    from importlib import metadata

    return tuple(int(part) for part in metadata.version(distribution).split(".")[:2])


def http_url(ws_server: WebSocketServer) -> str:
    return ws_server.url.replace("ws://", "http://", 1)


def talk(url: str, update: dict[str, Any] = UPDATE) -> list[Any]:
    """A session the client closes with 4001 ``done``."""
    with httpx.Client() as client, connect_ws(url, client) as ws:
        got: list[Any] = [ws.receive_text()]
        ws.send_text(json.dumps(update))
        got += [ws.receive_text(), ws.receive_text()]
        ws.send_bytes(AUDIO)
        got.append(ws.receive_bytes())
        ws.close(4001, "done")
    return got


async def talk_async(url: str) -> list[Any]:
    async with httpx.AsyncClient() as client, aconnect_ws(url, client) as ws:
        got: list[Any] = [await ws.receive_text()]
        await ws.send_text(json.dumps(UPDATE))
        got += [await ws.receive_text(), await ws.receive_text()]
        await ws.send_bytes(AUDIO)
        got.append(await ws.receive_bytes())
        await ws.close(4001, "done")
    return got


def expected_frames() -> list[tuple[str, str, bytes, bool]]:
    # The binary answer is one frame, however many reads it took.
    return [
        *((*frame, True) for frame in conversation()),
        ("client", "close", b"\x0f\xa1done", True),
    ]


CLOSE_ECHO = ("server", "close", b"\x0f\xa1done", True)


def frames_of(path: Path) -> list[tuple[str, str, bytes, bool]]:
    """The session's frames; the server's echo of the client's close left out. httpx-ws
    closes the connection right after its close frame, so whether the echo was read before
    that is a race the recording tells truthfully."""
    [interaction] = agenttape.load(path).interactions
    assert interaction.frames is not None
    frames = [(f.direction, f.opcode, f.payload, f.fin) for f in interaction.frames]
    return frames[:-1] if frames[-1] == CLOSE_ECHO else frames


def test_connect_ws_records_every_frame_and_replays_offline(
    ws_server: WebSocketServer, cassette_path: Path
) -> None:
    url = http_url(ws_server)
    with agenttape.use_cassette(cassette_path, mode="once"):
        live = talk(url)
    ws_server.stop()
    assert frames_of(cassette_path) == expected_frames()
    [interaction] = agenttape.load(cassette_path).interactions
    assert interaction.response is not None and interaction.response.status == 101
    assert interaction.closed is not None
    assert (interaction.closed.code, interaction.closed.reason, interaction.closed.by) == (
        4001,
        "done",
        "client",
    )
    with agenttape.use_cassette(cassette_path) as tape:
        replayed = talk(url)
    assert replayed == live
    assert replayed[3] == AUDIO[::-1]
    assert tape.all_played


def test_aconnect_ws_records_and_replays(ws_server: WebSocketServer, cassette_path: Path) -> None:
    url = http_url(ws_server)
    with agenttape.use_cassette(cassette_path, mode="once"):
        live = asyncio.run(talk_async(url))
    ws_server.stop()
    assert frames_of(cassette_path) == expected_frames()
    with agenttape.use_cassette(cassette_path) as tape:
        assert asyncio.run(talk_async(url)) == live
    assert tape.all_played


def test_a_changed_client_frame_raises_with_the_frame_difference(
    ws_server: WebSocketServer, cassette_path: Path
) -> None:
    url = http_url(ws_server)
    with agenttape.use_cassette(cassette_path, mode="once"):
        talk(url)
    ws_server.stop()
    changed = {**UPDATE, "session": {"voice": "verse"}}
    with (
        pytest.raises(agenttape.UnmatchedInteractionError) as caught,
        agenttape.use_cassette(cassette_path),
    ):
        talk(url, changed)
    assert "frame 1 body.session.voice: expected 'alloy', got 'verse'" in str(caught.value)


def test_the_servers_close_code_and_reason_replay(
    ws_server: WebSocketServer, cassette_path: Path
) -> None:
    def run(url: str) -> tuple[int, str | None]:
        with httpx.Client() as client, connect_ws(url, client) as ws:
            ws.receive_text()
            ws.send_text("bye")
            with pytest.raises(WebSocketDisconnect) as closed:
                ws.receive_text()
        return closed.value.code, closed.value.reason

    url = http_url(ws_server)
    with agenttape.use_cassette(cassette_path, mode="once"):
        assert run(url) == (4000, "bye")
    ws_server.stop()
    [interaction] = agenttape.load(cassette_path).interactions
    assert interaction.closed is not None
    assert (interaction.closed.code, interaction.closed.by) == (4000, "server")
    with agenttape.use_cassette(cassette_path):
        assert run(url) == (4000, "bye")


def test_a_refused_upgrade_replays_as_the_same_refusal(
    serve: Callable[[App], Server], cassette_path: Path
) -> None:
    server = refusing_server(serve)
    url = server.url + "/v1/realtime"

    def connect() -> tuple[int, str]:
        with (
            httpx.Client() as client,
            pytest.raises(WebSocketUpgradeError) as refused,
            connect_ws(url, client),
        ):
            pass
        response = refused.value.response
        return response.status_code, response.headers["content-type"]

    with agenttape.use_cassette(cassette_path, mode="once"):
        live = connect()
    server.stop()
    assert live == (401, "application/json")
    [interaction] = agenttape.load(cassette_path).interactions
    assert interaction.frames is None  # an HTTP answer, body and all, not a session
    assert interaction.response is not None and json.loads(interaction.response.body) == REFUSAL
    with agenttape.use_cassette(cassette_path):
        assert connect() == live


def test_a_refused_connection_replays_as_one(cassette_path: Path) -> None:
    url = f"http://127.0.0.1:{refused_port()}/v1/realtime"

    def connect() -> None:
        with httpx.Client() as client, connect_ws(url, client):
            pass

    with agenttape.use_cassette(cassette_path, mode="once"), pytest.raises(httpx.ConnectError):
        connect()
    with agenttape.use_cassette(cassette_path), pytest.raises(httpx.ConnectError):
        connect()


@pytest.mark.skipif(
    _version("httpx-ws") < (0, 7),
    reason=(
        "httpx-ws 0.6 does not see the end of the stream: its receive thread hands wsproto "
        "the b'' of a closed socket and reads again, in a loop (0.7 raises EndOfStream), so "
        "receive_text() after a drop blocks (live, until a keepalive ping goes unanswered: "
        "20 s + 20 s by default)"
    ),
)
def test_a_connection_dropped_without_a_close_frame_replays_as_a_drop(
    ws_server: WebSocketServer, cassette_path: Path
) -> None:
    def run() -> list[Any]:
        with httpx.Client() as client, connect_ws(http_url(ws_server), client) as ws:
            got: list[Any] = [ws.receive_text()]
            ws.send_text("vanish")
            with pytest.raises(WebSocketNetworkError) as lost:
                ws.receive_text()
        return [*got, type(lost.value).__name__]

    with agenttape.use_cassette(cassette_path, mode="once"):
        live = run()
    ws_server.stop()
    [interaction] = agenttape.load(cassette_path).interactions
    assert interaction.error is not None and interaction.error.type == "EOFError"
    with agenttape.use_cassette(cassette_path):
        assert run() == live


def test_a_session_replays_for_an_https_url_with_nothing_to_connect_to(
    ws_server: WebSocketServer, cassette_path: Path
) -> None:
    def run(url: str) -> list[str]:
        with httpx.Client() as client, connect_ws(url, client) as ws:
            got = [ws.receive_text()]
            ws.send_text(json.dumps(UPDATE))
            return [*got, ws.receive_text()]

    with agenttape.use_cassette(cassette_path, mode="once", match_on=("method", "path")):
        live = run(http_url(ws_server))
    ws_server.stop()
    with agenttape.use_cassette(cassette_path, match_on=("method", "path")):
        assert run("https://realtime.example.com/v1/realtime") == live


def test_a_replay_stream_closed_under_a_read_fails_as_httpcores_own_does() -> None:
    """httpx-ws's receiving thread may read once more as the session closes: on the replay
    socket that is httpcore's ReadError (and WriteError), as on httpcore's own stream, never
    a bare OSError escaping the thread."""
    import socket

    import httpcore
    from httpcore._backends.sync import SyncStream

    from agenttape._adapters.websocket.httpx_ws import _SocketStream

    for make in (SyncStream, _SocketStream):
        ours, theirs = socket.socketpair()
        stream = make(ours)
        ours.close()
        with pytest.raises(httpcore.ReadError):
            stream.read(10, timeout=1.0)
        with pytest.raises(httpcore.WriteError):
            stream.write(b"x", timeout=1.0)
        theirs.close()
