"""aiohttp: intercepted where a request gets its connection (``BaseConnector.connect``), which
runs once per wire exchange, each redirect hop included.

aiohttp decompresses inside its protocol, so bytes are taken at the protocol: recording tees
the raw socket reads that reach ``ResponseHandler.data_received``; replay hands a real
``ResponseHandler`` a connection whose transport feeds it the recorded reads one at a time,
so aiohttp's own parser, decompression, chunked decoding and errors run as they did live.
"""

from __future__ import annotations

import asyncio
import errno
from collections.abc import Callable
from types import ModuleType
from typing import Any

from .._core import runtime
from .._core.blame import passed_through
from .._core.exchange import Live, Replay, begin, serving, unplayable
from .._core.models import Failure, FailureKind, Interaction, Request
from .._core.playback import Schedule, Walk
from .._core.tape import Recording
from .._core.wire.websocket import SessionRecording, session_of
from . import ledger, wire
from .memory_transport import MemoryTransport
from .websocket import aiohttp as aiohttp_ws

__tracebackhide__ = passed_through

# aiohttp exception name -> library-neutral kind.
KIND_BY_EXCEPTION: dict[str, FailureKind] = {
    "ClientConnectorError": "connect_error",
    "ClientConnectorDNSError": "connect_error",
    "ClientConnectorSSLError": "connect_error",
    "ClientConnectorCertificateError": "connect_error",
    "ClientProxyConnectionError": "proxy_error",
    "ConnectionTimeoutError": "connect_timeout",
    "TimeoutError": "connect_timeout",
    "CancelledError": "connect_timeout",
    "SocketTimeoutError": "read_timeout",
    "ServerTimeoutError": "read_timeout",
    "ServerDisconnectedError": "protocol_error",
    "ClientPayloadError": "protocol_error",
    "HttpProcessingError": "protocol_error",
    "ClientOSError": "read_error",
}
_CONNECT_KINDS = ("connect_error", "connect_timeout", "proxy_error", "unsupported_protocol")


def install(aiohttp: ModuleType) -> list[ledger.Patch]:
    base = aiohttp.connector.BaseConnector  # an attribute: no import under the adapters' lock
    sockets = aiohttp_ws.install(aiohttp)
    return [
        ledger.wrap(base, "connect", lambda found: _make_connect(found, aiohttp, bool(sockets))),
        *sockets,
    ]


def _make_connect(
    original: Callable[..., Any], aiohttp: ModuleType, sockets: bool
) -> Callable[..., Any]:
    handler_class = aiohttp.client_proto.ResponseHandler
    connection_class = _connection_class(aiohttp.connector.Connection)
    writer_class = getattr(getattr(aiohttp, "http_writer", None), "StreamWriter", None)
    # From 3.12 a request without a body is written whole in one write, once its read timeout
    # has started, with no task left writing (``StreamWriter.send_headers`` came with it).
    written_at_once = hasattr(writer_class, "send_headers")

    async def connect(self: Any, req: Any, traces: Any, timeout: Any) -> Any:
        tape = runtime.active()
        if tape is None:
            return await original(self, req, traces, timeout)
        if sockets and "Upgrade" in req.headers and aiohttp_ws.upgrades(req.headers):
            return await _open_session(tape, self, req, traces, timeout, original, aiohttp)

        body = req.body
        if type(body) is not bytes:
            body = await _body_bytes(body)
        plan = begin(tape, _to_model(req, body))
        if isinstance(plan, Replay) and plan.body is not None:
            return _replay_whole(
                tape, self, req, plan, handler_class, connection_class, written_at_once
            )
        with serving(tape, plan, failure_of):
            if isinstance(plan, Live):
                conn = await original(self, req, traces, timeout)
                _Tap(conn.protocol, plan.recording, req.method)
                return conn
            interaction, schedule = plan.interaction, plan.playback
            error = interaction.error
            if interaction.response is None and error is not None and error.kind in _CONNECT_KINDS:
                await schedule.wait_async(schedule.head)  # the error comes when it came live
                raise _connect_exception(aiohttp, error, req)
            problem = interaction.response and wire.unframeable(interaction.response)
            if problem:
                raise unplayable(tape, interaction, "aiohttp", problem)
            return _replay_connection(
                self, req, interaction, schedule, handler_class, connection_class
            )

    return connect


