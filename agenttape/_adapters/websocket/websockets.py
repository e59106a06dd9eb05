"""websockets: the asyncio client (``websockets.asyncio.client.connect``, which the OpenAI
SDK's realtime client uses) and the sync client (``websockets.sync.client.connect``).

Both drive the library's Sans-I/O ``ClientProtocol``, so frames are taken there, once for
both: ``send_frame`` sees each frame the client sends before masking and compression,
``recv_frame`` each frame received after them, ``process_response`` the upgrade's answer
and ``receive_eof`` the end of the connection. Where the connection opens
(``connect.open_tcp_connection``, ``reconnect.open_connection``) the upgrade request is
built first, so the tape decides before any socket exists.

Replay opens no network connection. The asyncio client gets a transport that feeds its
protocol the recorded server bytes; the sync client, which waits on a socket with
``select``, gets one end of a local socket pair whose other end a thread serves. Either way
the library's own parser, handshake checks, assembler, keepalive and closing handshake run.
"""

from __future__ import annotations

import contextlib
import contextvars
import sys
from collections.abc import Callable, Iterator
from types import ModuleType
from typing import Any
from urllib.parse import urlunsplit

from ..._core import runtime
from ..._core.errors import UnmatchedInteractionError
from ..._core.models import OPCODES, Failure, Request
from ..._core.websocket import (
    SessionRecording,
    SessionReplay,
    Step,
    open_session,
    open_session_async,
    parse_close,
)
from .replay import ReplayPeer, ReplayTransport
from .taps import failure_of, raise_if_never_opened

_PATCHED = "__agenttape_original__"
_SESSION = "_agenttape_session"

_pending: contextvars.ContextVar[tuple[str, _Tap] | None] = contextvars.ContextVar(
    "agenttape_websockets_pending", default=None
)
"""The key and tap the next ``ClientProtocol`` made in this context takes: the request the
tape decided on must be the one sent."""

_frame_miss: type[UnmatchedInteractionError] = UnmatchedInteractionError
"""What a frame that misses raises: ``UnmatchedInteractionError`` that is also the library's
``ProtocolError``, the one kind of error its send path hands the caller unchanged (any other
it logs as an internal error and turns into ``ConnectionClosedError``)."""


def install(module: ModuleType) -> None:
    """Patches ``websockets.asyncio.client`` or ``websockets.sync.client``, and, once, the
    Sans-I/O protocol both import before them (reached through them: nothing is imported
    here, see ``_adapters.install_adapters``)."""
    _tap_protocol(module.ClientProtocol)
    sync = hasattr(module, "reconnect")
    opener = module.reconnect if sync else module.connect
    if _PATCHED not in vars(opener):
        setattr(opener, _PATCHED, True)
        if sync:
            _wrap(opener, "open_connection", _make_open_sync)
        else:
            _wrap(opener, "open_tcp_connection", _make_open_async)


def _tap_protocol(client: type) -> None:
    if _PATCHED in vars(client):
        return
    setattr(client, _PATCHED, True)
    protocol = next(base for base in client.__mro__ if base.__name__ == "Protocol")
    setattr(protocol, _SESSION, None)
    _wrap(client, "__init__", _make_init)
    _wrap(client, "process_response", _make_process_response)
    _wrap(protocol, "send_frame", _make_send_frame)
    _wrap(protocol, "recv_frame", _make_recv_frame)
    _wrap(protocol, "receive_eof", _make_receive_eof)
    global _frame_miss
    _frame_miss = type(
        "UnmatchedFrameError",
        (UnmatchedInteractionError, sys.modules["websockets.exceptions"].ProtocolError),
        {"__module__": __name__, "__doc__": _frame_miss.__doc__},
    )


def _wrap(owner: type, name: str, make: Callable[[Any], Any]) -> None:
    setattr(owner, name, make(getattr(owner, name)))


