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
from ..._core.blame import passed_through
from ..._core.errors import UnmatchedInteractionError
from ..._core.exchange import begin, serving
from ..._core.models import OPCODES, Failure, Request
from ..._core.tape import Tape
from ..._core.wire.websocket import SessionRecording, SessionReplay, Step, session_of
from .. import ledger
from .replay import ReplayPeer, ReplayTransport
from .taps import FrameChecker, FrameRecorder, FrameTap, dropped, failure_of, raise_if_never_opened

__tracebackhide__ = passed_through

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


def install(module: ModuleType) -> list[ledger.Patch]:
    """Patches ``websockets.asyncio.client`` or ``websockets.sync.client``, and, once, the
    Sans-I/O protocol both import before them (reached through them: nothing is imported
    here, see ``_adapters.install_adapters``).

    Every name it patches is looked up first, so a version whose internals differ raises
    before anything is changed and the library is left whole."""
    client = module.ClientProtocol
    protocol = next(base for base in client.__mro__ if base.__name__ == "Protocol")
    for side, attribute in _PROTOCOL_NAMES:
        getattr(client if side == "client" else protocol, attribute)
    errors = sys.modules["websockets.exceptions"]
    version = _major(sys.modules["websockets.version"].version)
    sync = "sync" in module.__name__.split(".")
    owner: Any
    make: Callable[..., Any]
    if sync and hasattr(module, "reconnect"):  # 17: a reconnecting opener class
        owner, name, make = module.reconnect, "open_connection", _make_open_sync
    elif sync:  # 12-16: a function that opens and hands back the connection
        owner, name, make = module, "connect", _make_connect_sync
        module.parse_uri, module.enable_client_permessage_deflate, module.USER_AGENT  # noqa: B018
    elif hasattr(module.connect, "open_tcp_connection"):  # 17
        owner, name, make = module.connect, "open_tcp_connection", _make_open_async
    else:  # 13-16
        owner, name, make = module.connect, "create_connection", _make_create_connection
        module.parse_uri  # noqa: B018
    _SHAPE.update(
        replace_user_agent=version < 15, sync_tls="ssl_context" if version < 13 else "ssl"
    )
    patches = _tap_protocol(client, protocol, errors)
    if owner is module:
        # A function: code that took it before the cassette opened (``from
        # websockets.sync.client import connect``) must call the adapter too.
        return [*patches, *ledger.redirect_code(module, name, lambda copy: make(copy, module))]
    return [*patches, ledger.wrap(owner, name, lambda original: make(original, module))]


_PROTOCOL_NAMES = (
    ("client", "__init__"),
    ("client", "process_response"),
    ("client", "connect"),
    ("protocol", "send_frame"),
    ("protocol", "recv_frame"),
    ("protocol", "receive_eof"),
)

_SHAPE: dict[str, Any] = {"replace_user_agent": False, "sync_tls": "ssl"}
"""What differs between the versions for the code below: whether ``User-Agent`` replaces a
header of that name (before 15) or is a default, and what the sync client calls its TLS
context."""


def _major(version: str) -> int:
    return int(version.split(".", 1)[0])


def _tap_protocol(client: type, protocol: type, errors: ModuleType) -> list[ledger.Patch]:
    global _frame_miss
    if _frame_miss is UnmatchedInteractionError:
        _frame_miss = type(
            "UnmatchedFrameError",
            (UnmatchedInteractionError, errors.ProtocolError),
            {"__module__": __name__, "__doc__": _frame_miss.__doc__},
        )
    return [
        ledger.default(protocol, _SESSION, None),
        ledger.wrap(client, "__init__", _make_init),
        ledger.wrap(client, "process_response", _telling(_Tap.response)),
        ledger.wrap(protocol, "send_frame", _telling(_Tap.sent)),
        ledger.wrap(protocol, "recv_frame", _telling(_Tap.received)),
        ledger.wrap(protocol, "receive_eof", _make_receive_eof),
    ]


# -- the Sans-I/O protocol: every client, recording and replay ---------------------------


class _Tap(FrameTap):
    """A ``FrameTap`` that also reads the answer to the upgrade as websockets parsed it."""

    __slots__ = ()

    def response(self, response: Any) -> None:
        if self.recording is not None:
            self.recording.opened(
                response.status_code,
                response.reason_phrase,
                list(response.headers.raw_items()),
                bytes(response.body or b""),
            )

    def sent(self, frame: Any) -> None:
        self.check_sent(OPCODES[frame.opcode], bytes(frame.data), frame.fin, _frame_miss)

    def received(self, frame: Any) -> None:
        self.frames.received(OPCODES[frame.opcode], bytes(frame.data), frame.fin)

    def ended(self, protocol: Any) -> None:
        session = self.recording
        if session is None or session.finished:
            return
        problem = protocol.parser_exc or protocol.handshake_exc
        if session.interaction.response is None:
            kind = "EOFError" if problem is None else type(problem).__name__
            message = "no answer to the upgrade" if problem is None else str(problem)
            session.failed(Failure("protocol_error", kind, message or "no answer to the upgrade"))
        elif session.interaction.frames is not None:
            self.frames.ended(dropped(problem))
        else:
            self.frames.ended(None)


