"""The recording proxy's side towards a gRPC server: HTTP/2 (h2c with prior knowledge, or
TLS with ALPN ``h2``), with trailers.

gRPC needs HTTP/2 end to end: its status and trailing metadata travel in trailers, which
HTTP/1.1 towards the server cannot carry. A call is sent whole (its request stream ended, as
the proxy's HTTP/2 engine hands it over) on a connection of its own, and the answer is read
frame by frame: the head, each DATA frame as a body piece, then the trailers.
"""

from __future__ import annotations

import ssl
import threading
from collections.abc import Callable
from typing import Any, NamedTuple

from .._adapters.header_tables import decode_headers
from .._core.models import Headers, Request
from .upstream import READ_SIZE, Origin, UpstreamError, open_socket

_DROPPED = frozenset(
    ("host", "connection", "keep-alive", "proxy-connection", "transfer-encoding", "upgrade")
)
_context: ssl.SSLContext | None = None
_lock = threading.Lock()


def _tls() -> ssl.SSLContext:
    global _context
    with _lock:
        if _context is None:
            _context = ssl.create_default_context()
            _context.set_alpn_protocols(["h2"])
        return _context


def authority(origin: Origin) -> str:
    """``host:port``, the port always written (as a gRPC URL names it)."""
    host = f"[{origin.host}]" if ":" in origin.host else origin.host
    return f"{host}:{origin.port}"


class Answer(NamedTuple):
    """Where a call's answer is reported as it arrives: its head (status and headers), each
    DATA frame's bytes, its trailers."""

    head: Callable[[int, Headers], None]
    data: Callable[[bytes], None]
    trailers: Callable[[Headers], None]


def call(origin: Origin, request: Request, path: str, answer: Answer) -> None:
    """Sends ``request`` to ``origin`` over HTTP/2 and reports its ``answer`` as it arrives.
    Raises UpstreamError when the server cannot be reached or the stream fails."""
    import h2.config
    import h2.connection
    import h2.events
    import h2.exceptions

    sock = open_socket(origin, _tls)
    try:
        conn = h2.connection.H2Connection(
            h2.config.H2Configuration(client_side=True, header_encoding=None)
        )
        conn.initiate_connection()
        stream_id = conn.get_next_available_stream_id()
        scheme = "https" if origin.scheme == "https" else "http"
        headers = [
            (b":method", request.method.encode("ascii")),
            (b":scheme", scheme.encode("ascii")),
            (b":path", path.encode("latin-1")),
            (b":authority", authority(origin).encode("latin-1")),
        ]
        headers += [
            (name.lower().encode("latin-1"), value.encode("latin-1"))
            for name, value in request.headers
            if name.lower() not in _DROPPED and not name.startswith(":")
        ]
        conn.send_headers(stream_id, headers, end_stream=not request.body)
        body = memoryview(request.body)
        ended = False
        while True:
            while body:
                window = min(
                    conn.local_flow_control_window(stream_id), conn.max_outbound_frame_size
                )
                if window <= 0:
                    break
                conn.send_data(stream_id, bytes(body[:window]), end_stream=len(body) <= window)
                body = body[window:]
            sock.sendall(conn.data_to_send())
            if ended:
                return
            try:
                received = sock.recv(READ_SIZE)
            except OSError as exc:
                raise UpstreamError("read_error", type(exc).__name__, str(exc)) from exc
            if not received:
                raise UpstreamError(
                    "read_error", "RemoteProtocolError", "the server closed the connection"
                )
            try:
                events = conn.receive_data(received)
            except h2.exceptions.ProtocolError as exc:
                raise UpstreamError("protocol_error", type(exc).__name__, str(exc)) from exc
            for event in events:
                ended = _on(event, h2.events, conn, stream_id, answer) or ended
    finally:
        sock.close()


def _on(event: Any, events: Any, conn: Any, stream_id: int, answer: Answer) -> bool:
    """Reports one HTTP/2 event of the call; True once the answer has ended."""
    if getattr(event, "stream_id", stream_id) != stream_id:
        return False
    if isinstance(event, events.ResponseReceived):
        pseudo = dict(event.headers)
        status = int(pseudo.get(b":status", b"200"))
        answer.head(
            status, decode_headers([(n, v) for n, v in event.headers if not n.startswith(b":")])
        )
    elif isinstance(event, events.DataReceived):
        conn.acknowledge_received_data(event.flow_controlled_length, stream_id)
        if event.data:
            answer.data(event.data)
    elif isinstance(event, events.TrailersReceived):
        answer.trailers(decode_headers(list(event.headers)))
    elif isinstance(event, events.StreamEnded):
        return True
    elif isinstance(event, events.StreamReset):
        raise UpstreamError(
            "read_error", "StreamReset", f"the server reset the stream ({event.error_code})"
        )
    elif isinstance(event, events.ConnectionTerminated):
        raise UpstreamError("read_error", "ConnectionTerminated", "the server ended the connection")
    return False