# -- the Sans-I/O protocol: both clients, recording and replay ---------------------------


class _Tap:
    """What a tapped protocol reports to: a recording or a replay."""

    def response(self, response: Any) -> None: ...

    def sent(self, frame: Any) -> None: ...

    def received(self, frame: Any) -> None: ...

    def ended(self, protocol: Any) -> None: ...


def _make_init(original: Callable[..., None]) -> Callable[..., None]:
    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        original(self, *args, **kwargs)
        pending = _pending.get()
        if pending is not None:
            _pending.set(None)
            self.key, tap = pending
            setattr(self, _SESSION, tap)

    return __init__


def _make_process_response(original: Callable[[Any, Any], None]) -> Callable[[Any, Any], None]:
    def process_response(self: Any, response: Any) -> None:
        tap = getattr(self, _SESSION)
        if tap is not None:
            tap.response(response)
        original(self, response)

    return process_response


def _make_send_frame(original: Callable[[Any, Any], None]) -> Callable[[Any, Any], None]:
    def send_frame(self: Any, frame: Any) -> None:
        tap = getattr(self, _SESSION)
        if tap is not None:
            tap.sent(frame)
        original(self, frame)

    return send_frame


def _make_recv_frame(original: Callable[[Any, Any], None]) -> Callable[[Any, Any], None]:
    def recv_frame(self: Any, frame: Any) -> None:
        tap = getattr(self, _SESSION)
        if tap is not None:
            tap.received(frame)
        original(self, frame)

    return recv_frame


def _make_receive_eof(original: Callable[[Any], None]) -> Callable[[Any], None]:
    def receive_eof(self: Any) -> None:
        original(self)
        tap = getattr(self, _SESSION)
        if tap is not None and self.state.name == "CLOSED":
            tap.ended(self)

    return receive_eof


class _Recorder(_Tap):
    """Writes down what the real connection carries."""

    __slots__ = ("session",)

    def __init__(self, session: SessionRecording) -> None:
        self.session = session

    def response(self, response: Any) -> None:
        self.session.opened(
            response.status_code,
            response.reason_phrase,
            list(response.headers.raw_items()),
            bytes(response.body),
        )

    def sent(self, frame: Any) -> None:
        opcode = OPCODES[frame.opcode]
        payload = bytes(frame.data)
        self.session.sent(opcode, payload, frame.fin)
        if opcode == "close":
            self.session.closed(*parse_close(payload), "client")

    def received(self, frame: Any) -> None:
        opcode = OPCODES[frame.opcode]
        payload = bytes(frame.data)
        self.session.received(opcode, payload, frame.fin)
        if opcode == "close":
            self.session.closed(*parse_close(payload), "server")

    def ended(self, protocol: Any) -> None:
        session = self.session
        if session.finished:
            return
        interaction = session.interaction
        problem = protocol.parser_exc or protocol.handshake_exc
        if interaction.response is None:
            session.failed(_failure(problem, "protocol_error", "no answer to the upgrade"))
        elif interaction.frames is not None and interaction.closed is None:
            session.failed(_failure(problem, "read_error", "connection closed abnormally"))
        else:
            session.finish()


def _failure(problem: BaseException | None, kind: Any, message: str) -> Failure:
    if problem is None:
        return Failure(kind, "EOFError", message)
    return Failure(kind, type(problem).__name__, str(problem) or message)


class _Replayer(_Tap):
    """Checks each frame the client sends and hands what the server sent next to
    ``deliver``; the library's own bytes are dropped unread."""

    __slots__ = ("deliver", "replay")

    def __init__(self, replay: SessionReplay, deliver: Callable[[Step], None]) -> None:
        self.replay = replay
        self.deliver = deliver

    def sent(self, frame: Any) -> None:
        try:
            step = self.replay.sent(OPCODES[frame.opcode], bytes(frame.data), frame.fin)
        except UnmatchedInteractionError as miss:
            # Raised through the library as its protocol errors are: to the caller, as is.
            raise _frame_miss(
                str(miss),
                request=miss.request,
                candidates=miss.candidates,
                cassette_path=miss.cassette_path,
                mode=miss.mode,
            ) from None
        if step.frames or step.end is not None:
            self.deliver(step)