def _recording(session: SessionRecording) -> _Tap:
    return _Tap(FrameRecorder(session), session)


def _replaying(session: SessionReplay, deliver: Callable[[Step], None]) -> _Tap:
    return _Tap(FrameChecker(session, deliver))


def _make_init(original: Callable[..., None]) -> Callable[..., None]:
    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        original(self, *args, **kwargs)
        pending = _pending.get()
        if pending is not None:
            _pending.set(None)
            self.key, tap = pending
            setattr(self, _SESSION, tap)

    return __init__


def _telling(
    tell: Callable[[_Tap, Any], None],
) -> Callable[[Callable[[Any, Any], None]], Callable[[Any, Any], None]]:
    """Makes the wrapper of a one-argument method that first tells the connection's tap
    (``process_response``, ``send_frame``, ``recv_frame``), when it has one."""

    def make(original: Callable[[Any, Any], None]) -> Callable[[Any, Any], None]:
        def method(self: Any, argument: Any) -> None:
            tap = getattr(self, _SESSION)
            if tap is not None:
                tell(tap, argument)
            original(self, argument)

        return method

    return make


def _make_receive_eof(original: Callable[[Any], None]) -> Callable[[Any], None]:
    def receive_eof(self: Any) -> None:
        original(self)
        tap = getattr(self, _SESSION)
        if tap is not None and self.state.name == "CLOSED":
            tap.ended(self)

    return receive_eof


def upgrade_request(ws_uri: Any, headers: Any) -> Request:
    """The upgrade request in the model: the URL as the client addressed it."""
    netloc = ws_uri.host if ":" not in ws_uri.host else f"[{ws_uri.host}]"
    default = 443 if ws_uri.secure else 80
    if ws_uri.port != default:
        netloc = f"{netloc}:{ws_uri.port}"
    path, _, query = ws_uri.resource_name.partition("?")
    url = urlunsplit(("wss" if ws_uri.secure else "ws", netloc, path, query, ""))
    return Request("GET", url, list(headers.raw_items()), b"")


def _prepared(protocol: Any, additional_headers: Any, user_agent: str | None) -> Any:
    """The request ``handshake`` is about to send, built as this version builds it."""
    request = protocol.connect()
    if additional_headers is not None:
        request.headers.update(additional_headers)
    if user_agent is not None:
        if _SHAPE["replace_user_agent"]:
            request.headers["User-Agent"] = user_agent
        else:
            request.headers.setdefault("User-Agent", user_agent)
    return request


# -- asyncio -----------------------------------------------------------------------------


def _make_open_async(original: Callable[[Any], Any], module: ModuleType) -> Callable[[Any], Any]:
    async def open_tcp_connection(self: Any) -> Any:
        tape = runtime.active()
        if tape is None:
            return await original(self)
        connection = self.factory(self.ws_uri)
        wire = _prepared(connection.protocol, self.additional_headers, self.user_agent_header)
        request = upgrade_request(self.ws_uri, wire.headers)
        return await _open_async(tape, request, self, "factory", connection, self.ws_uri, original)

    return open_tcp_connection


def _make_create_connection(
    original: Callable[[Any], Any], module: ModuleType
) -> Callable[[Any], Any]:
    """13-16: ``connect.create_connection`` opens the socket for a connection that
    ``protocol_factory`` makes; ``__await_impl__`` then runs the handshake on it."""

    async def create_connection(self: Any) -> Any:
        tape = runtime.active()
        if tape is None or self.connection_kwargs.get("unix"):
            return await original(self)
        ws_uri = module.parse_uri(self.uri)
        connection = self.protocol_factory(ws_uri)
        if hasattr(self, "handshake_args"):  # 13-14
            additional_headers, user_agent = self.handshake_args
        else:
            additional_headers, user_agent = self.additional_headers, self.user_agent_header
        if _SHAPE["replace_user_agent"] and not user_agent:
            user_agent = None
        wire = _prepared(connection.protocol, additional_headers, user_agent)
        request = upgrade_request(ws_uri, wire.headers)
        return await _open_async(
            tape, request, self, "protocol_factory", connection, ws_uri, original
        )

    return create_connection


