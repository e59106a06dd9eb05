"""websocket-client (``websocket.create_connection``, ``WebSocket``, ``WebSocketApp``): all
of them connect through ``WebSocket.connect`` and pass every frame through
``WebSocket.send_frame`` (before masking) and ``WebSocket.recv_frame`` (after unmasking).

The upgrade request is built first, as the library builds it (``_get_handshake_headers``,
with the key it will send), so the tape decides before any socket exists. Recording reads
the upgrade's answer from the lines the library reads (``_http.recv_line``), byte for byte.

Replay opens no network connection: ``connect`` is handed one end of a local socket pair
(its own ``socket`` option) whose other end ``websocket_replay.ReplayPeer`` serves, so the
library's handshake checks, frame parser and closing handshake run. websocket-client
negotiates no extensions (no permessage-deflate).
"""

from __future__ import annotations

import contextlib
import contextvars
import sys
from collections.abc import Callable, Iterator
from types import ModuleType
from typing import Any

from ..._core import runtime
from ..._core.blame import passed_through
from ..._core.exchange import begin, serving
from ..._core.models import OPCODES, Request
from ..._core.wire.websocket import SessionRecording, session_of
from .. import ledger
from ..wire import parse_head
from .replay import ReplayPeer
from .taps import (
    FrameChecker,
    FrameRecorder,
    dropped,
    failure_of,
    raise_if_never_opened,
)

__tracebackhide__ = passed_through

_SESSION = "_agenttape_session"

_key: contextvars.ContextVar[str | None] = contextvars.ContextVar(
    "agenttape_websocket_client_key", default=None
)
"""The key the handshake being built sends: the one in the request the tape decided on."""

_head: contextvars.ContextVar[bytearray | None] = contextvars.ContextVar(
    "agenttape_websocket_client_head", default=None
)
"""The raw lines of the upgrade's answer, while a recorded handshake reads them."""


def install(core: ModuleType) -> list[ledger.Patch]:
    """Patches ``websocket._core`` and the handshake modules it imported (reached through
    ``sys.modules``: nothing is imported here)."""
    web_socket = core.WebSocket
    handshake = sys.modules["websocket._handshake"]
    http = sys.modules["websocket._http"]
    module_attribute: ledger.Technique = "module attribute"
    return [
        ledger.default(web_socket, _SESSION, None),
        ledger.wrap(web_socket, "connect", lambda found: _make_connect(found, handshake)),
        ledger.wrap(web_socket, "send_frame", _make_send_frame),
        ledger.wrap(web_socket, "recv_frame", _make_recv_frame),
        ledger.wrap(web_socket, "shutdown", _make_shutdown),
        ledger.Patch(handshake, "_create_sec_websocket_key", _make_key, module_attribute),
        ledger.Patch(http, "recv_line", _make_recv_line, module_attribute),
    ]


def _make_key(original: Callable[[], str]) -> Callable[[], str]:
    def _create_sec_websocket_key() -> str:
        return _key.get() or original()

    return _create_sec_websocket_key


def _make_recv_line(original: Callable[[Any], bytes]) -> Callable[[Any], bytes]:
    def recv_line(sock: Any) -> bytes:
        line = original(sock)
        head = _head.get()
        if head is not None:
            head += line
        return line

    return recv_line


@contextlib.contextmanager
def _setting(variable: contextvars.ContextVar[Any], value: Any) -> Iterator[None]:
    token = variable.set(value)
    try:
        yield
    finally:
        variable.reset(token)


def _upgrade_request(handshake: ModuleType, url: str, options: dict[str, Any]) -> Request:
    """The request ``handshake`` will send for ``url``, built as it builds it."""
    hostname, port, resource, _secure = sys.modules["websocket._url"].parse_url(url)
    lines, _key_sent = handshake._get_handshake_headers(resource, url, hostname, port, options)
    headers = parse_head("\r\n".join(lines).encode("utf-8"))[3]
    return Request("GET", url, headers, b"")


def _make_connect(original: Callable[..., None], handshake: ModuleType) -> Callable[..., None]:
    def connect(self: Any, url: str, **options: Any) -> None:
        tape = runtime.active()
        if tape is None:
            return original(self, url, **options)
        key = handshake._create_sec_websocket_key()
        with _setting(_key, key):
            request = _upgrade_request(handshake, url, options)

        plan = begin(tape, request)
        with serving(tape, plan, failure_of):
            session = session_of(tape, plan)
            if isinstance(session, SessionRecording):
                recorder = _Recorder(session)
                setattr(self, _SESSION, recorder)
                head = bytearray()
                try:
                    with _setting(_key, key), _setting(_head, head):
                        original(self, url, **options)
                except BaseException as exc:
                    recorder.refused(head, exc)
                    raise
                recorder.opened(head)
            else:
                raise_if_never_opened(session)
                peer = ReplayPeer(session)
                client = peer.client
                setattr(self, _SESSION, FrameChecker(session, peer.schedule))
                peer.start()
                with _setting(_key, key):
                    original(self, url, **{**options, "socket": client})

    return connect


def _make_send_frame(original: Callable[[Any, Any], int]) -> Callable[[Any, Any], int]:
    def send_frame(self: Any, frame: Any) -> int:
        tap = getattr(self, _SESSION)
        if tap is not None:
            tap.sent(OPCODES[frame.opcode], bytes(frame.data), bool(frame.fin))
        return original(self, frame)

    return send_frame


def _make_recv_frame(original: Callable[[Any], Any]) -> Callable[[Any], Any]:
    def recv_frame(self: Any) -> Any:
        tap = getattr(self, _SESSION)
        try:
            frame = original(self)
        except Exception as exc:
            if tap is not None:
                # The library's own exception for the server's end of stream replays as one.
                eof = type(exc).__name__ == "WebSocketConnectionClosedException"
                tap.ended(dropped(None if eof else exc))
            raise
        if tap is not None:
            tap.received(OPCODES[frame.opcode], bytes(frame.data), bool(frame.fin))
        return frame

    return recv_frame


def _make_shutdown(original: Callable[[Any], None]) -> Callable[[Any], None]:
    def shutdown(self: Any) -> None:
        tap = getattr(self, _SESSION)
        if tap is not None:
            setattr(self, _SESSION, None)
            tap.ended(None)
        original(self)

    return shutdown


class _Recorder(FrameRecorder):
    """Writes down what the real connection carries, the upgrade's answer included."""

    def opened(self, head: bytearray, body: bytes = b"") -> None:
        last = bytes(head).rstrip(b"\r\n").rpartition(b"\r\n\r\n")[2]
        version, status, reason, headers = parse_head(last)
        self.session.opened(int(status), reason, headers, body, version)

    def refused(self, head: bytearray, exc: BaseException) -> None:
        """The handshake failed: an answer other than 101 is kept with its body."""
        if head and b"\r\n\r\n" in head and self.session.interaction.response is None:
            self.opened(head, getattr(exc, "resp_body", None) or b"")
            self.session.finish()
