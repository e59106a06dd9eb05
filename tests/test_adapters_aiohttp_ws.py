"""aiohttp ``ClientSession.ws_connect`` sessions: recorded frame by frame against a real
server (permessage-deflate negotiated), replayed with the server stopped, compared byte for
byte."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import aiohttp
import pytest

import agenttape
from tests.servers import App, Server, WebSocketServer, refused_port
from tests.websocket_support import AUDIO, REFUSAL, UPDATE, conversation, frames_of, refusing_server

GOOGLE_KEY = "AIzaSyD3m0K3yF0rTh3L1v3S3ss10nAbCdEfGhI"  # the shape of a Google API key


async def talk(url: str, update: dict[str, Any] = UPDATE) -> list[Any]:
    """A session ending with the server's close 4000 ``bye``."""
    async with aiohttp.ClientSession() as http, http.ws_connect(url, compress=15) as ws:
        got: list[Any] = [ws.compress, await ws.receive_str()]
        await ws.send_str(json.dumps(update))
        got += [await ws.receive_str(), await ws.receive_str()]
        await ws.send_bytes(AUDIO)
        got.append(await ws.receive_bytes())
        await ws.send_str("bye")
        message = await ws.receive()
        got += [(message.type, message.data, message.extra), ws.close_code]
    return got


def test_a_session_records_every_frame_inflated_and_replays_offline(
    ws_server: WebSocketServer, cassette_path: Path
) -> None:
    with agenttape.use_cassette(cassette_path, mode="once"):
        live = asyncio.run(talk(ws_server.url))
    ws_server.stop()
    assert live[0] == 12  # permessage-deflate, the server's window: the wire was compressed
    assert live[-2:] == [(aiohttp.WSMsgType.CLOSE, 4000, "bye"), 4000]
    assert frames_of(cassette_path) == [
        *conversation(),
        ("client", "text", b"bye"),
        ("server", "close", b"\x0f\xa0bye"),
        ("client", "close", b"\x03\xe8"),
    ]
    [interaction] = agenttape.load(cassette_path).interactions
    assert interaction.response is not None and interaction.response.status == 101
    extensions = dict(interaction.response.headers)["Sec-WebSocket-Extensions"]
    assert extensions.startswith("permessage-deflate")
    assert interaction.closed is not None
    assert (interaction.closed.code, interaction.closed.reason, interaction.closed.by) == (
        4000,
        "bye",
        "server",
    )

    with agenttape.use_cassette(cassette_path) as tape:
        replayed = asyncio.run(talk(ws_server.url))
    assert replayed == live
    assert replayed[4] == AUDIO[::-1]
    assert tape.all_played


def test_a_changed_client_frame_raises_with_the_frame_difference(
    ws_server: WebSocketServer, cassette_path: Path
) -> None:
    with agenttape.use_cassette(cassette_path, mode="once"):
        asyncio.run(talk(ws_server.url))
    ws_server.stop()
    changed = {**UPDATE, "session": {"voice": "verse"}}
    with (
        pytest.raises(agenttape.UnmatchedInteractionError) as caught,
        agenttape.use_cassette(cassette_path),
    ):
        asyncio.run(talk(ws_server.url, changed))
    assert "frame 1 body.session.voice: expected 'alloy', got 'verse'" in str(caught.value)


def test_a_changed_binary_frame_raises(ws_server: WebSocketServer, cassette_path: Path) -> None:
    async def send(audio: bytes) -> bytes:
        async with aiohttp.ClientSession() as http, http.ws_connect(ws_server.url) as ws:
            await ws.receive_str()
            await ws.send_bytes(audio)
            return await ws.receive_bytes()

    with agenttape.use_cassette(cassette_path, mode="once"):
        assert asyncio.run(send(AUDIO)) == AUDIO[::-1]
    ws_server.stop()
    with (
        pytest.raises(agenttape.UnmatchedInteractionError) as caught,
        agenttape.use_cassette(cassette_path),
    ):
        asyncio.run(send(AUDIO[:-1] + b"\x00"))
    assert "frame 1 payload: expected 76800 bytes" in str(caught.value)


def test_a_key_in_the_url_and_in_a_frame_is_redacted_and_replay_still_matches(
    ws_server: WebSocketServer, cassette_path: Path
) -> None:
    url = ws_server.url.replace("key=SECRET", f"key={GOOGLE_KEY}")
    # One key under a credential field, one in free text: found by name and by shape.
    setup = {"type": "setup", "api_key": GOOGLE_KEY, "note": f"use {GOOGLE_KEY}"}

    async def run() -> list[str]:
        async with aiohttp.ClientSession() as http, http.ws_connect(url) as ws:
            got = [await ws.receive_str()]
            await ws.send_str(json.dumps(setup))
            return [*got, await ws.receive_str(), await ws.receive_str()]

    with agenttape.use_cassette(cassette_path, mode="once"):
        live = asyncio.run(run())
    ws_server.stop()
    stored = cassette_path.read_bytes()
    assert GOOGLE_KEY.encode() not in stored
    [interaction] = agenttape.load(cassette_path).interactions
    assert GOOGLE_KEY not in interaction.request.url
    assert "gpt-realtime&key=" in interaction.request.url
    assert interaction.frames is not None
    [sent] = [
        f.payload for f in interaction.frames if f.direction == "client" and f.opcode == "text"
    ]
    assert json.loads(sent) == {"type": "setup", "api_key": "<redacted>", "note": "use <redacted>"}

    with agenttape.use_cassette(cassette_path) as tape:
        assert asyncio.run(run()) == live
    assert tape.all_played