async def _open_session(
    tape: Any,
    connector: Any,
    req: Any,
    traces: Any,
    timeout: Any,
    original: Callable[..., Any],
    aiohttp: ModuleType,
) -> Any:
    """``ws_connect``'s upgrade request: a WebSocket session (see ``aiohttp_ws``)."""
    plan = begin(tape, _to_model(req, await _body_bytes(req.body)))
    with serving(tape, plan, failure_of):
        opened = session_of(tape, plan)
        if isinstance(opened, SessionRecording):
            conn = await original(connector, req, traces, timeout)
            aiohttp_ws.record(conn.protocol, opened)
            return conn
        interaction = opened.interaction
        error = interaction.error
        if interaction.response is None and error is not None:
            raise _connect_exception(aiohttp, error, req)
        connection_class = _connection_class(aiohttp.connector.Connection)
        if not opened.is_session:  # a refused upgrade replays as the answer it got
            return _replay_connection(
                connector,
                req,
                interaction,
                opened.schedule,
                aiohttp.client_proto.ResponseHandler,
                connection_class,
            )
        peer = (req.url.host or "", req.url.port or 0)
        protocol = aiohttp_ws.replay_protocol(aiohttp, opened, peer)
        return connection_class(connector, req.connection_key, protocol, asyncio.get_running_loop())


def _to_model(req: Any, body: bytes) -> Request:
    sent = req.headers
    # A client sends the same headers again and again: read as the model holds them once per
    # set sent (what it sent is the key, so nothing kept can be stale).
    key = tuple(sent.items())
    headers = _SENT_HEADERS.get(key)
    if headers is None:
        names, values = map(str, sent.keys()), map(str, sent.values())  # names are istr
        headers = tuple(zip(names, values, strict=True))
        if not "".join(map("".join, headers)).isascii():
            headers = tuple([(_as_sent(name), _as_sent(value)) for name, value in headers])
        if len(_SENT_HEADERS) >= _SENT_LIMIT:
            _SENT_HEADERS.clear()
        _SENT_HEADERS[key] = headers
    return Request(method=req.method, url=str(req.url), headers=headers, body=body)


_SENT_HEADERS: dict[tuple[tuple[str, str], ...], tuple[tuple[str, str], ...]] = {}
_SENT_LIMIT = 1024


def _as_sent(value: str) -> str:
    """A header as the model holds it, one character per byte sent: aiohttp sends headers
    as UTF-8, so a character past ASCII is its UTF-8 bytes."""
    return value if value.isascii() else value.encode("utf-8", "surrogateescape").decode("latin-1")


async def _body_bytes(body: Any) -> bytes:
    """The request body, read without using it up: aiohttp ≥ 3.12 payloads can be read
    again (``as_bytes``); before that only in-memory and seekable ones can, and a one-shot
    stream is matched as an empty body."""
    if isinstance(body, (bytes, bytearray)):
        return bytes(body)
    as_bytes = getattr(body, "as_bytes", None)
    if as_bytes is not None:
        return bytes(await as_bytes())
    value = getattr(body, "_value", None)
    if isinstance(value, (bytes, bytearray)):
        return bytes(value)
    if value is not None and hasattr(value, "seekable") and value.seekable():
        position = value.tell()
        data = value.read()
        value.seek(position)
        return data.encode() if isinstance(data, str) else bytes(data)
    return b""


def failure_of(exc: BaseException) -> Failure:
    """The failure an exception of aiohttp's connect (or read) stands for; a cancelled connect
    is its timeout."""
    name = type(exc).__name__
    message = getattr(exc, "strerror", None) or str(exc)
    return Failure(KIND_BY_EXCEPTION.get(name, "transport_error"), name, str(message))


def _connect_exception(aiohttp: ModuleType, error: Failure, req: Any) -> BaseException:
    exceptions = aiohttp.client_exceptions
    if error.kind == "connect_timeout":
        return TimeoutError()  # aiohttp turns it into its ConnectionTimeoutError
    refused = "refused" in error.message.lower() or "connect call failed" in error.message.lower()
    os_error = OSError(errno.ECONNREFUSED if refused else None, error.message)
    if error.kind == "proxy_error":
        return exceptions.ClientProxyConnectionError(req.connection_key, os_error)  # type: ignore[no-any-return]
    return exceptions.ClientConnectorError(req.connection_key, os_error)  # type: ignore[no-any-return]


# -- recording --------------------------------------------------------------------------


