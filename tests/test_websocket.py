"""WebSocket sessions through the websockets library: recorded frame by frame against a real
server, replayed with the server stopped, compared byte for byte."""

from __future__ import annotations

import asyncio
import json
import logging
import subprocess
import sys
from pathlib import Path
from typing import Any

import msgpack
import pytest

try:
    from websockets.asyncio.client import connect
except ImportError:  # websockets 12: the asyncio client there is the legacy one
    from websockets.legacy.client import connect  # type: ignore[assignment]
from websockets.exceptions import ConnectionClosedError
from websockets.sync.client import connect as connect_sync

import agenttape
from agenttape._core.models import Frame
from agenttape._core.wire import codec
from tests.cli_support import cli
from tests.servers import WebSocketServer
from tests.websocket_support import AUDIO, UPDATE, conversation, frames_of


def closing(ws: Any) -> tuple[int | None, str | None]:
    """How the connection closed: the Sans-I/O protocol's code and reason (the legacy
    client keeps them on itself)."""
    protocol = getattr(ws, "protocol", ws)
    return protocol.close_code, protocol.close_reason


async def talk(url: str, update: dict[str, Any] = UPDATE) -> list[Any]:
    async with connect(url) as ws:
        got: list[Any] = [await ws.recv()]
        await ws.send(json.dumps(update))
        got += [await ws.recv(), await ws.recv()]
        await ws.send(AUDIO)
        got.append(await ws.recv())
    return got


def talk_sync(url: str) -> list[Any]:
    with connect_sync(url) as ws:
        got: list[Any] = [ws.recv()]
        ws.send(json.dumps(UPDATE))
        got += [ws.recv(), ws.recv()]
        ws.send(AUDIO)
        got.append(ws.recv())
    return got


def expected_frames() -> list[tuple[str, str, bytes]]:
    return [
        *conversation(),
        ("client", "close", b"\x03\xe8"),
        ("server", "close", b"\x03\xe8"),
    ]


def test_asyncio_session_records_every_frame_and_replays_offline(
    ws_server: WebSocketServer, cassette_path: Path
) -> None:
    with agenttape.use_cassette(cassette_path, mode="all"):
        live = asyncio.run(talk(ws_server.url))
    ws_server.stop()
    assert frames_of(cassette_path) == expected_frames()  # inflated: compression was on
    [interaction] = agenttape.load(cassette_path).interactions
    assert interaction.response is not None and interaction.response.status == 101
    assert interaction.request.url.endswith("model=gpt-realtime&key=%3Credacted%3E") or (
        "key=<redacted>" in interaction.request.url
    )
    assert interaction.closed is not None
    assert (interaction.closed.code, interaction.closed.by) == (1000, "client")
    assert msgpack.unpackb(cassette_path.read_bytes(), timestamp=3)["agenttape"] == 2

    with agenttape.use_cassette(cassette_path) as tape:
        assert asyncio.run(talk(ws_server.url)) == live
    assert tape.all_played


def test_sync_session_records_and_replays(ws_server: WebSocketServer, cassette_path: Path) -> None:
    with agenttape.use_cassette(cassette_path, mode="all"):
        live = talk_sync(ws_server.url)
    ws_server.stop()
    assert frames_of(cassette_path) == expected_frames()
    with agenttape.use_cassette(cassette_path):
        assert talk_sync(ws_server.url) == live


def test_a_changed_client_frame_names_the_field(
    ws_server: WebSocketServer, cassette_path: Path
) -> None:
    with agenttape.use_cassette(cassette_path, mode="all"):
        asyncio.run(talk(ws_server.url))
    ws_server.stop()
    changed = {**UPDATE, "session": {"voice": "verse"}}
    with (
        pytest.raises(agenttape.UnmatchedInteractionError) as caught,
        agenttape.use_cassette(cassette_path) as tape,
    ):
        asyncio.run(talk(ws_server.url, changed))
    message = str(caught.value)
    assert "frame 1 body.session.voice: expected 'alloy', got 'verse'" in message
    assert str(cassette_path) in message
    assert tape.misses and tape.misses[0].cassette_path == str(cassette_path)


