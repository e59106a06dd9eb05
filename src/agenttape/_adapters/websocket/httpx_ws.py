"""httpx-ws (``connect_ws``, ``aconnect_ws``): the upgrade request is an httpx request, so it
reaches the httpx adapter's transport (see ``_adapters.httpx``), which hands it here to
become a session.

httpx-ws speaks WebSocket with a wsproto ``Connection`` over the ``network_stream`` of the
101 response. Frames are taken there, once for the sync and async sessions: each session's
connection is wrapped (``_TappedConnection``) so every event it sends and every event it
parses from the server passes the tap, one event per frame (payload unmasked). httpx-ws
offers no extensions (no permessage-deflate).

Replay opens no network connection: the 101 response carries a network stream on one end
of a local socket pair whose other end ``websocket_replay.ReplayPeer`` serves, so wsproto's
parser and the library's closing handshake and keepalive run.
"""

from __future__ import annotations

import importlib
import socket
import sys
from collections.abc import Callable, Iterable
from types import ModuleType
from typing import Any

from ..._core.blame import passed_through
from ..._core.models import Headers, Opcode
from ..._core.wire.websocket import SessionRecording, SessionReplay, close_payload
from .. import ledger
from ..forwarding import Forwarding
from .replay import ReplayPeer, key_of
from .taps import FrameChecker, FrameRecorder, dropped

__tracebackhide__ = passed_through

_EXTENSION = "agenttape.websocket"
"""The response extension that carries a session's tap to the httpx-ws session built on it."""
_NO_STATUS = 1005  # wsproto's code for a close frame that carried none


def install(api: ModuleType) -> list[ledger.Patch]:
    """Patches the sessions of ``httpx_ws._api`` (nothing is imported here)."""
    return [
        ledger.wrap(getattr(api, name), "__init__", _make_init)
        for name in ("WebSocketSession", "AsyncWebSocketSession")
    ]


def upgrades(headers: Headers) -> bool:
    """Whether a request with ``headers`` asks for a WebSocket."""
    for name, value in headers:  # as ``first_header``
        if len(name) == 7 and name.lower() == "upgrade":
            return value.lower() == "websocket"
    return False


def _make_init(original: Callable[..., None]) -> Callable[..., None]:
    def __init__(self: Any, stream: Any, *args: Any, **kwargs: Any) -> None:
        original(self, stream, *args, **kwargs)
        response = kwargs.get("response")
        tap = response.extensions.get(_EXTENSION) if response is not None else None
        if tap is not None:
            self.connection = _TappedConnection(self.connection, tap)

    return __init__


class _Frames:
    """Frames out of wsproto events: a data event may carry part of a frame (as much as
    has arrived), so its pieces are joined until the frame is finished; a frame after one
    that left its message open is a continuation."""

    def __init__(self) -> None:
        self._open = False
        self._pieces: list[bytes] = []

    def of(self, event: Any) -> tuple[Opcode, bytes, bool] | None:
        kind = type(event).__name__
        if kind in ("TextMessage", "BytesMessage"):
            data = event.data
            self._pieces.append(data.encode("utf-8") if isinstance(data, str) else bytes(data))
            if not event.frame_finished:
                return None
            payload = b"".join(self._pieces)
            self._pieces.clear()
            opcode: Opcode = "text" if kind == "TextMessage" else "binary"
            if self._open:
                opcode = "continuation"
            self._open = not event.message_finished
            return opcode, payload, bool(event.message_finished)
        if kind in ("Ping", "Pong"):
            return ("ping" if kind == "Ping" else "pong"), bytes(event.payload), True
        if kind == "CloseConnection":
            code = int(event.code)
            reason = event.reason or ""
            return "close", close_payload(None if code == _NO_STATUS else code, reason), True
        return None


class _TappedConnection:
    """A session's wsproto connection, reporting each frame event both ways to ``tap``."""

    def __init__(self, connection: Any, tap: Any) -> None:
        self._connection = connection
        self._tap = tap
        self._sent = _Frames()
        self._received = _Frames()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._connection, name)

    def send(self, event: Any) -> bytes:
        frame = self._sent.of(event)
        if frame is not None:
            self._tap.sent(*frame)
        data: bytes = self._connection.send(event)
        return data

    def events(self) -> Iterable[Any]:
        for event in self._connection.events():
            frame = self._received.of(event)
            if frame is not None:
                self._tap.received(*frame)
            yield event


# -- recording --------------------------------------------------------------------------