class _Tap:
    """Sits on one live connection's protocol for one exchange: every raw read goes to the
    recording (head parsed, framing removed) before aiohttp parses it; removes itself when
    the response is complete."""

    _HOOKS = ("data_received", "connection_lost", "set_exception")

    def __init__(self, protocol: Any, recording: Recording, method: str) -> None:
        self._protocol = protocol
        self._recording = recording
        self._parser = wire.ResponseParser(head_only=method == "HEAD")
        self._detach()  # a tap left by an exchange the cassette closed before it ended
        self._data_received = protocol.data_received
        self._connection_lost = protocol.connection_lost
        self._set_exception = protocol.set_exception
        protocol.data_received = self.data_received
        protocol.connection_lost = self.connection_lost
        protocol.set_exception = self.set_exception

    def _detach(self) -> None:
        state = vars(self._protocol)
        for name in self._HOOKS:
            state.pop(name, None)

    def data_received(self, data: bytes) -> None:
        recording = self._recording
        if not recording.finished:
            parser = self._parser
            had_head = parser.head is not None
            body = parser.feed(data)
            if parser.head is not None and not had_head:
                status, reason, version, headers = parser.head
                recording.respond(status, reason, version, headers)
            if body:
                recording.chunk(body)
            if parser.body is not None and parser.body.done:
                recording.finish()
                self._detach()
        self._data_received(data)

    def connection_lost(self, exc: BaseException | None) -> None:
        recording = self._recording
        if not recording.finished:
            body = self._parser.body
            if self._protocol.transport is None:
                recording.finish(truncated=True)  # aiohttp closed it: the caller stopped reading
            elif body is not None and body.runs_to_eof and exc is None:
                recording.finish()
            elif exc is not None:
                recording.fail_as("read_error", type(exc).__name__, str(exc))
            elif body is None:
                recording.fail_as(
                    "protocol_error", "ServerDisconnectedError", "Server disconnected"
                )
            else:
                recording.fail_as(
                    "protocol_error",
                    "ClientPayloadError",
                    "connection closed before the whole response body arrived",
                )
        self._detach()
        self._connection_lost(exc)

    def set_exception(self, exc: BaseException, *args: Any) -> None:
        if not self._recording.finished:
            self._recording.fail(failure_of(exc))
            self._detach()
        self._set_exception(exc, *args)


# -- replay -----------------------------------------------------------------------------


def _replay_whole(
    tape: Any,
    connector: Any,
    req: Any,
    plan: Replay,
    handler_class: type,
    connection_class: type,
    written_at_once: bool,
) -> Any:
    """A replayed answer with nothing to pace, hold, fail or wait for, its body in at most
    one piece (``Replay.body``): the connection's transport hands the protocol head and body
    in one read, as a server writes them, with no ``playback`` made. A request aiohttp writes
    in one piece (no body, nothing to wait for: ``written_at_once``) gets it as that write
    returns, as a server answering at once would, with no turn of the loop between."""
    interaction = plan.interaction
    response = interaction.response
    assert response is not None
    rendered = wire.render_whole(response, req.method)
    if rendered is None:
        with serving(tape, plan, failure_of):
            raise unplayable(
                tape,
                interaction,
                "aiohttp",
                wire.unframeable(response) or "a head HTTP/1.1 cannot hold",
            )
    loop = _loop_of(req)
    key = req.connection_key
    protocol = _protocol_for(connector, key, loop, handler_class)
    at_write = (
        written_at_once
        and not getattr(req, "_body", True)
        and getattr(req, "_continue", True) is None
    )
    protocol.transport.load_whole(req, *rendered, at_write)
    return connection_class(connector, key, protocol, loop)


def _replay_connection(
    connector: Any,
    req: Any,
    interaction: Interaction,
    schedule: Schedule,
    handler_class: type,
    connection_class: type,
) -> Any:
    loop = _loop_of(req)
    key = req.connection_key
    protocol = _protocol_for(connector, key, loop, handler_class)
    protocol.transport.load(interaction, req, schedule)
    return connection_class(connector, key, protocol, loop)


def _loop_of(req: Any) -> asyncio.AbstractEventLoop:
    """The loop the request runs on: its session's, which aiohttp gives it (asking asyncio
    costs a system call, the process id it checks, on every request)."""
    loop = getattr(req, "loop", None)
    return loop if isinstance(loop, asyncio.AbstractEventLoop) else asyncio.get_running_loop()


def _protocol_for(
    connector: Any, key: Any, loop: asyncio.AbstractEventLoop, handler_class: type
) -> Any:
    """A replay protocol for the next response: one kept alive for ``key`` (its transport
    on this loop and not closed since), or a new one."""
    idle = vars(connector).get(_IDLE)
    stack = idle.get(key) if idle else None
    while stack:
        protocol = stack.pop()
        transport = protocol.transport
        if transport is not None and transport.reusable(loop):
            return protocol
        protocol.close()
    protocol = handler_class(loop)
    protocol.connection_made(_ReplayTransport(protocol, loop))
    return protocol