def test_ignore_json_fields_applies_to_frames(
    ws_server: WebSocketServer, cassette_path: Path
) -> None:
    with agenttape.use_cassette(cassette_path, mode="all"):
        live = asyncio.run(talk(ws_server.url))
    ws_server.stop()
    other_event = {"event_id": "evt_99", **{k: v for k, v in UPDATE.items() if k != "event_id"}}
    with (
        pytest.raises(agenttape.UnmatchedInteractionError, match="event_id"),
        agenttape.use_cassette(cassette_path),
    ):
        asyncio.run(talk(ws_server.url, other_event))
    with agenttape.use_cassette(cassette_path, ignore_json_fields=["event_id"]):
        assert asyncio.run(talk(ws_server.url, other_event)) == live


def test_binary_frames_are_byte_exact(ws_server: WebSocketServer, cassette_path: Path) -> None:
    async def send_audio(payload: bytes) -> bytes:
        async with connect(ws_server.url) as ws:
            await ws.recv()
            await ws.send(payload)
            answer = await ws.recv()
            assert isinstance(answer, bytes)
            return answer

    with agenttape.use_cassette(cassette_path, mode="all"):
        live = asyncio.run(send_audio(AUDIO))
    ws_server.stop()
    with agenttape.use_cassette(cassette_path):
        assert asyncio.run(send_audio(AUDIO)) == live == AUDIO[::-1]
    with (
        pytest.raises(agenttape.UnmatchedInteractionError, match="frame 1 payload"),
        agenttape.use_cassette(cassette_path),
    ):
        asyncio.run(send_audio(AUDIO[:-1] + b"\x00"))


async def closed_by_server(url: str) -> tuple[list[Any], int | None, str | None]:
    async with connect(url) as ws:
        got = [await ws.recv()]
        await ws.send("bye")
        with pytest.raises(ConnectionClosedError):
            await ws.recv()
        return got, *closing(ws)


def test_server_close_code_and_reason_replay(
    ws_server: WebSocketServer, cassette_path: Path
) -> None:
    with agenttape.use_cassette(cassette_path, mode="all"):
        live = asyncio.run(closed_by_server(ws_server.url))
    ws_server.stop()
    assert live[1:] == (4000, "bye")
    [interaction] = agenttape.load(cassette_path).interactions
    assert interaction.closed is not None
    assert (interaction.closed.code, interaction.closed.reason, interaction.closed.by) == (
        4000,
        "bye",
        "server",
    )
    with agenttape.use_cassette(cassette_path):
        assert asyncio.run(closed_by_server(ws_server.url)) == live


async def dropped(url: str) -> tuple[str, int | None]:
    async with connect(url) as ws:
        await ws.recv()
        await ws.send("drop")
        with pytest.raises(ConnectionClosedError) as caught:
            await ws.recv()
    return type(caught.value).__name__, closing(ws)[0]


def test_a_connection_dropped_mid_frame_is_recorded_and_replayed(
    ws_server: WebSocketServer, cassette_path: Path
) -> None:
    with agenttape.use_cassette(cassette_path, mode="all"):
        live = asyncio.run(dropped(ws_server.url))
    ws_server.stop()
    assert live == ("ConnectionClosedError", 1006)
    [interaction] = agenttape.load(cassette_path).interactions
    assert interaction.error is not None and interaction.error.kind == "read_error"
    assert interaction.closed is None
    assert frames_of(cassette_path)[-1] == ("client", "text", b"drop")
    with agenttape.use_cassette(cassette_path):
        assert asyncio.run(dropped(ws_server.url)) == live


