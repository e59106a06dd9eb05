"""websocket-client sessions (``create_connection`` and ``WebSocketApp``): recorded frame by
frame against a real server, replayed with the server stopped, compared byte for byte."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import websocket

import agenttape
from tests.servers import App, Server, WebSocketServer, refused_port
from tests.websocket_support import AUDIO, REFUSAL, UPDATE, conversation, frames_of, refusing_server

SINCE_1_9 = tuple(int(part) for part in websocket.__version__.split(".")[:2]) >= (1, 9)


def talk(url: str, update: dict[str, Any] = UPDATE) -> list[Any]:
    """A session the client closes with 4001 ``done``."""
    ws = websocket.create_connection(url, timeout=5)
    got: list[Any] = [ws.recv()]
    ws.send(json.dumps(update))
    got += [ws.recv(), ws.recv()]
    ws.send_binary(AUDIO)
    got.append(ws.recv())
    ws.close(status=4001, reason=b"done")
    # The server's answer to the closing handshake (kept on the socket from 1.9 on).
    close_frame = getattr(ws, "close_frame", None)
    got.append(None if close_frame is None else close_frame.data)
    return got


def test_create_connection_records_every_frame_and_replays_offline(
    ws_server: WebSocketServer, cassette_path: Path
) -> None:
    with agenttape.use_cassette(cassette_path, mode="once"):
        live = talk(ws_server.url)
    ws_server.stop()
    assert live[-1] == (b"\x0f\xa1done" if SINCE_1_9 else None)
    assert frames_of(cassette_path) == [
        *conversation(),
        ("client", "close", b"\x0f\xa1done"),
        ("server", "close", b"\x0f\xa1done"),
    ]
    [interaction] = agenttape.load(cassette_path).interactions
    assert interaction.response is not None and interaction.response.status == 101
    assert [name for name, _ in interaction.response.headers][:3] == [
        "Date",
        "Upgrade",
        "Connection",
    ]  # the head as the server wrote it, names and order kept
    assert interaction.closed is not None
    assert (interaction.closed.code, interaction.closed.reason) == (4001, "done")
    assert interaction.closed.by == "client"

    with agenttape.use_cassette(cassette_path) as tape:
        replayed = talk(ws_server.url)
    assert replayed == live
    assert replayed[3] == AUDIO[::-1]
    assert tape.all_played


def test_a_changed_client_frame_raises_with_the_frame_difference(
    ws_server: WebSocketServer, cassette_path: Path
) -> None:
    with agenttape.use_cassette(cassette_path, mode="once"):
        talk(ws_server.url)
    ws_server.stop()
    changed = {**UPDATE, "session": {"voice": "verse"}}
    with (
        pytest.raises(agenttape.UnmatchedInteractionError) as caught,
        agenttape.use_cassette(cassette_path),
    ):
        talk(ws_server.url, changed)
    assert "frame 1 body.session.voice: expected 'alloy', got 'verse'" in str(caught.value)


def run_app(url: str) -> list[Any]:
    """A ``WebSocketApp`` driven by its callbacks, as vendor samples write it."""
    seen: list[Any] = []

    def on_open(app: websocket.WebSocketApp) -> None:
        app.send(json.dumps(UPDATE))

    def on_message(app: websocket.WebSocketApp, message: Any) -> None:
        seen.append(message)
        if message == '{"type": "done"}':
            app.close(status=4001, reason=b"done")

    def on_close(app: websocket.WebSocketApp, code: int | None, reason: str | None) -> None:
        seen.append(("closed", code, reason))

    app = websocket.WebSocketApp(url, on_open=on_open, on_message=on_message, on_close=on_close)
    app.run_forever()
    return seen


def test_websocket_app_replays_its_callbacks(
    ws_server: WebSocketServer, cassette_path: Path
) -> None:
    with agenttape.use_cassette(cassette_path, mode="once"):
        live = run_app(ws_server.url)
    ws_server.stop()
    assert live[0] == '{"type": "session.created"}'
    # before 1.9 the app's on_close is not handed the server's close code and reason
    assert live[-1] == (("closed", 4001, "done") if SINCE_1_9 else ("closed", None, None))
    with agenttape.use_cassette(cassette_path) as tape:
        assert run_app(ws_server.url) == live
    assert tape.all_played


def test_a_refused_upgrade_replays_as_the_same_refusal(
    serve: Callable[[App], Server], cassette_path: Path
) -> None:
    server = refusing_server(serve)
    url = server.url.replace("http://", "ws://") + "/v1/realtime"

    def connect() -> tuple[int, bytes]:
        with pytest.raises(websocket.WebSocketBadStatusException) as refused:
            websocket.create_connection(url, timeout=5)
        return refused.value.status_code, refused.value.resp_body

    with agenttape.use_cassette(cassette_path, mode="once"):
        live = connect()
    server.stop()
    assert live == (401, json.dumps(REFUSAL).encode())
    [interaction] = agenttape.load(cassette_path).interactions
    assert interaction.frames is None
    with agenttape.use_cassette(cassette_path):
        assert connect() == live


def test_a_refused_connection_replays_as_one(cassette_path: Path) -> None:
    url = f"ws://127.0.0.1:{refused_port()}/v1/realtime"
    with (
        agenttape.use_cassette(cassette_path, mode="once"),
        pytest.raises(ConnectionRefusedError),
    ):
        websocket.create_connection(url, timeout=5)
    with agenttape.use_cassette(cassette_path), pytest.raises(ConnectionRefusedError):
        websocket.create_connection(url, timeout=5)


def test_a_connection_dropped_mid_frame_replays_as_a_drop(
    ws_server: WebSocketServer, cassette_path: Path
) -> None:
    def run() -> list[Any]:
        ws = websocket.create_connection(ws_server.url, timeout=5)
        got: list[Any] = [ws.recv()]
        ws.send("drop")
        # The server writes half a frame and closes with it unread: a reset, or an end of
        # stream, whichever the socket reports; replay reports the same.
        with pytest.raises((websocket.WebSocketConnectionClosedException, OSError)) as lost:
            ws.recv()
        ws.shutdown()
        return [*got, type(lost.value)]

    with agenttape.use_cassette(cassette_path, mode="once"):
        live = run()
    ws_server.stop()
    [interaction] = agenttape.load(cassette_path).interactions
    assert interaction.error is not None and interaction.closed is None
    with agenttape.use_cassette(cassette_path):
        assert run() == live


def test_a_session_replays_for_a_wss_url_with_nothing_to_connect_to(
    ws_server: WebSocketServer, cassette_path: Path
) -> None:
    def run(url: str) -> list[str]:
        ws = websocket.create_connection(url, timeout=5)
        got = [ws.recv()]
        ws.send(json.dumps(UPDATE))
        got.append(ws.recv())
        ws.close()
        return got

    with agenttape.use_cassette(cassette_path, mode="once", match_on=("method", "path")):
        live = run(ws_server.url)
    ws_server.stop()
    with agenttape.use_cassette(cassette_path, match_on=("method", "path")):
        assert run("wss://realtime.example.com/v1/realtime") == live