def _upgrade_request(ws_uri: Any, wire: Any) -> Request:
    """The upgrade request in the model: the URL as the client addressed it."""
    netloc = ws_uri.host if ":" not in ws_uri.host else f"[{ws_uri.host}]"
    default = 443 if ws_uri.secure else 80
    if ws_uri.port != default:
        netloc = f"{netloc}:{ws_uri.port}"
    path, _, query = ws_uri.resource_name.partition("?")
    url = urlunsplit(("wss" if ws_uri.secure else "ws", netloc, path, query, ""))
    return Request("GET", url, list(wire.headers.raw_items()), b"")


def _prepared(protocol: Any, additional_headers: Any, user_agent: str | None) -> Any:
    """The request ``handshake`` is about to send, built as it builds it."""
    request = protocol.connect()
    if additional_headers is not None:
        request.headers.update(additional_headers)
    if user_agent is not None:
        request.headers.setdefault("User-Agent", user_agent)
    return request


# -- asyncio -----------------------------------------------------------------------------


def _make_open_async(original: Callable[[Any], Any]) -> Callable[[Any], Any]:
    async def open_tcp_connection(self: Any) -> Any:
        tape = runtime.active()
        if tape is None:
            return await original(self)
        connection = self.factory(self.ws_uri)
        wire = _prepared(connection.protocol, self.additional_headers, self.user_agent_header)
        request = _upgrade_request(self.ws_uri, wire)

        async def record(session: SessionRecording) -> Any:
            setattr(connection.protocol, _SESSION, _Recorder(session))
            self.factory = lambda uri: connection
            try:
                return await original(self)
            finally:
                self.factory = factory

        async def replay(session: SessionReplay) -> Any:
            raise_if_never_opened(session)
            transport = ReplayTransport(connection, session, (self.ws_uri.host, self.ws_uri.port))
            setattr(connection.protocol, _SESSION, _Replayer(session, transport.schedule))
            connection.connection_made(transport)
            return connection

        factory = self.factory
        return await open_session_async(
            tape, request, replay=replay, record=record, failure_of=failure_of
        )

    return open_tcp_connection


# -- sync --------------------------------------------------------------------------------


def _make_open_sync(original: Callable[[Any, Any], Any]) -> Callable[[Any, Any], Any]:
    def open_connection(self: Any, deadline: Any) -> Any:
        tape = runtime.active()
        if tape is None:
            return original(self, deadline)
        preview = sys.modules["websockets.client"].ClientProtocol(
            self.ws_uri, **self.protocol_kwargs
        )
        wire = _prepared(preview, self.additional_headers, self.user_agent_header)
        request = _upgrade_request(self.ws_uri, wire)

        def record(session: SessionRecording) -> Any:
            with _taking(preview.key, _Recorder(session)):
                return original(self, deadline)

        def replay(session: SessionReplay) -> Any:
            raise_if_never_opened(session)
            peer = ReplayPeer(session)
            client = peer.client
            own_sock = self.sock
            self.sock = client
            self.enable_tls = lambda sock, deadline: sock  # nothing to encrypt towards
            try:
                with _taking(preview.key, _Replayer(session, peer.schedule)):
                    peer.start()
                    return original(self, deadline)
            finally:
                self.sock = own_sock
                del self.enable_tls

        return open_session(tape, request, replay=replay, record=record, failure_of=failure_of)

    return open_connection


@contextlib.contextmanager
def _taking(key: str, tap: _Tap) -> Iterator[None]:
    token = _pending.set((key, tap))
    try:
        yield
    finally:
        _pending.reset(token)
