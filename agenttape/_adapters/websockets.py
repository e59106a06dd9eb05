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

import asyncio
import contextlib
import contextvars
import selectors
import socket
import sys
import threading
from collections.abc import Callable, Iterator
from types import ModuleType
from typing import Any
from urllib.parse import urlunsplit

from .._core import runtime
from .._core.errors import UnmatchedInteractionError
from .._core.models import OPCODES, Failure, Frame, Request
from .._core.websocket import (
    End,
    SessionRecording,
    SessionReplay,
    Step,
    encode_frame,
    open_session,
    open_session_async,
    parse_close,
)

_PATCHED = "__agenttape_original__"
_SESSION = "_agenttape_session"

_pending: contextvars.ContextVar[tuple[str, _Tap] | None] = contextvars.ContextVar(
    "agenttape_websockets_pending", default=None
)
"""The key and tap the next ``ClientProtocol`` made in this context takes: the request the
tape decided on must be the one sent."""

_miss_types: dict[type, type] = {}


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
    protocol_error = sys.modules["websockets.exceptions"].ProtocolError
    _miss_types[UnmatchedInteractionError] = type(
        "UnmatchedFrameError",
        (UnmatchedInteractionError, protocol_error),
        {"__module__": "agenttape", "__doc__": UnmatchedInteractionError.__doc__},
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


def failure_of(exc: BaseException) -> Failure | None:
    """Opening the connection failed: the library raises what the socket raised."""
    if isinstance(exc, TimeoutError):
        return Failure("connect_timeout", type(exc).__name__, str(exc))
    if isinstance(exc, OSError):
        return Failure("connect_error", type(exc).__name__, str(exc))
    return None


def _connect_exception(failure: Failure) -> BaseException:
    if failure.kind == "connect_timeout":
        return TimeoutError(failure.message)
    if failure.type == "ConnectionRefusedError":
        return ConnectionRefusedError(failure.message)
    return OSError(failure.message)


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
            raise _miss_types[UnmatchedInteractionError](
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
            failure = session.interaction.error
            if session.response is None and failure is not None:
                raise _connect_exception(failure)
            transport = _ReplayTransport(connection, session, self.ws_uri)
            setattr(connection.protocol, _SESSION, _Replayer(session, transport.schedule))
            connection.connection_made(transport)
            return connection

        factory = self.factory
        return await open_session_async(
            tape, request, replay=replay, record=record, failure_of=failure_of
        )

    return open_tcp_connection


class _ReplayTransport(asyncio.Transport):
    """An asyncio transport with a recorded server behind it: the first write (the upgrade
    request) is answered with the recorded response and opening frames; every later step
    comes from the frames the client sends. Delivery is in order, paced with ``realtime``,
    and stops while the client pauses reading."""

    def __init__(self, connection: Any, replay: SessionReplay, ws_uri: Any) -> None:
        super().__init__()
        self._connection = connection
        self._replay = replay
        self._peer = (ws_uri.host, ws_uri.port)
        self._loop = asyncio.get_running_loop()
        self._queue: list[bytes | Frame | End] = []
        self._timer: asyncio.Handle | None = None
        self._answered = False
        self._paused = False
        self._closing = False
        self._lost = False

    # What the protocol's taps and the library call.

    def schedule(self, step: Step) -> None:
        self._queue.extend(step.frames)
        if step.end is not None:
            self._queue.append(step.end)
        self._kick()

    def write(self, data: bytes | bytearray | memoryview) -> None:
        if self._answered or self._closing:
            return
        self._answered = True
        replay = self._replay
        self._queue.append(replay.handshake(self._connection.protocol.key))
        self.schedule(replay.opening())

    def write_eof(self) -> None:
        pass

    def can_write_eof(self) -> bool:
        return True

    def close(self) -> None:
        if not self._closing:
            self._closing = True
            self._loop.call_soon(self._lose, None)

    def abort(self) -> None:
        self.close()

    def is_closing(self) -> bool:
        return self._closing

    def pause_reading(self) -> None:
        self._paused = True

    def resume_reading(self) -> None:
        self._paused = False
        self._kick()

    def is_reading(self) -> bool:
        return not self._paused

    def set_write_buffer_limits(self, high: int | None = None, low: int | None = None) -> None:
        pass

    def get_write_buffer_size(self) -> int:
        return 0

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return self._peer if name == "peername" else default

    # Delivery.

    def _kick(self) -> None:
        if self._timer is None and self._queue and not self._lost:
            self._timer = self._loop.call_soon(self._pump)

    def _pump(self) -> None:
        self._timer = None
        out: list[bytes] = []
        queue = self._queue
        while queue and not self._paused and not self._lost:
            item = queue[0]
            if not isinstance(item, bytes):
                due = self._replay.due(item.offset if isinstance(item, Frame) else item.due)
                if due > 0:
                    self._flush(out)
                    self._timer = self._loop.call_later(due, self._pump)
                    return
            del queue[0]
            if isinstance(item, bytes):
                out.append(item)
            elif isinstance(item, Frame):
                out.append(encode_frame(item))
            else:
                self._flush(out)
                out = []
                self._finish(item)
        self._flush(out)

    def _flush(self, out: list[bytes]) -> None:
        if out and not self._lost:
            self._connection.data_received(b"".join(out))

    def _finish(self, end: End) -> None:
        if end.kind == "held":
            return
        if _resets(end):
            self._lose(ConnectionResetError(end.failure.message if end.failure else ""))
            return
        self._connection.eof_received()
        self._closing = True
        self._loop.call_soon(self._lose, None)

    def _lose(self, exc: Exception | None) -> None:
        if self._lost:
            return
        self._lost = True
        self._closing = True
        self._queue.clear()
        self._connection.connection_lost(exc)


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
            failure = session.interaction.error
            if session.response is None and failure is not None:
                raise _connect_exception(failure)
            client, server = socket.socketpair()
            peer = _ReplayPeer(server, session, preview.key)
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


class _ReplayPeer:
    """The server end of a local socket pair, served from a recording by one thread: it
    drops what the client writes (its frames were checked as they were sent), answers the
    upgrade, and writes each step's frames when due. It stops when the client closes its
    end, or after the recorded end."""

    def __init__(self, sock: socket.socket, replay: SessionReplay, key: str) -> None:
        self._sock = sock
        self._replay = replay
        self._key = key
        self._lock = threading.Lock()
        self._queue: list[bytes | Frame | End] = []
        self._ended: End | None = None
        self._thread = threading.Thread(
            target=self._serve, name="agenttape-websocket-replay", daemon=True
        )

    def start(self) -> None:
        self._thread.start()

    def schedule(self, step: Step) -> None:
        """Called from the client's thread; the frame bytes that follow wake the peer."""
        with self._lock:
            self._queue.extend(step.frames)
            if step.end is not None:
                self._queue.append(step.end)

    def _serve(self) -> None:
        sock = self._sock
        sock.setblocking(False)
        selector = selectors.DefaultSelector()
        selector.register(sock, selectors.EVENT_READ)
        out = bytearray()
        answered = False
        try:
            while True:
                wait = self._ready(out)
                end = self._end_reached()
                if end == "reset":
                    out.clear()
                closing = end in ("close", "reset")
                if closing and not out:
                    return
                if out:
                    selector.modify(sock, selectors.EVENT_READ | selectors.EVENT_WRITE)
                else:
                    selector.modify(sock, selectors.EVENT_READ)
                for _key, events in selector.select(wait):
                    if events & selectors.EVENT_READ:
                        try:
                            data = sock.recv(1 << 16)
                        except (BlockingIOError, InterruptedError):
                            continue
                        except OSError:
                            return
                        if not data:
                            return  # the client closed its end
                        if not answered:
                            answered = True
                            self._answer()
                    if events & selectors.EVENT_WRITE and out:
                        try:
                            sent = sock.send(out)
                        except (BlockingIOError, InterruptedError):
                            continue
                        except OSError:
                            return
                        del out[:sent]
        finally:
            selector.close()
            with contextlib.suppress(OSError):
                sock.close()

    def _answer(self) -> None:
        replay = self._replay
        head = replay.handshake(self._key)
        step = replay.opening()
        with self._lock:
            self._queue[:0] = [head, *step.frames, *([step.end] if step.end else [])]

    def _ready(self, out: bytearray) -> float | None:
        """Moves due items to ``out``; seconds until the next one is due (None: nothing
        waits)."""
        with self._lock:
            while self._queue:
                item = self._queue[0]
                if isinstance(item, bytes):
                    out += item
                elif isinstance(item, Frame):
                    due = self._replay.due(item.offset)
                    if due > 0:
                        return due
                    out += encode_frame(item)
                else:
                    due = self._replay.due(item.due)
                    if due > 0:
                        return due
                    self._ended = item
                    self._queue.clear()
                    return None
                self._queue.pop(0)
        return None

    def _end_reached(self) -> str | None:
        end = self._ended
        if end is None:
            return None
        if end.kind == "held":
            return "held"
        return "reset" if _resets(end) else "close"


def _resets(end: End) -> bool:
    """A recorded failure other than the server's end of stream replays as a reset."""
    failure = end.failure
    return failure is not None and failure.type not in ("EOFError", "IncompleteReadError")
