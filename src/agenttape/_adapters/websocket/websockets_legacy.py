"""websockets' legacy asyncio client (``websockets.legacy.client.connect``; in 12 also
``websockets.connect`` and ``websockets.client.connect``), shipped up to 16.

It is an asyncio protocol of its own, not the Sans-I/O one, so frames are taken where it
reads and writes them: ``read_frame`` returns each frame received (after decompression),
``write_frame_sync`` is handed each frame sent (before compression and masking).
``Connect`` opens the connection through ``_create_connection``, a partial of the event
loop's ``create_connection``; the adapter puts its own opener in that partial's place, so
the upgrade request is known, and the tape has decided, before any socket exists. The
request's key is chosen there and handed to the handshake's own ``generate_key``: the
request the tape decided on is the one sent.

Replay gives the protocol the shared ``ReplayTransport``; its own parser, handshake checks,
keepalive and closing handshake run.
"""

from __future__ import annotations

import contextvars
import functools
import sys
from collections.abc import Callable
from types import ModuleType
from typing import Any

from ..._core import runtime
from ..._core.blame import passed_through
from ..._core.errors import UnmatchedInteractionError
from ..._core.exchange import begin, serving
from ..._core.models import OPCODES, Failure, Request
from ..._core.wire.websocket import SessionRecording, session_of
from .. import ledger
from .replay import ReplayTransport
from .taps import FrameChecker, FrameRecorder, FrameTap, dropped, failure_of, raise_if_never_opened
from .websockets import upgrade_request

__tracebackhide__ = passed_through

_SESSION = "_agenttape_session"

_key: contextvars.ContextVar[str | None] = contextvars.ContextVar(
    "agenttape_websockets_legacy_key", default=None
)
"""The key the next handshake in this task sends: the one in the request the tape saw."""

_reason: contextvars.ContextVar[str] = contextvars.ContextVar(
    "agenttape_websockets_legacy_reason", default=""
)


def install(module: ModuleType) -> list[ledger.Patch]:
    """Patches ``websockets.legacy.client`` (every name looked up before any is changed)."""
    handshake = sys.modules["websockets.legacy.handshake"]
    protocol = module.WebSocketClientProtocol
    common = module.WebSocketCommonProtocol
    for owner, name in (
        (module.Connect, "__await_impl__"),
        (protocol, "read_http_response"),
        (common, "read_frame"),
        (common, "write_frame_sync"),
        (common, "connection_lost"),
        (module, "read_response"),
        (module, "build_host"),
        (module, "build_request"),
        (module, "build_extension"),
        (module, "build_subprotocol"),
        (module, "build_authorization_basic"),
        (module, "Headers"),
        (handshake, "generate_key"),
    ):
        getattr(owner, name)
    errors = sys.modules["websockets.exceptions"]
    if _MISS[0] is UnmatchedInteractionError:
        _MISS[0] = type(
            "UnmatchedFrameError",
            (UnmatchedInteractionError, errors.ProtocolError),
            {"__module__": __name__, "__doc__": UnmatchedInteractionError.__doc__},
        )
    module_attribute: ledger.Technique = "module attribute"
    return [
        ledger.default(common, _SESSION, None),
        ledger.Patch(handshake, "generate_key", _make_generate_key, module_attribute),
        ledger.Patch(module, "read_response", _make_read_response, module_attribute),
        ledger.wrap(protocol, "read_http_response", _make_read_http_response),
        ledger.wrap(common, "read_frame", _make_read_frame),
        ledger.wrap(common, "write_frame_sync", _make_write_frame_sync),
        ledger.wrap(common, "connection_lost", _make_connection_lost),
        ledger.wrap(module.Connect, "__await_impl__", lambda found: _make_await(found, module)),
    ]


def _make_read_response(read_response: Callable[[Any], Any]) -> Callable[[Any], Any]:
    async def reading_response(stream: Any) -> Any:
        status, reason, headers = await read_response(stream)
        _reason.set(reason)
        return status, reason, headers

    return reading_response


_MISS: list[type[UnmatchedInteractionError]] = [UnmatchedInteractionError]
"""What a frame that misses raises: also the library's ``ProtocolError``, which its send
path hands the caller as it is."""


def _make_generate_key(original: Callable[[], str]) -> Callable[[], str]:
    def generate_key() -> str:
        key = _key.get()
        if key is None:
            return original()
        _key.set(None)
        return key

    return generate_key


