"""WebSocket sessions through the recording proxy: a real ``websockets`` client sends through
it (a CONNECT tunnel, TLS intercepted for ``wss://``) to a real server; the session is
recorded frame by frame, replayed with the server stopped, and is one format with in-process
recordings."""

from __future__ import annotations

import json
import ssl
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import trustme
from websockets.exceptions import ConnectionClosed, InvalidStatus
from websockets.sync.client import connect

import agenttape
from tests.proxy_support import ProxyProcess, agenttape_ca, record_then_replay
from tests.servers import WebSocketServer
from tests.websocket_support import AUDIO, UPDATE, conversation, frames_of


@pytest.fixture
def wss_server(upstream_ca: tuple[trustme.CA, Path]) -> Iterator[WebSocketServer]:
    ca, _path = upstream_ca
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ca.issue_cert("127.0.0.1").configure_cert(context)
    with WebSocketServer(tls=context) as running:
        yield running


def client_tls() -> ssl.SSLContext:
    return ssl.create_default_context(cafile=str(agenttape_ca()))


def talk(url: str, proxy: str, update: dict[str, Any] = UPDATE) -> list[Any]:
    """A short realtime conversation; what the client received, in order."""
    tls = client_tls() if url.startswith("wss:") else None
    with connect(url, proxy=proxy, ssl=tls, open_timeout=10) as ws:
        got: list[Any] = [ws.recv(timeout=10)]
        ws.send(json.dumps(update))
        got += [ws.recv(timeout=10), ws.recv(timeout=10)]
        ws.send(AUDIO)
        got.append(ws.recv(timeout=10))
        ws.send("bye")
        try:
            ws.recv(timeout=10)
        except ConnectionClosed as closed:
            assert closed.rcvd is not None
            got.append((closed.rcvd.code, closed.rcvd.reason))
    return got


def expected_frames() -> list[tuple[str, str, bytes]]:
    return [
        *conversation(),
        ("client", "text", b"bye"),
        ("server", "close", b"\x0f\xa0bye"),
        ("client", "close", b"\x0f\xa0bye"),
    ]


def upstream_env(upstream_ca: tuple[object, Path]) -> dict[str, str]:
    return {"SSL_CERT_FILE": str(upstream_ca[1])}


@pytest.mark.parametrize("scheme", ["wss", "ws"])
def test_a_session_through_the_proxy_is_recorded_frame_by_frame_and_replayed_offline(
    scheme: str,
    wss_server: WebSocketServer,
    ws_server: WebSocketServer,
    start_proxy: Callable[..., ProxyProcess],
    upstream_ca: tuple[object, Path],
    cassette_path: Path,
) -> None:
    server = wss_server if scheme == "wss" else ws_server
    live, replayed = record_then_replay(
        start_proxy,
        cassette_path,
        lambda proxy: talk(server.url, proxy.url),
        [server],  # type: ignore[list-item]
        upstream_env(upstream_ca),
    )
    assert live[-1] == (4000, "bye")
    assert replayed == live
    assert frames_of(cassette_path) == expected_frames()
    [session] = agenttape.load(cassette_path).interactions
    assert session.request.url.startswith(f"{scheme}://127.0.0.1:")
    assert "key=SECRET" not in session.request.url  # redacted like any URL secret
    assert session.response is not None and session.response.status == 101
    # The server's frames were compressed on the wire; the recording holds them inflated.
    assert any(
        name.lower() == "sec-websocket-extensions" and "permessage-deflate" in value
        for name, value in session.response.headers
    )
    assert session.closed is not None
    assert (session.closed.code, session.closed.reason, session.closed.by) == (
        4000,
        "bye",
        "server",
    )