def test_a_refused_upgrade_replays_as_the_same_refusal(
    serve: Callable[[App], Server], cassette_path: Path
) -> None:
    server = refusing_server(serve)
    url = server.url.replace("http://", "ws://") + "/v1/realtime"

    async def connect() -> tuple[int, str]:
        async with aiohttp.ClientSession() as http:
            with pytest.raises(aiohttp.WSServerHandshakeError) as refused:
                await http.ws_connect(url)
        return refused.value.status, refused.value.message

    with agenttape.use_cassette(cassette_path, mode="once"):
        live = asyncio.run(connect())
    server.stop()
    assert live[0] == 401
    [interaction] = agenttape.load(cassette_path).interactions
    assert interaction.frames is None  # an HTTP answer, not a session
    response = interaction.response
    assert response is not None
    # aiohttp gives up on a refusal at its head: the body is kept whole, or marked cut.
    assert response.truncated or json.loads(response.body) == REFUSAL
    with agenttape.use_cassette(cassette_path):
        assert asyncio.run(connect()) == live


def test_a_refused_connection_replays_as_one(cassette_path: Path) -> None:
    url = f"ws://127.0.0.1:{refused_port()}/v1/realtime"

    async def connect() -> str:
        async with aiohttp.ClientSession() as http:
            with pytest.raises(aiohttp.ClientConnectorError) as refused:
                await http.ws_connect(url)
        return type(refused.value).__name__

    with agenttape.use_cassette(cassette_path, mode="once"):
        assert asyncio.run(connect()) == "ClientConnectorError"
    with agenttape.use_cassette(cassette_path):
        assert asyncio.run(connect()) == "ClientConnectorError"


def test_a_connection_dropped_mid_frame_replays_as_a_drop(
    ws_server: WebSocketServer, cassette_path: Path
) -> None:
    async def run() -> list[Any]:
        async with aiohttp.ClientSession() as http, http.ws_connect(ws_server.url) as ws:
            got: list[Any] = [await ws.receive_str()]
            await ws.send_str("drop")
            message = await ws.receive()
            return [*got, message.type]

    with agenttape.use_cassette(cassette_path, mode="once"):
        live = asyncio.run(run())
    ws_server.stop()
    assert live[-1] in (aiohttp.WSMsgType.CLOSED, aiohttp.WSMsgType.ERROR)
    [interaction] = agenttape.load(cassette_path).interactions
    assert interaction.closed is None
    assert interaction.error is not None or (
        interaction.response is not None and interaction.response.truncated
    )
    with agenttape.use_cassette(cassette_path):
        assert asyncio.run(run()) == live


def test_a_session_replays_for_a_wss_url_with_nothing_to_connect_to(
    ws_server: WebSocketServer, cassette_path: Path
) -> None:
    async def run(url: str) -> list[str]:
        async with aiohttp.ClientSession() as http, http.ws_connect(url) as ws:
            got = [await ws.receive_str()]
            await ws.send_str(json.dumps(UPDATE))
            return [*got, await ws.receive_str()]

    with agenttape.use_cassette(cassette_path, mode="once", match_on=("method", "path")):
        live = asyncio.run(run(ws_server.url))
    ws_server.stop()
    with agenttape.use_cassette(cassette_path, match_on=("method", "path")):
        assert asyncio.run(run("wss://realtime.example.com/v1/realtime")) == live


def test_heartbeat_pings_are_answered_on_replay_and_never_matched(
    ws_server: WebSocketServer, cassette_path: Path
) -> None:
    async def run(heartbeat: float) -> list[str]:
        async with (
            aiohttp.ClientSession() as http,
            http.ws_connect(ws_server.url, heartbeat=heartbeat) as ws,
        ):
            got = [await ws.receive_str()]
            await ws.send_str("slow")  # answered after a second: several heartbeats pass
            return [*got, await ws.receive_str()]

    with agenttape.use_cassette(cassette_path, mode="once"):
        live = asyncio.run(run(0.2))
    ws_server.stop()
    kinds = [(direction, opcode) for direction, opcode, _ in frames_of(cassette_path)]
    assert ("client", "ping") in kinds and ("server", "pong") in kinds
    with agenttape.use_cassette(cassette_path) as tape:
        assert asyncio.run(run(0.05)) == live  # another rhythm of pings: still the same session
    assert tape.all_played