def _make_read_http_response(original: Callable[[Any], Any]) -> Callable[[Any], Any]:
    async def read_http_response(self: Any) -> Any:
        status, headers = await original(self)
        tap = getattr(self, _SESSION)
        if tap is not None and tap.recording is not None:
            tap.recording.opened(status, _reason.get(), list(headers.raw_items()), b"")
        return status, headers

    return read_http_response


def _make_read_frame(original: Callable[[Any, Any], Any]) -> Callable[[Any, Any], Any]:
    async def read_frame(self: Any, max_size: Any) -> Any:
        frame = await original(self, max_size)
        tap = getattr(self, _SESSION)
        if tap is not None:
            tap.frames.received(OPCODES[frame.opcode], bytes(frame.data), frame.fin)
        return frame

    return read_frame


def _make_write_frame_sync(original: Callable[..., None]) -> Callable[..., None]:
    def write_frame_sync(self: Any, fin: bool, opcode: int, data: Any) -> None:
        tap = getattr(self, _SESSION)
        if tap is not None:
            tap.check_sent(OPCODES[opcode], bytes(data), fin, _MISS[0])
        original(self, fin, opcode, data)

    return write_frame_sync


def _make_connection_lost(original: Callable[[Any, Any], None]) -> Callable[[Any, Any], None]:
    def connection_lost(self: Any, exc: BaseException | None) -> None:
        tap = getattr(self, _SESSION)
        session = None if tap is None else tap.recording
        if session is not None and not session.finished:
            if session.interaction.response is None:
                message = "no answer to the upgrade" if exc is None else str(exc)
                kind = "EOFError" if exc is None else type(exc).__name__
                session.failed(Failure("protocol_error", kind, message))
            else:
                tap.frames.ended(dropped(exc))
        original(self, exc)

    return connection_lost


def _make_await(original: Callable[[Any], Any], module: ModuleType) -> Callable[[Any], Any]:
    async def __await_impl__(self: Any) -> Any:
        opening = self._create_connection
        if (
            runtime.active() is not None
            and isinstance(opening, functools.partial)
            and getattr(opening.func, "__name__", "") == "create_connection"
        ):
            opener = functools.partial(_open, self, module, opening.func)
            self._create_connection = functools.partial(opener, *opening.args, **opening.keywords)
        return await original(self)

    return __await_impl__


async def _open(
    connect: Any,
    module: ModuleType,
    create_connection: Callable[..., Any],
    factory: Callable[[], Any],
    host: str,
    port: int,
    **kwargs: Any,
) -> Any:
    """``loop.create_connection(factory, host, port, **kwargs)`` under a tape."""
    tape = runtime.active()
    if tape is None:
        return await create_connection(factory, host, port, **kwargs)
    protocol = factory()
    ws_uri = connect._wsuri
    request, key = _request(module, protocol, ws_uri)
    _key.set(key)  # for the handshake, once the connection is open

    plan = begin(tape, request)
    with serving(tape, plan, failure_of):
        session = session_of(tape, plan)
        if isinstance(session, SessionRecording):
            setattr(protocol, _SESSION, FrameTap(FrameRecorder(session), session))
            return await create_connection(lambda: protocol, host, port, **kwargs)
        else:
            raise_if_never_opened(session)
            transport = ReplayTransport(protocol, session, (host, port))
            setattr(protocol, _SESSION, FrameTap(FrameChecker(session, transport.schedule)))
            protocol.connection_made(transport)
            return transport, protocol


def _request(module: ModuleType, protocol: Any, ws_uri: Any) -> tuple[Request, str]:
    """The upgrade request ``WebSocketClientProtocol.handshake`` writes, built as it does."""
    headers = module.Headers()
    headers["Host"] = module.build_host(ws_uri.host, ws_uri.port, ws_uri.secure)
    if ws_uri.user_info:
        headers["Authorization"] = module.build_authorization_basic(*ws_uri.user_info)
    if protocol.origin is not None:
        headers["Origin"] = protocol.origin
    key: str = module.build_request(headers)
    extensions = protocol.available_extensions
    if extensions is not None:
        headers["Sec-WebSocket-Extensions"] = module.build_extension(
            [(factory.name, factory.get_request_params()) for factory in extensions]
        )
    if protocol.available_subprotocols is not None:
        headers["Sec-WebSocket-Protocol"] = module.build_subprotocol(
            protocol.available_subprotocols
        )
    if protocol.extra_headers is not None:
        headers.update(protocol.extra_headers)
    if protocol.user_agent_header:
        headers.setdefault("User-Agent", protocol.user_agent_header)
    return upgrade_request(ws_uri, headers), key