def test_a_frame_over_the_clients_limit_closes_as_live_and_keeps_what_came_before(
    ws_server: WebSocketServer, cassette_path: Path
) -> None:
    async def too_big() -> int | None:
        async with connect(ws_server.url, max_size=1 << 20) as ws:
            await ws.recv()
            await ws.send("big")
            with pytest.raises(ConnectionClosedError):
                await ws.recv()
        return closing(ws)[0]

    with agenttape.use_cassette(cassette_path, mode="all"):
        # The client sent close 1009 and stopped reading: no closing handshake completed.
        assert asyncio.run(too_big()) == 1006
    [interaction] = agenttape.load(cassette_path).interactions
    assert frames_of(cassette_path)[:2] == [
        ("server", "text", b'{"type": "session.created"}'),
        ("client", "text", b"big"),
    ]
    assert interaction.closed is not None
    assert (interaction.closed.code, interaction.closed.by) == (1009, "client")


def test_a_frame_over_the_recorders_budget_cuts_the_session_and_keeps_the_rest(
    ws_server: WebSocketServer, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    recorder = agenttape.Recorder(tmp_path / "runs", keep="all", max_bytes_per_run=64 << 10)
    with caplog.at_level(logging.WARNING, "agenttape.recorder"), recorder.run():
        asyncio.run(talk(ws_server.url))  # AUDIO is more than the run holds
    recorder.close()
    assert "its first 4 frames are kept, the rest left out" in caplog.text
    [stored] = (tmp_path / "runs").rglob("*.msgpack")
    [interaction] = agenttape.load(stored).interactions
    assert interaction.frames is not None
    assert [(f.direction, f.opcode, f.payload) for f in interaction.frames] == (
        expected_frames()[:4]
    )
    assert interaction.response is not None and interaction.response.truncated


def test_a_session_recorded_while_open_stays_open_until_the_client_gives_up(
    ws_server: WebSocketServer, cassette_path: Path
) -> None:
    async def leave_open() -> Any:
        ws = await connect(ws_server.url)
        first = await ws.recv()
        return ws, first

    async def record() -> None:
        with agenttape.use_cassette(cassette_path, mode="all"):
            ws, _ = await leave_open()
        await ws.close()

    asyncio.run(record())
    ws_server.stop()
    [interaction] = agenttape.load(cassette_path).interactions
    assert interaction.response is not None and interaction.response.truncated
    assert interaction.closed is None and interaction.error is None

    async def replay() -> tuple[Any, bool]:
        async with connect(ws_server.url) as ws:
            first = await ws.recv()
            with pytest.raises(TimeoutError):
                await asyncio.wait_for(ws.recv(), 0.2)  # the client's own timeout
        return first, closing(ws)[0] == 1000

    with agenttape.use_cassette(cassette_path):
        assert asyncio.run(replay()) == (b'{"type": "session.created"}'.decode(), True)


SLOW_MARKER = 0.2


async def slow_answer(url: str) -> tuple[str, bool]:
    async with connect(url) as ws:
        await ws.recv()
        await ws.send("slow")
        marker = asyncio.ensure_future(asyncio.sleep(SLOW_MARKER))
        answer = await ws.recv()
        fired = marker.done()
        marker.cancel()
    assert isinstance(answer, str)
    return answer, fired


def test_realtime_paces_server_frames_at_their_offsets(
    ws_server: WebSocketServer, cassette_path: Path
) -> None:
    """No wall-clock assert: a timer set well before the recorded moment shows whether the
    replay waited for it (the event loop fires timers in order)."""
    with agenttape.use_cassette(cassette_path, mode="all"):
        asyncio.run(slow_answer(ws_server.url))
    ws_server.stop()
    with agenttape.use_cassette(cassette_path):
        assert asyncio.run(slow_answer(ws_server.url)) == ("late", False)
    with agenttape.use_cassette(cassette_path, realtime=True):
        assert asyncio.run(slow_answer(ws_server.url)) == ("late", True)


def test_a_cassette_with_a_damaged_frame_list_names_the_frame(
    ws_server: WebSocketServer, cassette_path: Path
) -> None:
    with agenttape.use_cassette(cassette_path, mode="all"):
        asyncio.run(talk(ws_server.url))
    document = msgpack.unpackb(cassette_path.read_bytes(), timestamp=3)
    document["interactions"][0]["frames"][2] = ["server", "text"]  # cut short
    cassette_path.write_bytes(msgpack.packb(document, use_bin_type=True, datetime=True))
    with pytest.raises(agenttape.CassetteFormatError, match=r"interaction 0: frames\[2\]"):
        agenttape.load(cassette_path)


def test_a_truncated_frame_list_replays_what_it_holds_then_holds(
    ws_server: WebSocketServer, cassette_path: Path
) -> None:
    with agenttape.use_cassette(cassette_path, mode="all"):
        asyncio.run(talk(ws_server.url))
    ws_server.stop()
    document = msgpack.unpackb(cassette_path.read_bytes(), timestamp=3)
    entry = document["interactions"][0]
    entry["frames"] = entry["frames"][:1]
    del entry["closed"]
    entry["response"]["truncated"] = True
    cassette_path.write_bytes(msgpack.packb(document, use_bin_type=True, datetime=True))

    async def replay() -> None:
        async with connect(ws_server.url) as ws:
            await ws.recv()
            with pytest.raises(agenttape.UnmatchedInteractionError, match="not recorded"):
                await ws.send(json.dumps(UPDATE))

    with agenttape.use_cassette(cassette_path):
        asyncio.run(replay())


def test_files_without_sessions_stay_format_1(tmp_path: Path) -> None:
    header: dict[str, Any] = {}
    plain = codec.encode(header, [])
    assert msgpack.unpackb(plain)["agenttape"] == 1
    session = agenttape.load  # noqa: F841 - the reader of both
    interaction = codec.decode(plain, "x")[1]
    assert interaction == []
    with_frames = codec.encode(
        header,
        [
            _session_interaction(),
        ],
    )
    assert msgpack.unpackb(with_frames)["agenttape"] == codec.FORMAT_VERSION == 2
    [decoded] = codec.decode(with_frames, "x")[1]
    assert decoded == _session_interaction()


def _session_interaction() -> Any:
    from agenttape._core.models import Closed, Interaction, Request, Response

    return Interaction(
        Request("GET", "wss://api.test/v1/realtime"),
        Response(101, "Switching Protocols", headers=[("Upgrade", "websocket")]),
        frames=[
            Frame("client", "text", b'{"a":1}', 0.5),
            Frame("server", "binary", b"\x00\xff", 0.75, fin=False),
            Frame("server", "continuation", b"\x01", 0.8),
        ],
        closed=Closed(1000, "done", "client"),
    )


def test_sync_client_misses_closes_and_drops_replay_as_live(
    ws_server: WebSocketServer, cassette_path: Path
) -> None:
    def run() -> list[Any]:
        outcomes: list[Any] = []
        with connect_sync(ws_server.url) as ws:
            outcomes.append(ws.recv())
            ws.send("bye")
            with pytest.raises(ConnectionClosedError):
                ws.recv()
            outcomes.append(closing(ws))
        with connect_sync(ws_server.url) as ws:
            ws.recv()
            ws.send("drop")
            with pytest.raises(ConnectionClosedError):
                ws.recv()
            outcomes.append(closing(ws)[0])
        return outcomes

    with agenttape.use_cassette(cassette_path, mode="all"):
        live = run()
    ws_server.stop()
    assert live[1:] == [(4000, "bye"), 1006]
    with agenttape.use_cassette(cassette_path) as tape:
        assert run() == live
    assert tape.all_played

    with agenttape.use_cassette(cassette_path), connect_sync(ws_server.url) as ws:
        ws.recv()
        with pytest.raises(agenttape.UnmatchedInteractionError) as caught:
            ws.send("hello")
    assert "frame 1: expected" not in str(caught.value)
    assert "frame 1 payload: expected 3 bytes b'bye', got 5 bytes b'hello'" in str(caught.value)


def test_sync_realtime_replay_makes_the_clients_timeout_fire_as_live(
    ws_server: WebSocketServer, cassette_path: Path
) -> None:
    def slow(timeout: float) -> list[str]:
        seen: list[str] = []
        with connect_sync(ws_server.url) as ws:
            ws.recv()
            ws.send("slow")
            try:
                seen.append(str(ws.recv(timeout=timeout)))
            except TimeoutError:
                seen.append("timed out")
                seen.append(str(ws.recv()))
        return seen

    with agenttape.use_cassette(cassette_path, mode="all"):
        assert slow(SLOW_MARKER) == ["timed out", "late"]
    ws_server.stop()
    with agenttape.use_cassette(cassette_path):
        assert slow(SLOW_MARKER) == ["late"]  # fast: no recorded pause
    with agenttape.use_cassette(cassette_path, realtime=True):
        assert slow(SLOW_MARKER) == ["timed out", "late"]


def test_replay_never_opens_a_socket_to_the_server(
    ws_server: WebSocketServer, cassette_path: Path
) -> None:
    with agenttape.use_cassette(cassette_path, mode="all"):
        live = talk_sync(ws_server.url)
    ws_server.stop()
    with agenttape.use_cassette(cassette_path, block_network=True):
        assert talk_sync(ws_server.url) == live  # a socket to the ws_server would be blocked
    with (
        pytest.raises(agenttape.UnmatchedInteractionError, match=r"url\.path"),
        agenttape.use_cassette(cassette_path),
    ):
        talk_sync(ws_server.url.replace("/v1/", "/v2/"))  # a miss opens nothing either


def test_secrets_in_client_frames_never_reach_the_disk_and_still_match(
    ws_server: WebSocketServer, cassette_path: Path
) -> None:
    key = "sk-proj-" + "A1b2C3d4" * 4
    update = {"type": "session.update", "session": {"voice": "alloy", "api_key": key}}

    async def send() -> Any:
        async with connect(ws_server.url) as ws:
            await ws.recv()
            await ws.send(json.dumps(update))
            return await ws.recv()

    with agenttape.use_cassette(cassette_path, mode="all", redact=["json:session.voice"]):
        live = asyncio.run(send())
    ws_server.stop()
    sent = frames_of(cassette_path)[1][2]
    assert key.encode() not in sent and b"alloy" not in sent
    assert json.loads(sent)["session"]["voice"] == "<redacted>"
    assert key in live  # the server's answer is kept as it came: audit reports it
    audit = cli("audit", cassette_path)
    assert audit.returncode == 1 and "websocket frame 2 (server)" in audit.stdout
    with agenttape.use_cassette(cassette_path, redact=["json:session.voice"]):
        assert asyncio.run(send()) == live


def test_a_client_that_sends_after_close_gets_the_librarys_error_as_live(
    ws_server: WebSocketServer, cassette_path: Path
) -> None:
    async def send_after_close() -> str:
        async with connect(ws_server.url) as ws:
            await ws.recv()
            await ws.send("bye")
            with pytest.raises(ConnectionClosedError):
                await ws.recv()
            with pytest.raises(ConnectionClosedError) as caught:
                await ws.send("too late")
        return str(caught.value)

    with agenttape.use_cassette(cassette_path, mode="all"):
        live = asyncio.run(send_after_close())
    ws_server.stop()
    recorded = frames_of(cassette_path)
    with agenttape.use_cassette(cassette_path) as tape:
        assert asyncio.run(send_after_close()) == live
    assert not tape.misses
    assert frames_of(cassette_path) == recorded


def test_accept_key_is_rfc_6455s() -> None:
    from agenttape._core.wire.websocket import accept_key

    assert accept_key("dGhlIHNhbXBsZSBub25jZQ==") == "s3pPLMBiTxaQ9kYGzzhZRbK+xOo="


@pytest.mark.parametrize("size", [0, 125, 126, 65535, 65536, 200_000])
def test_encoded_server_frames_parse_in_the_library(size: int) -> None:
    """Every payload length encoding, read back by websockets' own parser."""
    from websockets.client import ClientProtocol
    from websockets.protocol import State
    from websockets.uri import parse_uri

    from agenttape._core.wire.websocket import encode_frame

    protocol = ClientProtocol(parse_uri("ws://api.test/"), state=State.OPEN, max_size=None)
    payload = bytes(range(256)) * (size // 256) + bytes(size % 256)
    protocol.receive_data(encode_frame(Frame("server", "binary", payload, 0.0, fin=False)))
    protocol.receive_data(encode_frame(Frame("server", "continuation", b"end")))
    first, second = protocol.events_received()
    assert (first.opcode.name, bytes(first.data), first.fin) == ("BINARY", payload, False)
    assert (second.opcode.name, bytes(second.data), second.fin) == ("CONT", b"end", True)


def test_fragmented_messages_record_and_replay_frame_by_frame(
    ws_server: WebSocketServer, cassette_path: Path
) -> None:
    async def fragments() -> Any:
        async with connect(ws_server.url) as ws:
            await ws.recv()
            await ws.send([b"ab", b"cd", b"ef"])
            return await ws.recv()

    with agenttape.use_cassette(cassette_path, mode="all"):
        live = asyncio.run(fragments())
    ws_server.stop()
    assert live == b"fedcba"
    [interaction] = agenttape.load(cassette_path).interactions
    assert interaction.frames is not None
    sent = [(f.opcode, f.payload, f.fin) for f in interaction.frames if f.direction == "client"]
    assert sent[:4] == [  # websockets ends the message with an empty final fragment
        ("binary", b"ab", False),
        ("continuation", b"cd", False),
        ("continuation", b"ef", False),
        ("continuation", b"", True),
    ]
    with agenttape.use_cassette(cassette_path):
        assert asyncio.run(fragments()) == live


def test_sync_replay_of_a_session_left_open_waits_for_the_client(
    ws_server: WebSocketServer, cassette_path: Path
) -> None:
    recording = agenttape.use_cassette(cassette_path, mode="all")
    recording.start()
    with connect_sync(ws_server.url) as ws:
        ws.recv()
        recording.stop()  # the recording ends with the session still open
    ws_server.stop()
    with agenttape.use_cassette(cassette_path), connect_sync(ws_server.url) as ws:
        assert ws.recv() == '{"type": "session.created"}'
        with pytest.raises(TimeoutError):
            ws.recv(timeout=0.2)  # the client's own timeout: nothing was recorded after
    assert closing(ws) == (1000, "")


def test_the_adapter_patches_websockets_imported_after_the_cassette_opened(
    ws_server: WebSocketServer, cassette_path: Path
) -> None:
    program = f"""
import sys, agenttape
assert not any(name.startswith("websockets") for name in sys.modules), "imported eagerly"
with agenttape.use_cassette({str(cassette_path)!r}, mode="all"):
    from websockets.sync.client import connect
    with connect({ws_server.url!r}) as ws:
        ws.recv()
"""
    result = subprocess.run(
        [sys.executable, "-c", program], capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stderr
    assert frames_of(cassette_path)[0] == ("server", "text", b'{"type": "session.created"}')


def test_the_legacy_client_records_and_replays(
    ws_server: WebSocketServer, cassette_path: Path
) -> None:
    """``websockets.legacy.client``, what ``websockets.connect`` was up to 13 (still shipped
    later, deprecated): the same session, recorded and replayed with the server gone."""
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        legacy = pytest.importorskip("websockets.legacy.client")

    async def talk_legacy(url: str) -> list[Any]:
        async with legacy.connect(url) as ws:
            got: list[Any] = [await ws.recv()]
            await ws.send(json.dumps(UPDATE))
            got += [await ws.recv(), await ws.recv()]
            await ws.send(AUDIO)
            got.append(await ws.recv())
        return got

    with agenttape.use_cassette(cassette_path, mode="all"):
        live = asyncio.run(talk_legacy(ws_server.url))
    ws_server.stop()
    assert frames_of(cassette_path) == expected_frames()
    with agenttape.use_cassette(cassette_path) as tape:
        assert asyncio.run(talk_legacy(ws_server.url)) == live
    assert tape.all_played
    with agenttape.use_cassette(cassette_path), pytest.raises(agenttape.UnmatchedInteractionError):
        asyncio.run(talk(ws_server.url, {**UPDATE, "session": {"voice": "echo"}}))