def test_a_proxy_recording_replays_in_process_and_the_reverse(
    ws_server: WebSocketServer,
    start_proxy: Callable[..., ProxyProcess],
    tmp_path: Path,
) -> None:
    through_proxy, in_process = tmp_path / "proxy.msgpack", tmp_path / "in-process.msgpack"
    recording = start_proxy("--cassette", through_proxy, "--mode", "all")
    live = talk(ws_server.url, recording.url)
    assert recording.stop() == 0, recording.stderr
    with agenttape.use_cassette(in_process, mode="all"):
        assert talk(ws_server.url, proxy=None) == live  # type: ignore[arg-type]
    ws_server.stop()
    assert frames_of(through_proxy) == frames_of(in_process) == expected_frames()

    with agenttape.use_cassette(through_proxy) as tape:
        assert talk(ws_server.url, proxy=None) == live  # type: ignore[arg-type]
        assert tape.all_played
    replaying = start_proxy("--cassette", in_process)
    assert talk(ws_server.url, replaying.url) == live
    assert replaying.stop() == 0, replaying.stderr


def record_conversation(
    start_proxy: Callable[..., ProxyProcess], server: WebSocketServer, cassette: Path
) -> None:
    """The conversation recorded through the proxy; the server stopped."""
    recording = start_proxy("--cassette", cassette, "--mode", "all")
    talk(server.url, recording.url)
    assert recording.stop() == 0, recording.stderr
    server.stop()


def test_a_frame_the_recording_does_not_have_closes_the_session_and_fails_the_proxy(
    ws_server: WebSocketServer,
    start_proxy: Callable[..., ProxyProcess],
    cassette_path: Path,
) -> None:
    record_conversation(start_proxy, ws_server, cassette_path)
    before = cassette_path.read_bytes()

    replaying = start_proxy("--cassette", cassette_path)
    other = {**UPDATE, "session": {"voice": "verse"}}
    with connect(ws_server.url, proxy=replaying.url, open_timeout=10) as ws:
        ws.recv(timeout=10)
        ws.send(json.dumps(other))
        with pytest.raises(ConnectionClosed) as closed:
            ws.recv(timeout=10)
    assert closed.value.rcvd is not None and closed.value.rcvd.code == 1008
    assert replaying.stop() != 0
    assert "frame 1 body.session.voice: expected 'alloy', got 'verse'" in replaying.stderr
    assert cassette_path.read_bytes() == before


def test_a_server_that_drops_mid_frame_is_recorded_and_replayed_as_a_drop(
    ws_server: WebSocketServer,
    start_proxy: Callable[..., ProxyProcess],
    cassette_path: Path,
) -> None:
    def drop(proxy: ProxyProcess) -> tuple[Any, str]:
        with connect(ws_server.url, proxy=proxy.url, open_timeout=10) as ws:
            first = ws.recv(timeout=10)
            ws.send("drop")
            with pytest.raises(ConnectionClosed) as closed:
                ws.recv(timeout=10)
        return first, type(closed.value).__name__

    live, replayed = record_then_replay(start_proxy, cassette_path, drop, [ws_server])  # type: ignore[list-item]
    assert replayed == live == ('{"type": "session.created"}', "ConnectionClosedError")
    [session] = agenttape.load(cassette_path).interactions
    assert session.closed is None
    assert session.error is not None and session.error.kind == "read_error"
    # The server wrote a 4-byte head announcing 16 bytes, and 7 of them.
    assert "11 bytes into a frame" in session.error.message
    assert frames_of(cassette_path) == [
        ("server", "text", b'{"type": "session.created"}'),
        ("client", "text", b"drop"),
    ]


def test_a_session_nothing_recorded_is_answered_599(
    ws_server: WebSocketServer,
    start_proxy: Callable[..., ProxyProcess],
    cassette_path: Path,
) -> None:
    record_conversation(start_proxy, ws_server, cassette_path)
    replaying = start_proxy("--cassette", cassette_path)
    elsewhere = ws_server.url.replace("/v1/realtime", "/v1/other")
    with pytest.raises(InvalidStatus) as refused:
        connect(elsewhere, proxy=replaying.url, open_timeout=10)
    assert refused.value.response.status_code == 599
    assert b"url.path: expected '/v1/realtime', got '/v1/other'" in refused.value.response.body
    assert replaying.stop() != 0
