"""HTTP/2 towards a client of the recording proxy, on h2: one thread per request stream,
writes through one lock."""

from __future__ import annotations

import contextlib
import select
import socket
import ssl
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from .._adapters.header_tables import decode_header_set
from .._core.models import Headers, Request, Response
from .adapter import ProxyRequest
from .guard import foreign_host, from_web_page
from .upstream import (
    READ_SIZE,
    ClientGone,
    Origin,
    UpstreamPool,
    Waiter,
    upstream_headers,
)

if TYPE_CHECKING:
    from .listener import ProxyServer

H2_PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
H2_DROPPED = frozenset(
    {"connection", "keep-alive", "proxy-connection", "transfer-encoding", "upgrade", "te"}
)


class _Stream:
    __slots__ = ("body", "gone", "headers", "stream_id")

    def __init__(self, stream_id: int, headers: list[tuple[bytes, bytes]]) -> None:
        self.stream_id = stream_id
        self.headers = headers
        self.body: list[bytes] = []
        self.gone = threading.Event()


class ClientConnection:
    """One connection of a client to the proxy: the server it reached, its socket, the pool
    of upstream connections its requests share, and what was read from it before its
    protocol was known."""

    def __init__(
        self, server: ProxyServer, sock: socket.socket, pool: UpstreamPool, pending: bytes
    ) -> None:
        self.server = server
        self.sock = sock
        self.pool = pool
        self.pending = pending


class H2Connection(ClientConnection):
    """One client connection speaking HTTP/2; each request stream is served in a thread."""

    def __init__(
        self,
        server: ProxyServer,
        sock: socket.socket,
        pool: UpstreamPool,
        origin: Origin,
        pending: bytes = b"",
        base_url: bool = False,
    ) -> None:
        import h2.config
        import h2.connection

        super().__init__(server, sock, pool, pending)
        self.base_url = base_url
        self.origin = origin
        self.conn = h2.connection.H2Connection(
            h2.config.H2Configuration(client_side=False, header_encoding=None)
        )
        self.lock = threading.RLock()
        self.window = threading.Condition(self.lock)
        self.streams: dict[int, _Stream] = {}

    def flush(self) -> None:
        """Sends what h2 has queued; the caller holds the lock."""
        data = self.conn.data_to_send()
        if not data:
            return
        view = memoryview(data)
        while view:
            try:
                sent = self.sock.send(view)
            except (ssl.SSLWantWriteError, ssl.SSLWantReadError, BlockingIOError):
                select.select([], [self.sock], [], 1.0)
                continue
            view = view[sent:]

    def run(self) -> None:
        import h2.events
        import h2.exceptions

        with self.lock:
            self.conn.initiate_connection()
            self.conn.increment_flow_control_window(2**24)
            self.flush()
        self.sock.setblocking(False)
        data: bytes | None = self.pending
        try:
            while True:
                if not data:
                    data = self._read()
                    if data is None:
                        continue
                    if not data:
                        return
                with self.lock:
                    try:
                        events = self.conn.receive_data(data)
                    except h2.exceptions.ProtocolError:
                        self.flush()
                        return
                    data = b""
                    for event in events:
                        self._on(event, h2.events)
                    self.flush()
        finally:
            with self.lock:
                for stream in self.streams.values():
                    stream.gone.set()
                self.window.notify_all()

    def _read(self) -> bytes | None:
        sock = self.sock
        if not (isinstance(sock, ssl.SSLSocket) and sock.pending()):
            select.select([sock], [], [])
        with self.lock:
            try:
                return sock.recv(READ_SIZE)
            except (ssl.SSLWantReadError, ssl.SSLWantWriteError, BlockingIOError):
                return None
            except (OSError, ValueError):
                return b""

    def _on(self, event: Any, events: Any) -> None:
        conn = self.conn
        if isinstance(event, events.RequestReceived):
            self.streams[event.stream_id] = _Stream(event.stream_id, list(event.headers))
        elif isinstance(event, events.DataReceived):
            stream = self.streams.get(event.stream_id)
            if stream is not None:
                stream.body.append(event.data)
            conn.acknowledge_received_data(event.flow_controlled_length, event.stream_id)
        elif isinstance(event, events.StreamEnded):
            stream = self.streams.get(event.stream_id)
            if stream is not None:
                threading.Thread(
                    target=self._serve, args=(stream,), name="agenttape-proxy-stream", daemon=True
                ).start()
        elif isinstance(event, events.StreamReset):
            stream = self.streams.pop(event.stream_id, None)
            if stream is not None:
                stream.gone.set()
            self.window.notify_all()
        elif isinstance(event, (events.WindowUpdated, events.RemoteSettingsChanged)):
            self.window.notify_all()
        elif isinstance(event, events.ConnectionTerminated):
            for stream in self.streams.values():
                stream.gone.set()
            self.window.notify_all()

    def _serve(self, stream: _Stream) -> None:
        method = dict(stream.headers).get(b":method", b"GET").decode("ascii", "replace")
        client = _H2Client(self, stream, method)
        try:
            refused = self._refused(stream)
            if refused is not None:
                self.server.log(f"refused an HTTP/2 request: {refused}")
                body = f"agenttape proxy: refused: {refused}\n".encode()
                client.head(Response(403, "", "HTTP/2", [("content-type", "text/plain")]))
                client.data(body)
                client.end()
                return
            incoming = self._incoming(stream)
            self.server.adapter.handle(incoming, client, self.pool)
        except ClientGone:
            pass
        except Exception as exc:
            self.server.log(f"HTTP/2 stream failed: {type(exc).__name__}: {exc}")
            client.reset()
        finally:
            with self.lock:
                self.streams.pop(stream.stream_id, None)

    def _refused(self, stream: _Stream) -> str | None:
        """In base-URL mode, a request that names another host than this machine (DNS
        rebinding) or that a web page made."""
        if not self.base_url:
            return None
        headers = decode_header_set(stream.headers)
        authority = dict(headers).get(":authority") or dict(headers).get("host")
        return foreign_host(authority) or from_web_page(headers)

    def _incoming(self, stream: _Stream) -> ProxyRequest:
        pseudo: dict[bytes, bytes] = {}
        regular: list[tuple[bytes, bytes]] = []
        for name, value in stream.headers:
            if name.startswith(b":"):
                pseudo[name] = value
            else:
                regular.append((name, value))
        method = pseudo.get(b":method", b"GET").decode("ascii")
        path = pseudo.get(b":path", b"/").decode("latin-1")
        authority = pseudo.get(b":authority", self.origin.authority.encode()).decode("latin-1")
        headers = list(decode_header_set(regular))
        body = b"".join(stream.body)
        if not any(name == "host" for name, _ in headers):
            headers.insert(0, ("host", authority))
        if body and not any(name in ("content-length", "transfer-encoding") for name, _ in headers):
            headers.append(("content-length", str(len(body))))
        server = self.server
        if self.base_url and server.upstream:
            base = urlsplit(server.upstream)
            path = base.path.rstrip("/") + path
            headers = [(n, self.origin.authority) if n == "host" else (n, v) for n, v in headers]
        url = f"{self.origin.scheme}://{self.origin.authority}{path}"
        request = Request(method, url, upstream_headers(headers), body)
        return ProxyRequest(request, server.route(self.origin), path)