_IDLE = ledger.MARK
"""The connector attribute holding, by connection key, replay protocols whose last response
left the connection open (read to its end, keep-alive), ready for the next replayed response
as aiohttp's own pool keeps a live connection for the next request."""


_CONNECTION_CLASSES: dict[type, type] = {}


def _connection_class(base: type) -> type:
    """A Connection whose (in-memory) protocol never goes to the connector's pool: released
    with its response read to the end and the connection kept alive, it waits in ``_IDLE``
    for the next replayed response; otherwise it is closed."""
    found = _CONNECTION_CLASSES.get(base)
    if found is None:

        def release(self: Any) -> None:
            self._notify_release()
            protocol, self._protocol = self._protocol, None
            if protocol is None:
                return
            transport = protocol.transport
            if (
                isinstance(transport, _ReplayTransport)
                and transport.kept_alive(self._loop)
                and not protocol.should_close
            ):
                kept = vars(self._connector)
                idle = kept.get(_IDLE)
                if idle is None:
                    idle = kept[_IDLE] = {}
                stack = idle.get(self._key)
                if stack is None:
                    stack = idle[self._key] = []
                stack.append(protocol)
            else:
                protocol.close()

        def close(self: Any) -> None:
            self._notify_release()
            protocol, self._protocol = self._protocol, None
            if protocol is not None:
                protocol.close()

        found = type("ReplayConnection", (base,), {"release": release, "close": close})
        _CONNECTION_CLASSES[base] = found
    return found


def _raised(reader: Any) -> BaseException | None:
    """The exception an aiohttp stream or protocol will raise to its reader, if any."""
    exception = getattr(reader, "exception", None)
    made = exception() if callable(exception) else None
    return made if isinstance(made, BaseException) else None