async def _open_async(
    tape: Tape,
    request: Request,
    opener: Any,
    factory: str,
    connection: Any,
    ws_uri: Any,
    original: Callable[[Any], Any],
) -> Any:
    """Opens ``connection`` as ``opener`` would: recording, ``original`` opens it for real
    (its ``factory`` attribute hands it out); replaying, on an in-memory transport."""
    made = getattr(opener, factory)

    plan = begin(tape, request)
    with serving(tape, plan, failure_of):
        session = session_of(tape, plan)
        if isinstance(session, SessionRecording):
            setattr(connection.protocol, _SESSION, _recording(session))
            setattr(opener, factory, lambda uri: connection)
            try:
                return await original(opener)
            finally:
                setattr(opener, factory, made)
        else:
            raise_if_never_opened(session)
            transport = ReplayTransport(connection, session, (ws_uri.host, ws_uri.port))
            setattr(connection.protocol, _SESSION, _replaying(session, transport.schedule))
            connection.connection_made(transport)
            return connection


# -- sync --------------------------------------------------------------------------------


def _make_open_sync(
    original: Callable[[Any, Any], Any], module: ModuleType
) -> Callable[[Any, Any], Any]:
    def open_connection(self: Any, deadline: Any) -> Any:
        tape = runtime.active()
        if tape is None:
            return original(self, deadline)
        preview = sys.modules["websockets.client"].ClientProtocol(
            self.ws_uri, **self.protocol_kwargs
        )
        wire = _prepared(preview, self.additional_headers, self.user_agent_header)
        request = upgrade_request(self.ws_uri, wire.headers)

        plan = begin(tape, request)
        with serving(tape, plan, failure_of):
            session = session_of(tape, plan)
            if isinstance(session, SessionRecording):
                with _taking(preview.key, _recording(session)):
                    return original(self, deadline)
            else:
                raise_if_never_opened(session)
                peer = ReplayPeer(session)
                client = peer.client
                own_sock = self.sock
                self.sock = client
                self.enable_tls = lambda sock, deadline: sock  # nothing to encrypt towards
                try:
                    with _taking(preview.key, _replaying(session, peer.schedule)):
                        peer.start()
                        return original(self, deadline)
                finally:
                    self.sock = own_sock
                    del self.enable_tls

    return open_connection


def _make_connect_sync(original: Callable[..., Any], module: ModuleType) -> Callable[..., Any]:
    """12-16: ``connect`` is a function that opens the socket, makes the protocol and runs
    the handshake. Replay hands it one end of a socket pair as ``sock`` (as a Unix socket:
    no TCP options) and a TLS context that leaves it as it is."""

    def connect(uri: str, **kwargs: Any) -> Any:
        tape = runtime.active()
        if tape is None or kwargs.get("unix"):
            return original(uri, **kwargs)
        ws_uri = module.parse_uri(uri)
        extensions = kwargs.get("extensions")
        if kwargs.get("compression", "deflate") == "deflate":
            extensions = module.enable_client_permessage_deflate(extensions)
        preview = module.ClientProtocol(
            ws_uri,
            origin=kwargs.get("origin"),
            extensions=extensions,
            subprotocols=kwargs.get("subprotocols"),
        )
        user_agent = kwargs.get("user_agent_header", module.USER_AGENT)
        wire = _prepared(preview, kwargs.get("additional_headers"), user_agent)
        request = upgrade_request(ws_uri, wire.headers)

        plan = begin(tape, request)
        with serving(tape, plan, failure_of):
            session = session_of(tape, plan)
            if isinstance(session, SessionRecording):
                with _taking(preview.key, _recording(session)):
                    return original(uri, **kwargs)
            else:
                raise_if_never_opened(session)
                peer = ReplayPeer(session)
                arguments = {
                    name: value
                    for name, value in kwargs.items()
                    if name not in ("sock", "ssl", "ssl_context", "proxy", "proxy_ssl")
                }
                arguments.update(sock=peer.client, unix=True)
                if ws_uri.secure:
                    arguments[_SHAPE["sync_tls"]] = _NoTLS()
                with _taking(preview.key, _replaying(session, peer.schedule)):
                    peer.start()
                    return original(uri, **arguments)

    return connect


class _NoTLS:
    """The TLS context a replayed sync connection gets: there is no server to encrypt for."""

    def wrap_socket(self, sock: Any, *args: Any, **kwargs: Any) -> Any:
        return sock


@contextlib.contextmanager
def _taking(key: str, tap: _Tap) -> Iterator[None]:
    token = _pending.set((key, tap))
    try:
        yield
    finally:
        _pending.reset(token)
