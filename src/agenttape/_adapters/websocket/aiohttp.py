"""aiohttp ``ClientSession.ws_connect``: its upgrade request reaches ``BaseConnector.connect``
like any request (see ``_adapters.aiohttp``), which hands it here to become a session.

Frames are taken where aiohttp handles them in Python: ``WebSocketWriter.send_frame`` (before
3.11, ``_send_frame``) sees each frame the client sends before masking and compression, and
the message queue aiohttp builds per connection (``WebSocketDataQueue``, before 3.11
``FlowControlDataQueue``; swapped for a subclass in ``aiohttp.client`` only) sees each message
received after unmasking and inflating. aiohttp assembles a fragmented message before
anything outside its reader sees it, so such a message is recorded as one frame.

Replay hands aiohttp a real ``ResponseHandler`` on a transport with the recorded server
behind it (``websocket_replay``): aiohttp's own parser, handshake checks, permessage-deflate
negotiation, autoping and closing handshake run, and no socket is opened.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from types import ModuleType
from typing import Any

from ..._core.blame import passed_through
from ..._core.models import OPCODES, Failure, Opcode
from ..._core.wire.websocket import SessionRecording, SessionReplay, close_payload
from .. import ledger
from ..wire import ResponseParser
from .replay import ReplayTransport
from .taps import FrameChecker, FrameRecorder, dropped

__tracebackhide__ = passed_through

_TAP = "_agenttape_websocket"

# aiohttp's WSMsgType values for messages that are frames (the rest are its own states).
_MESSAGE_OPCODES: dict[int, Opcode] = {1: "text", 2: "binary", 8: "close", 9: "ping", 10: "pong"}


# Where each aiohttp names the writer's frame method and the client's message queue: 3.11 and
# later first, then 3.8 to 3.10.
_SEND_FRAME = ("send_frame", "_send_frame")
_QUEUES = ("WebSocketDataQueue", "FlowControlDataQueue")


def install(aiohttp: ModuleType) -> list[ledger.Patch]:
    """Taps ``ws_connect``'s writer and message queue (reached through the imported
    ``aiohttp``; nothing is imported here). An aiohttp whose client names neither keeps
    treating the upgrade as a plain request: no patch."""
    client = aiohttp.client
    writer = getattr(client, "WebSocketWriter", None)
    method = next((name for name in _SEND_FRAME if hasattr(writer, name)), None)
    queue_name = next((name for name in _QUEUES if hasattr(client, name)), None)
    if writer is None or method is None or queue_name is None:
        return []
    return [
        ledger.wrap(writer, method, _make_send_frame),
        ledger.subclass(client, queue_name, _tapped_queue),
    ]


def upgrades(headers: Any) -> bool:
    """Whether a request's headers ask for a WebSocket."""
    return str(headers.get("Upgrade", "")).lower() == "websocket"


def _make_send_frame(original: Callable[..., Any]) -> Callable[..., Any]:
    async def send_frame(
        self: Any, message: bytes, opcode: int, compress: int | None = None
    ) -> None:
        tap = getattr(self.protocol, _TAP, None)
        if tap is not None:
            tap.sent(OPCODES[int(opcode)], bytes(message))
        await original(self, message, opcode, compress)

    return send_frame


def _tapped_queue(base: Any) -> dict[str, Any]:
    """The methods of a subclass of ``base`` (aiohttp's compiled or pure-Python queue)
    reporting each message it is fed to the tap on its connection's protocol."""

    def __init__(self: Any, protocol: Any, limit: int, *, loop: asyncio.AbstractEventLoop) -> None:
        base.__init__(self, protocol, limit, loop=loop)
        self.agenttape_tap = getattr(protocol, _TAP, None)

    def feed_data(self: Any, data: Any, size: int = 0) -> None:
        tap = self.agenttape_tap
        frame = _frame_of(data) if tap is not None else None
        if frame is not None:
            tap.received(*frame)
        base.feed_data(self, data, size)

    return {"__init__": __init__, "feed_data": feed_data}


def _frame_of(message: Any) -> tuple[Opcode, bytes] | None:
    """A received message as (opcode, payload), None for aiohttp's own states."""
    kind, data, extra = message[0], message[1], message[2]
    opcode = _MESSAGE_OPCODES.get(int(kind))
    if opcode is None:
        return None
    if opcode == "close":
        return opcode, close_payload(data or None, extra or "")
    return opcode, data.encode("utf-8") if isinstance(data, str) else bytes(data)


# -- recording --------------------------------------------------------------------------


class _Recorder(FrameRecorder):
    """Sits on one live connection's protocol: the upgrade's answer from the raw reads, then
    the frames both ways; the session ends with the closing handshake or the connection."""

    def __init__(self, protocol: Any, session: SessionRecording) -> None:
        super().__init__(session)
        self._protocol = protocol
        self._parser = ResponseParser()
        self._body = b""
        self._data_received = protocol.data_received
        self._connection_lost = protocol.connection_lost
        protocol.data_received = self.data_received
        protocol.connection_lost = self.connection_lost
        setattr(protocol, _TAP, self)

    def data_received(self, data: bytes) -> None:
        parser = self._parser
        self._body += parser.feed(data)
        head = parser.head
        if head is not None:
            status, reason, version, headers = head
            if status == 101:
                self.session.opened(status, reason, headers, http_version=version)
                vars(self._protocol).pop("data_received", None)
            elif parser.body is not None and parser.body.done:
                self.session.opened(status, reason, headers, self._body, version)
                self.session.finish()
                vars(self._protocol).pop("data_received", None)
        self._data_received(data)

    def connection_lost(self, exc: BaseException | None) -> None:
        session = self.session
        head = self._parser.head
        if not session.finished and session.interaction.response is None and head is not None:
            status, reason, version, headers = head
            session.opened(status, reason, headers, self._body, version)  # a refused upgrade
            body = self._parser.body
            session.cut = body is None or not body.done  # aiohttp left before it all came
        if not session.finished and session.interaction.response is None:
            name = type(exc).__name__ if exc is not None else "ServerDisconnectedError"
            session.failed(Failure("protocol_error", name, str(exc or "no answer to the upgrade")))
        # aiohttp drops the transport when it closes the connection itself.
        self.ended(dropped(exc) if self._protocol.transport is not None else None)
        for name in ("data_received", "connection_lost", _TAP):
            vars(self._protocol).pop(name, None)
        self._connection_lost(exc)


def record(protocol: Any, session: SessionRecording) -> None:
    """Write down the session the live connection of ``protocol`` carries."""
    _Recorder(protocol, session)


# -- replay -----------------------------------------------------------------------------


def replay_protocol(aiohttp: ModuleType, session: SessionReplay, peer: tuple[str, int]) -> Any:
    """A ``ResponseHandler`` whose transport plays the recorded server of ``session``."""
    protocol = aiohttp.client_proto.ResponseHandler(asyncio.get_running_loop())
    transport = ReplayTransport(protocol, session, peer)
    setattr(protocol, _TAP, FrameChecker(session, transport.schedule))
    protocol.connection_made(transport)
    return protocol