class _ReplayTransport(MemoryTransport):
    """Delivers the recorded reads to the protocol, each once the previous one has been
    consumed (or at its recorded offset with ``realtime``), then the recorded ending; a body
    the client closed early gets none. The first read waits until aiohttp has written the
    request, as a server's answer does. A response that ended leaving the connection open
    makes way for the next one (``load``), as a kept-alive socket does. An answer with
    nothing to pace (``load_whole``) is one read and, for a body that runs to the end of the
    connection, the end; no walk is made for it."""

    def __init__(self, protocol: Any, loop: asyncio.AbstractEventLoop) -> None:
        super().__init__(loop)
        self._protocol = protocol
        self._handle: asyncio.Handle | None = None
        self._request: Any = None
        self._error: Failure | None = None
        self._eof = True
        self._held = False
        self._quiet_end = False
        self._walk: Walk | None = None
        self._whole: bytes | None = None
        self._at_write = False
        self._over = False

    def load_whole(self, req: Any, data: bytes, eof: bool, at_write: bool) -> None:
        """The next response is ``data``, head and body as one read; ``eof``: the connection
        closes after it (the body runs to its end); ``at_write``: delivered as the request's
        one write returns, else at the loop's next turn once the request is written."""
        self._request = req
        self._error = None
        self._eof = eof
        self._held = False
        self._walk = None
        self._whole = data
        self._over = False
        self._at_write = at_write
        if not at_write:
            self._handle = self._loop.call_soon(self._step_whole)

    def write(self, data: bytes | bytearray | memoryview) -> None:
        if self._at_write:
            self._at_write = False
            self._step_whole()

    def writelines(self, list_of_data: Any) -> None:
        self.write(b"")

    def load(self, interaction: Interaction, req: Any, schedule: Schedule) -> None:
        method = req.method
        self._request = req
        self._error = interaction.error
        response = interaction.response
        head: bytes | None = None
        body: list[bytes] = []
        self._eof = True
        if response is not None:
            complete = interaction.error is None and not response.truncated
            head = wire.render_head(response)
            body = wire.render_body(response, complete, schedule.waits(None))
            self._eof = not complete or wire.runs_to_eof(response, method)
            if not schedule.paced and schedule.precedents is None and body:
                # Unpaced and waiting on no request, the head and the first piece come in one
                # read, as a server writes them: the parser hands the body on in the same
                # pieces, one step sooner.
                head, body = head + body[0], body[1:]
        # Nothing follows the last piece: no step is left to end the exchange.
        self._quiet_end = (
            self._error is None
            and not self._eof
            and schedule.end is None
            and schedule.precedents is None
            and not schedule.held
        )
        self._held = schedule.held
        self._walk = Walk(schedule, body, interaction.error, head=head)
        self._over = False
        self._handle = self._loop.call_soon(self._step)

    def _writing(self) -> bool:
        """Whether aiohttp's task writing the request is still running (then the first read
        waits for it, and ``_step`` runs again when it ends). Live, a response cannot come
        before its request went out, so aiohttp has dropped that task by the time the response
        ends and releases the connection at once; before 3.11, a response that ended first
        released it a loop turn later, after the next request had asked for a connection.
        A request that waits for ``100 Continue`` is not held up."""
        req = self._request
        writer = getattr(req, "_writer", None)
        if not isinstance(writer, asyncio.Future) or writer.done():
            return False
        waiting = getattr(req, "_continue", None)
        if isinstance(waiting, asyncio.Future) and not waiting.done():
            return False
        writer.add_done_callback(self._written)
        return True

    def _written(self, _writer: object) -> None:
        if self._handle is None:
            self._step_later(0)

    def reusable(self, loop: asyncio.AbstractEventLoop) -> bool:
        """Whether a connection ``kept_alive`` when released can carry the next response
        (nothing but closing it, or another loop, can have changed since)."""
        return self._loop is loop and not self._closing

    def kept_alive(self, loop: asyncio.AbstractEventLoop) -> bool:
        """Whether the response ended with the connection open and nothing left to send."""
        return (
            self._loop is loop
            and not self._closing
            and not self._paused
            and self._handle is None
            and self._over
            and self._error is None
            and not self._eof
            and not self._held
        )

    def _step_later(self, delay: float) -> None:
        if delay > 0:
            self._handle = self._loop.call_later(delay, self._step)
        else:
            self._handle = self._loop.call_soon(self._step)

    def _step(self) -> None:
        walk = self._walk
        if walk is None:
            self._step_whole()
            return
        self._handle = None
        if self._closing or self._paused or self._over:
            return
        if not walk.delivered and self._writing():
            return
        if walk.delivered and not walk.exhausted:
            payload = self._protocol._payload
            if payload is not None and getattr(payload, "_buffer", None):
                self._step_later(0.001)  # the caller has not taken the previous read yet
                return
        step = walk.poll()
        if isinstance(step, bytes):
            self._protocol.data_received(step)
            if walk.exhausted and self._quiet_end:
                self._end_walk(walk)
            else:
                self._step_later(0)
            return
        if isinstance(step, float):
            self._step_later(step)
            return
        self._end_walk(walk)
        if step == "held":
            return  # closed early by the client when recorded: aiohttp's read timeout ends it
        error = self._error
        protocol = self._protocol
        payload = protocol._payload
        if error is not None and error.kind == "read_timeout":
            protocol._on_read_timeout()
        elif error is not None and error.kind == "read_error":
            self._lose(walk.noted(ConnectionResetError(error.message)))
        elif self._eof:
            self._lose(None)
        if step == "failed":
            # What aiohttp made of the recorded failure (its payload error, its timeout),
            # which the reader raises: it says it was replayed.
            for made in (_raised(payload), _raised(protocol)):
                if made is not None:
                    walk.noted(made)

    def _end_walk(self, walk: Walk) -> None:
        """The response is over: the walk is let go, as the transport and its protocol,
        which refer to each other, may wait for a collection to be freed."""
        self._over = True
        self._walk = None
        walk.stop()

    def _step_whole(self) -> None:
        """``_step`` for ``load_whole``: the one read once the request is written, then, for a
        body that runs to the end of the connection, the end a step later (as a walk's)."""
        self._handle = None
        if self._closing or self._paused or self._over or self._at_write:
            return
        whole = self._whole
        if whole is None:
            self._over = True
            self._lose(None)
            return
        if self._writing():
            return
        self._whole = None
        self._protocol.data_received(whole)
        if self._eof:
            self._handle = self._loop.call_soon(self._step_whole)
        else:
            self._over = True

    def _lose(self, exc: BaseException | None) -> None:
        if not self._closing:
            self._closing = True
            self._protocol.connection_lost(exc)

    def _deliver_again(self) -> None:
        if self._handle is None and not self._closing:
            self._step_later(0)

    def close(self) -> None:
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None
        if self._walk is not None:  # closed before the response ended
            self._walk.stop()
            self._walk = None
        if not self._closing:
            self._closing = True
            self._loop.call_soon(self._protocol.connection_lost, None)