class _H2Client:
    """Writes one response on an HTTP/2 stream: header names in lower case and without the
    connection-specific ones HTTP/2 forbids; no reason phrase exists in HTTP/2."""

    def __init__(self, connection: H2Connection, stream: _Stream, method: str) -> None:
        self._connection = connection
        self._stream = stream
        self._method = method
        self._body = True
        self.waiter: Waiter = _H2Waiter(stream)

    def _call(self, action: Callable[[Any], None]) -> None:
        import h2.exceptions

        connection = self._connection
        with connection.lock:
            if self._stream.gone.is_set():
                raise ClientGone()
            try:
                action(connection.conn)
                connection.flush()
            except (h2.exceptions.H2Error, OSError) as exc:
                self._stream.gone.set()
                raise ClientGone() from exc

    def head(self, response: Response) -> None:
        self._body = self._method != "HEAD" and response.status not in (204, 304)
        headers = [(b":status", str(response.status).encode())]
        headers += [
            (name.lower().encode("latin-1"), value.encode("latin-1"))
            for name, value in response.headers
            if name.lower() not in H2_DROPPED
        ]
        self._call(lambda conn: conn.send_headers(self._stream.stream_id, headers))

    def data(self, chunk: bytes) -> None:
        if not self._body:
            return
        connection, stream_id = self._connection, self._stream.stream_id
        view = memoryview(chunk)
        while view:
            with connection.lock:
                while True:
                    if self._stream.gone.is_set():
                        raise ClientGone()
                    try:
                        window = connection.conn.local_flow_control_window(stream_id)
                    except Exception as exc:
                        raise ClientGone() from exc
                    if window > 0:
                        break
                    connection.window.wait(1.0)
                size = min(window, connection.conn.max_outbound_frame_size, len(view))
                self._call(_sender(stream_id, bytes(view[:size])))
            view = view[size:]

    def end(self) -> None:
        self._call(lambda conn: conn.end_stream(self._stream.stream_id))

    def trailers(self, headers: Headers) -> None:
        """Ends the response with trailers (gRPC's status and trailing metadata)."""
        fields = [
            (name.lower().encode("latin-1"), value.encode("latin-1"))
            for name, value in headers
            if name.lower() not in H2_DROPPED
        ]
        self._call(lambda conn: conn.send_headers(self._stream.stream_id, fields, end_stream=True))

    def flush(self) -> None:
        """Everything is sent as it is written."""

    def reset(self) -> None:
        from h2.errors import ErrorCodes

        with contextlib.suppress(ClientGone):
            self._call(
                lambda conn: conn.reset_stream(self._stream.stream_id, ErrorCodes.INTERNAL_ERROR)
            )

    def close(self) -> None:
        self.reset()

    def hold(self) -> None:
        self._stream.gone.wait()


def _sender(stream_id: int, piece: bytes) -> Callable[[Any], None]:
    def send(conn: Any) -> None:
        conn.send_data(stream_id, piece)

    return send


class _H2Waiter(Waiter):
    poll = 0.2

    def __init__(self, stream: _Stream) -> None:
        self._stream = stream

    def gone(self) -> bool:
        return self._stream.gone.is_set()
