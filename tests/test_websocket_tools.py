"""The commands read WebSocket sessions: show lists frames, diff compares them frame by frame,
export writes Chrome's _webSocketMessages, redact reaches frames' JSON, view shows them."""

from __future__ import annotations

import asyncio
import base64
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosedError

import agenttape
from tests.cli_support import cli
from tests.servers import WebSocketServer

AUDIO = b"\x00\x01\xfe\xff" * 10


async def session(url: str, voice: str) -> None:
    async with connect(url) as ws:
        await ws.recv()
        await ws.send(json.dumps({"type": "session.update", "session": {"voice": voice}}))
        await ws.recv()
        await ws.recv()
        await ws.send(AUDIO)
        await ws.recv()


@pytest.fixture
def recorded(tmp_path: Path) -> Iterator[tuple[Path, Path]]:
    """Two recordings of the same session, the second with another voice."""
    alloy, verse = tmp_path / "alloy.msgpack", tmp_path / "verse.msgpack"
    with WebSocketServer() as server:
        for path, voice in ((alloy, "alloy"), (verse, "verse")):
            with agenttape.use_cassette(path, mode="all"):
                asyncio.run(session(server.url, voice))
    yield alloy, verse


def test_show_counts_and_lists_frames(recorded: tuple[Path, Path]) -> None:
    alloy, _ = recorded
    table = cli("show", alloy)
    assert table.returncode == 0, table.stderr
    assert "101" in table.stdout and " 8" in table.stdout  # eight frames in the chunks column
    detail = cli("show", alloy, "-i", "0")
    assert detail.returncode == 0, detail.stderr
    out = detail.stdout
    assert (
        "WebSocket frames (3 sent by the client, 5 by the server; closed by the client with 1000)"
        in out
    )
    assert '-> text {"type":"session.update","session":{"voice":"alloy"}}' in out
    assert "<- binary 40 bytes ff fe 01 00" in out
    assert "-> close 1000" in out
    document = json.loads(cli("show", alloy, "-i", "0", "--json").stdout)
    assert document["websocket"]["counts"] == {"client": 3, "server": 5}
    assert base64.b64decode(document["websocket"]["frames"][4]["base64"]) == AUDIO


def test_diff_names_the_frame_that_changed(recorded: tuple[Path, Path]) -> None:
    alloy, verse = recorded
    result = cli("diff", alloy, verse)
    assert result.returncode == 1
    assert "frame 1 body.session.voice: expected 'alloy', got 'verse'" in result.stdout
    assert "frame 2 body.session.voice: expected 'alloy', got 'verse'" in result.stdout
    assert cli("diff", alloy, alloy).returncode == 0


def test_har_export_has_chromes_websocket_messages(
    recorded: tuple[Path, Path], tmp_path: Path
) -> None:
    alloy, _ = recorded
    out = tmp_path / "x.har"
    assert cli("export", alloy, "--format", "har", "-o", out).returncode == 0
    [entry] = json.loads(out.read_text())["log"]["entries"]
    assert entry["response"]["status"] == 101
    assert entry["_resourceType"] == "websocket"
    messages: list[dict[str, Any]] = entry["_webSocketMessages"]
    assert [(m["type"], m["opcode"]) for m in messages] == [
        ("receive", 1),
        ("send", 1),
        ("receive", 1),
        ("receive", 1),
        ("send", 2),
        ("receive", 2),
        ("send", 8),
        ("receive", 8),
    ]
    assert json.loads(messages[1]["data"])["session"] == {"voice": "alloy"}
    assert base64.b64decode(messages[4]["data"]) == AUDIO
    times = [m["time"] for m in messages]
    assert times == sorted(times) and times[0] > 1e9  # Unix seconds, in order


def test_redact_reaches_frames(recorded: tuple[Path, Path]) -> None:
    alloy, _ = recorded
    result = cli("redact", alloy, "--json-path", "session.voice")
    assert result.returncode == 0, result.stderr
    [interaction] = agenttape.load(alloy).interactions
    assert interaction.frames is not None
    payloads = [frame.payload for frame in interaction.frames]
    assert b"alloy" not in b"".join(payloads)
    assert json.loads(payloads[1])["session"]["voice"] == "<redacted>"
    assert payloads[4] == AUDIO  # binary untouched by a JSON path


def test_view_shows_frames(recorded: tuple[Path, Path], tmp_path: Path) -> None:
    alloy, _ = recorded
    page = tmp_path / "page.html"
    assert cli("view", alloy, "-o", page).returncode == 0
    html = page.read_text()
    assert "WebSocket frames" in html
    assert "session.update" in html and "closed by the client with 1000" in html


def test_show_says_how_a_session_ended(tmp_path: Path) -> None:
    dropped, left_open = tmp_path / "dropped.msgpack", tmp_path / "open.msgpack"

    async def drop(url: str) -> None:
        async with connect(url) as ws:
            await ws.recv()
            await ws.send("drop")
            with pytest.raises(ConnectionClosedError):
                await ws.recv()

    async def leave_open(url: str) -> None:
        with agenttape.use_cassette(left_open, mode="all"):
            ws = await connect(url)
            await ws.recv()
        await ws.close()

    with WebSocketServer() as server:
        with agenttape.use_cassette(dropped, mode="all"):
            asyncio.run(drop(server.url))
        asyncio.run(leave_open(server.url))
    assert "101, dropped" in cli("show", dropped).stdout
    assert "failed: read_error" in cli("show", dropped, "-i", "0").stdout
    assert "101, open" in cli("show", left_open).stdout
    assert "cut: still open when the recording stopped" in cli("show", left_open, "-i", "0").stdout