class _RecordedStream(Forwarding):
    """The live network stream, telling the recorder when it fails or closes."""

    def __init__(self, stream: Any, recorder: FrameRecorder) -> None:
        super().__init__(stream)
        self._recorder = recorder

    def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        try:
            data: bytes = self._wrapped.read(max_bytes, timeout)
        except Exception as exc:
            self._recorder.ended(dropped(exc))
            raise
        return self._arrived(data)

    def _arrived(self, data: bytes) -> bytes:
        """``data`` as read; empty means the server closed the connection."""
        if not data:
            self._recorder.ended(dropped())
        return data

    def close(self) -> None:
        self._recorder.ended(None)
        self._wrapped.close()


class _AsyncRecordedStream(_RecordedStream):
    async def read(self, max_bytes: int, timeout: float | None = None) -> bytes:  # type: ignore[override]
        try:
            data: bytes = await self._wrapped.read(max_bytes, timeout)
        except Exception as exc:
            self._recorder.ended(dropped(exc))
            raise
        return self._arrived(data)

    async def aclose(self) -> None:
        self._recorder.ended(None)
        await self._wrapped.aclose()


def record(response: Any, session: SessionRecording, asynchronous: bool) -> None:
    """Write down the session on the network stream of the 101 ``response``."""
    recorder = FrameRecorder(session)
    extensions = response.extensions
    stream_class = _AsyncRecordedStream if asynchronous else _RecordedStream
    extensions["network_stream"] = stream_class(extensions["network_stream"], recorder)
    extensions[_EXTENSION] = recorder


# -- replay -----------------------------------------------------------------------------


class _SocketStream:
    """httpcore's network stream interface on the client end of the replay socket pair."""

    def __init__(self, sock: socket.socket) -> None:
        self._sock = sock

    def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        # As httpcore's own stream: the timeout is set inside the error mapping, so a read
        # on a socket closed meanwhile (httpx-ws's receiving thread, as the session ends) is
        # the ReadError it is live.
        try:
            self._sock.settimeout(timeout)
            return self._sock.recv(max_bytes)
        except OSError as exc:
            raise sys.modules["httpcore"].ReadError(str(exc)) from exc

    def write(self, buffer: bytes, timeout: float | None = None) -> None:
        try:
            self._sock.settimeout(timeout)
            self._sock.sendall(buffer)
        except OSError as exc:
            raise sys.modules["httpcore"].WriteError(str(exc)) from exc

    def close(self) -> None:
        self._sock.close()

    def get_extra_info(self, info: str) -> Any:
        return None


class _AsyncSocketStream:
    """The async network stream interface on an anyio stream over the replay socket."""

    def __init__(self, stream: Any) -> None:
        self._stream = stream

    async def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        anyio = sys.modules["anyio"]
        try:
            with anyio.fail_after(timeout):
                data: bytes = await self._stream.receive(max_bytes)
                return data
        except (anyio.EndOfStream, anyio.ClosedResourceError):
            return b""
        except OSError as exc:
            raise sys.modules["httpcore"].ReadError(str(exc)) from exc

    async def write(self, buffer: bytes, timeout: float | None = None) -> None:
        anyio = sys.modules["anyio"]
        try:
            with anyio.fail_after(timeout):
                await self._stream.send(buffer)
        except (OSError, anyio.BrokenResourceError, anyio.ClosedResourceError) as exc:
            raise sys.modules["httpcore"].WriteError(str(exc)) from exc

    async def aclose(self) -> None:
        await self._stream.aclose()

    def get_extra_info(self, info: str) -> Any:
        return None


def _served(session: SessionReplay, request_head: bytes) -> tuple[socket.socket, FrameChecker]:
    """The client end of a socket pair whose server end replays ``session``, past the
    upgrade (``request_head`` written, the answer read): what is left are the server's
    frames."""
    peer = ReplayPeer(session)
    client = peer.client
    peer.start()
    client.sendall(request_head)
    remaining = len(session.handshake(key_of(request_head)))
    while remaining:
        got = client.recv(remaining)
        if not got:
            break
        remaining -= len(got)
    return client, FrameChecker(session, peer.schedule)


def replay(session: SessionReplay, response: Any, request_head: bytes) -> None:
    """Give the 101 ``response`` a network stream the recorded server plays on."""
    client, tap = _served(session, request_head)
    response.extensions["network_stream"] = _SocketStream(client)
    response.extensions[_EXTENSION] = tap


async def replay_async(session: SessionReplay, response: Any, request_head: bytes) -> None:
    """``replay`` for ``aconnect_ws``: the stream is anyio's, over the same socket pair."""
    client, tap = _served(session, request_head)
    client.setblocking(False)
    sockets = importlib.import_module("anyio.abc")
    stream = await sockets.SocketStream.from_socket(client)
    response.extensions["network_stream"] = _AsyncSocketStream(stream)
    response.extensions[_EXTENSION] = tap
