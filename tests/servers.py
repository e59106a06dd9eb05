"""Real HTTP servers on 127.0.0.1 for the tests: one scriptable server, stopped to prove replay
is offline. Responses are written as raw bytes so header case, duplicates, chunk boundaries and
half-written bodies are exactly what a test asks for."""

from __future__ import annotations

import contextlib
import gzip
import hashlib
import http.server
import itertools
import json
import re
import socket
import ssl
import sys
import threading
import time
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, urlsplit


@dataclass
class Seen:
    """A request as the server received it."""

    method: str
    path: str
    query: list[tuple[str, str]]
    headers: list[tuple[str, str]]
    body: bytes

    def json(self) -> Any:
        return json.loads(self.body)

    def header(self, name: str) -> str | None:
        for key, value in self.headers:
            if key.lower() == name.lower():
                return value
        return None


@dataclass
class Reply:
    """What to send back.

    ``chunks`` (a list, or any iterable with ``chunked=True`` so a test can hold the server
    between chunks) are written one by one with ``delay`` seconds before each after the first; with
    ``chunked=True`` each becomes one chunk of a chunked transfer encoding, else a
    Content-Length covers them all (unless ``length`` overrides it, to cut a body short).
    ``framed=False`` sends no length at all: the body runs until the server closes the
    connection. ``version`` is the status line's protocol.
    ``close_after_head`` drops the connection right after the headers; ``stall`` sleeps before
    the head, to provoke read timeouts. ``gate`` holds every chunk after the first until the
    test sets it (the connection drops if it stays shut for 10 s), to prove a client got the
    first chunk while the rest was not yet sent.
    """

    status: int = 200
    reason: str | None = None
    headers: list[tuple[str, str]] = field(default_factory=list)
    chunks: Iterable[bytes] = field(default_factory=list)
    delay: float = 0.0
    chunked: bool = False
    length: int | None = None
    framed: bool = True
    version: str = "HTTP/1.1"
    stall: float = 0.0
    close_after_head: bool = False
    gate: threading.Event | None = None


def json_reply(document: Any, status: int = 200, headers: Iterable[tuple[str, str]] = ()) -> Reply:
    return Reply(
        status=status,
        headers=[("Content-Type", "application/json"), *headers],
        chunks=[json.dumps(document).encode()],
    )


def chat_completion(
    content: str, *, id: str = "chatcmpl-1", model: str = "gpt-4o-mini", tokens: int = 1
) -> dict[str, Any]:
    """An OpenAI-shaped chat completion, as OpenAI-compatible APIs answer one."""
    return {
        "id": id,
        "object": "chat.completion",
        "created": 1,
        "model": model,
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": content},
                "finish_reason": "stop",
            }
        ],
        "usage": {"prompt_tokens": tokens, "completion_tokens": tokens, "total_tokens": 2 * tokens},
    }


def echo_path(seen: Seen) -> Reply:
    """Answers with the path it was asked for; a path holding ``/status/N`` answers N."""
    status = re.search(r"/status/(\d{3})(?:/|$)", seen.path)
    return json_reply({"path": seen.path}, status=int(status.group(1)) if status else 200)


def gzip_reply(payload: bytes, content_type: str = "application/json") -> Reply:
    return Reply(
        headers=[("Content-Type", content_type), ("Content-Encoding", "gzip")],
        chunks=[gzip.compress(payload, mtime=0)],
    )


def sse_reply(events: list[bytes], delay: float = 0.0) -> Reply:
    return Reply(
        headers=[("Content-Type", "text/event-stream"), ("Cache-Control", "no-cache")],
        chunks=events,
        delay=delay,
        chunked=True,
    )


App = Callable[[Seen], Reply]


def ended_by_a_later_request() -> App:
    """An event stream (``GET``) the server ends only when the client ``POST``s, as an MCP
    server ends a session's event stream at the closing request: one event, then nothing
    until the POST comes (the stream ends by itself after 10 s)."""
    closed = threading.Event()

    def events() -> Iterable[bytes]:
        yield b"data: 1\n\n"
        closed.wait(10)

    def app(seen: Seen) -> Reply:
        if seen.method == "POST":
            closed.set()
            return json_reply({"closed": True})
        return Reply(headers=[("Content-Type", "text/event-stream")], chunks=events(), chunked=True)

    return app


class _Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    # Head and body go out in separate writes; with Nagle on, the body would wait for the
    # client's delayed ACK (40 ms per request on Linux).
    disable_nagle_algorithm = True
    server: _HTTPServer

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def _handle(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            body = self._read_chunked()
        else:
            body = self.rfile.read(length) if length else b""
        parts = urlsplit(self.path)
        seen = Seen(
            method=self.command,
            path=parts.path,
            query=parse_qsl(parts.query, keep_blank_values=True),
            headers=list(self.headers.items()),
            body=body,
        )
        self.server.owner.seen.append(seen)
        reply = self.server.owner.app(seen)
        self._send(reply)

    def _read_chunked(self) -> bytes:
        body = b""
        while True:
            size = int(self.rfile.readline().strip(), 16)
            if size == 0:
                self.rfile.readline()
                return body
            body += self.rfile.read(size)
            self.rfile.readline()

    def _send(self, reply: Reply) -> None:
        if reply.stall:
            time.sleep(reply.stall)
        reason = (
            reply.reason if reply.reason is not None else self.responses.get(reply.status, ("",))[0]
        )
        head = [f"{reply.version} {reply.status} {reason}"]
        head += [f"{name}: {value}" for name, value in reply.headers]
        if reply.chunked:
            head.append("Transfer-Encoding: chunked")
        elif reply.framed:
            total = (
                sum(len(c) for c in list(reply.chunks)) if reply.length is None else reply.length
            )
            head.append(f"Content-Length: {total}")
        self.wfile.write(("\r\n".join(head) + "\r\n\r\n").encode("latin-1"))
        self.wfile.flush()
        if reply.close_after_head:
            self.close_connection = True
            return
        for index, chunk in enumerate(reply.chunks):
            if index and reply.gate is not None and not reply.gate.wait(10):
                self.close_connection = True
                return
            if index and reply.delay:
                time.sleep(reply.delay)
            if reply.chunked:
                self.wfile.write(f"{len(chunk):x}\r\n".encode() + chunk + b"\r\n")
            else:
                self.wfile.write(chunk)
            self.wfile.flush()
        if reply.chunked:
            self.wfile.write(b"0\r\n\r\n")
        if reply.length is not None or not reply.framed:
            self.close_connection = True

    do_GET = do_POST = do_PUT = do_DELETE = do_PATCH = do_HEAD = _handle


class _HTTPServer(http.server.ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 256  # hundreds of clients connecting at once are not turned away
    owner: Server

    def handle_error(self, request: Any, client_address: Any) -> None:
        """A client that went away (killed on purpose by a test) is no error to print."""
        if not isinstance(sys.exc_info()[1], (ConnectionError, TimeoutError)):
            super().handle_error(request, client_address)


class Server:
    """A threaded server on 127.0.0.1 that answers with ``app``; ``stop()`` closes the port.
    With ``tls`` (a server-side SSL context) it speaks HTTPS."""

    def __init__(self, app: App, tls: ssl.SSLContext | None = None) -> None:
        self.app = app
        self.seen: list[Seen] = []
        self._server = _HTTPServer(("127.0.0.1", 0), _Handler)
        self._server.owner = self
        if tls is not None:
            self._server.socket = tls.wrap_socket(self._server.socket, server_side=True)
        self.port = self._server.server_port
        self.url = f"{'https' if tls else 'http'}://127.0.0.1:{self.port}"
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True
        )
        self._thread.start()
        self.running = True

    def stop(self) -> None:
        if self.running:
            self.running = False
            self._server.shutdown()
            self._server.server_close()
            self._thread.join()

    def __enter__(self) -> Server:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


class RawServer:
    """A server on 127.0.0.1 that hands each connection, raw, to ``answer`` (in a thread of its
    own; the connection is closed when ``answer`` returns): for what ``Server`` cannot send — a
    reset mid-body, framing by Content-Length alone, an upgrade it never completes."""

    def __init__(self, answer: Callable[[socket.socket], None]) -> None:
        self._answer = answer
        self._listener = socket.create_server(("127.0.0.1", 0))
        self._listener.settimeout(0.05)  # accept wakes up to see the listener closed
        self.port = self._listener.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self._thread = threading.Thread(target=self._accept, daemon=True)
        self._thread.start()

    def _accept(self) -> None:
        while True:
            try:
                connection, _ = self._listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            connection.settimeout(10)
            threading.Thread(target=self._serve, args=(connection,), daemon=True).start()

    def _serve(self, connection: socket.socket) -> None:
        with connection, contextlib.suppress(OSError):  # a client that left, a read timed out
            self._answer(connection)

    def stop(self) -> None:
        """Closes the port: nothing connects once this returns."""
        self._listener.close()
        self._thread.join(5)


def read_head(connection: socket.socket, received: bytes = b"") -> tuple[bytes, bytes] | None:
    """A request head (up to its blank line) and the bytes after it, reading on from
    ``received`` (what came after the previous request); None when the client closed first."""
    while b"\r\n\r\n" not in received:
        data = connection.recv(65536)
        if not data:
            return None
        received += data
    head, _, rest = received.partition(b"\r\n\r\n")
    return head, rest


class OTLPReceiver:
    """An OTLP/HTTP trace receiver app: decodes each export with the protocol's own message
    definitions (opentelemetry-proto), protobuf or JSON, as a collector does, and answers 400
    with the reason when a document does not decode. ``spans`` is every span received."""

    def __init__(self) -> None:
        self.requests: list[Any] = []

    def __call__(self, seen: Seen) -> Reply:
        from google.protobuf import json_format
        from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
            ExportTraceServiceRequest,
        )

        if seen.path != "/v1/traces":
            return Reply(status=404)
        message = ExportTraceServiceRequest()
        try:
            if "json" in (seen.header("content-type") or ""):
                # OTLP/JSON writes trace and span ids as hex; protobuf's JSON form wants base64.
                json_format.ParseDict(_ids_as_base64(json.loads(seen.body)), message)
            else:
                message.ParseFromString(seen.body)
        except Exception as exc:
            return Reply(status=400, chunks=[f"{type(exc).__name__}: {exc}".encode()])
        self.requests.append(message)
        return Reply(headers=[("Content-Type", "application/json")], chunks=[b"{}"])

    @property
    def spans(self) -> list[Any]:
        return [
            span
            for request in self.requests
            for resource in request.resource_spans
            for scope in resource.scope_spans
            for span in scope.spans
        ]


def _ids_as_base64(value: Any) -> Any:
    import base64

    if isinstance(value, dict):
        return {
            key: base64.b64encode(bytes.fromhex(item)).decode()
            if key in ("traceId", "spanId", "parentSpanId") and isinstance(item, str)
            else _ids_as_base64(item)
            for key, item in value.items()
        }
    if isinstance(value, list):
        return [_ids_as_base64(item) for item in value]
    return value


def span_attributes(span: Any) -> dict[str, Any]:
    """A received span's attributes as plain values."""
    return {
        attribute.key: getattr(attribute.value, attribute.value.WhichOneof("value"))
        for attribute in span.attributes
    }


def mcp_event_store() -> Any:
    """An event store for the MCP server, in memory: what makes its event streams resumable
    (a client that reconnects with ``last-event-id`` is sent what it missed). Event ids count
    up from 1; ``events`` lists (id, stream, message)."""
    from mcp.server.streamable_http import EventMessage, EventStore

    class Events(EventStore):
        def __init__(self) -> None:
            self.events: list[tuple[str, str, Any]] = []
            self._ids = itertools.count(1)

        async def store_event(self, stream_id: str, message: Any) -> str:
            event_id = str(next(self._ids))
            self.events.append((event_id, stream_id, message))
            return event_id

        async def replay_events_after(
            self, last_event_id: str, send_callback: Callable[[Any], Awaitable[None]]
        ) -> str | None:
            known = [event for event in self.events if event[0] == last_event_id]
            if not known:
                return None
            stream, after = known[0][1], int(last_event_id)
            for event_id, stream_id, message in self.events:
                if int(event_id) > after and stream_id == stream and message is not None:
                    await send_callback(EventMessage(message, event_id))
            return stream

    return Events()


class MCPApp:
    """The official MCP SDK's server, streamable HTTP under uvicorn, on 127.0.0.1 in a thread;
    it speaks both protocol eras (the 2025-11-25 handshake with session ids, the 2026-07-28
    requests without). Tools: ``add``; ``steps`` (progress notifications and a log message on
    its own response stream); ``announce`` (a tools-changed notification on the session's
    event stream, or to ``subscriptions/listen`` streams); ``drop_stream`` (the server ends
    the session's event stream, which the client resumes with ``last-event-id``). With
    ``resumable`` the server keeps its events (``mcp_event_store``)."""

    def __init__(self, resumable: bool = False) -> None:
        import uvicorn
        from mcp.server.mcpserver import Context, MCPServer

        server = MCPServer("tools")

        @server.tool()
        def add(a: int, b: int) -> int:
            """Adds two numbers."""
            return a + b

        async def steps(n: int, ctx: Context) -> str:
            """Reports progress ``n`` times, then logs."""
            for step in range(1, n + 1):
                await ctx.report_progress(step, n, f"step {step}")
            await ctx.log("info", f"did {n} steps")
            return f"{n} steps"

        async def announce(ctx: Context) -> str:
            """Tells the client its tools changed."""
            await ctx.session.send_tool_list_changed()
            await ctx.notify_tools_changed()
            return "announced"

        async def drop_stream(ctx: Context) -> str:
            """Ends the session's event stream."""
            await ctx.close_standalone_sse_stream()
            return "dropped"

        for tool in (steps, announce, drop_stream):
            # The SDK evaluates annotations in this module's globals, where Context is not.
            tool.__annotations__["ctx"] = Context
            server.tool()(tool)

        self.events = mcp_event_store() if resumable else None
        listener = socket.socket()
        listener.bind(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{listener.getsockname()[1]}/mcp"
        config = uvicorn.Config(
            server.streamable_http_app(event_store=self.events),
            log_level="warning",
            timeout_graceful_shutdown=1,
        )
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(
            target=self._server.run, kwargs={"sockets": [listener]}, daemon=True
        )
        self._thread.start()
        while not self._server.started:
            if not self._thread.is_alive():
                raise RuntimeError("the MCP server did not start")
            time.sleep(0.01)

    def stop(self) -> None:
        self._server.should_exit = True
        self._thread.join()

    def __enter__(self) -> MCPApp:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def refused_port() -> int:
    """A loopback port with nothing listening, for connection-refused errors."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def sequence(*replies: Reply) -> App:
    """Answers the n-th request with the n-th reply, the last one from then on (a 429 then a
    200, a throttled call then a good one)."""
    count = itertools.count()

    def app(seen: Seen) -> Reply:
        return replies[min(next(count), len(replies) - 1)]

    return app


S3_BUCKETS_XML = (
    b'<?xml version="1.0" encoding="UTF-8"?>\n'
    b'<ListAllMyBucketsResult xmlns="http://s3.amazonaws.com/doc/2006-03-01/">'
    b"<Owner><ID>owner-1</ID><DisplayName>tapes</DisplayName></Owner><Buckets>"
    b"<Bucket><Name>alpha</Name><CreationDate>2025-01-01T00:00:00.000Z</CreationDate></Bucket>"
    b"<Bucket><Name>beta</Name><CreationDate>2025-02-01T00:00:00.000Z</CreationDate></Bucket>"
    b"</Buckets></ListAllMyBucketsResult>"
)


def aws_app(throttle_first: int = 0) -> App:
    """A local stand-in for two AWS protocols: S3 ``ListBuckets`` (REST-XML, ``GET /``) and
    ``PutObject`` (``PUT``, sent by botocore behind ``Expect: 100-continue``), and
    DynamoDB ``ListTables`` (JSON 1.0, ``X-Amz-Target``); the first ``throttle_first`` JSON
    calls get DynamoDB's ``ThrottlingException``."""
    count = itertools.count()

    def app(seen: Seen) -> Reply:
        target = seen.header("X-Amz-Target")
        if seen.method == "PUT":
            etag = hashlib.md5(seen.body).hexdigest()
            return Reply(headers=[("ETag", f'"{etag}"'), ("x-amz-request-id", "REQ2")])
        if target is None:
            return Reply(
                headers=[("Content-Type", "application/xml"), ("x-amz-request-id", "REQ1")],
                chunks=[S3_BUCKETS_XML],
            )
        json_type = [("Content-Type", "application/x-amz-json-1.0")]
        if next(count) < throttle_first:
            error = {
                "__type": "com.amazonaws.dynamodb.v20120810#ThrottlingException",
                "message": "Rate of requests exceeds the allowed throughput.",
            }
            return Reply(status=400, headers=json_type, chunks=[json.dumps(error).encode()])
        if target.endswith(".ListTables"):
            return Reply(headers=json_type, chunks=[b'{"TableNames":["orders","users"]}'])
        return Reply(status=400, headers=json_type, chunks=[b'{"__type":"UnknownOperation"}'])

    return app


def path_body(path: str, size: int) -> bytes:
    """``size`` bytes that could only be the answer to ``path``: its text, repeated."""
    if size <= 0:
        return b""
    unit = f"{path}|".encode()
    return (unit * (size // len(unit) + 1))[:size]


def path_app(size: int = 64) -> App:
    """Answers every request with ``path_body(path, size)``, so each response names its request."""

    def app(seen: Seen) -> Reply:
        return Reply(
            headers=[("Content-Type", "application/octet-stream")],
            chunks=[path_body(seen.path, size)],
        )

    return app


Serve = Callable[[App], Server]
"""The ``serve`` fixture: starts a ``Server`` on ``app`` and stops it after the test."""

# Header names in mixed case and out of order, as a client must keep them.
MIXED_CASE_HEADERS = [("Content-Type", "text/plain"), ("X-Zeta", "z"), ("x-alpha", "a")]


def late_reply(stall: float = 1.0) -> Reply:
    """Nothing for ``stall`` seconds, then ``late``: past a client's read timeout."""
    return Reply(stall=stall, chunks=[b"late"])


def echo_text(
    seen: Seen, status: int = 200, reason: str | None = None, chunked: bool = True
) -> Reply:
    """``METHOD /path `` then the body, in pieces, under ``MIXED_CASE_HEADERS`` (an empty
    piece is left out: it would end a chunked body)."""
    pieces = (f"{seen.method} {seen.path} ".encode(), seen.body)
    return Reply(
        status=status,
        reason=reason,
        headers=MIXED_CASE_HEADERS,
        chunks=[piece for piece in pieces if piece],
        chunked=chunked,
    )


def client_app(payload: bytes) -> App:
    """What the client adapter tests ask of one server: ``/gzip`` (``payload``, gzipped),
    ``/pieces`` (three pieces under a Content-Length, a repeated header), ``/missing`` (404),
    ``/moved`` (302 to ``/gzip``), ``/slow`` (``late_reply``); anything else answers with its
    method and body in JSON."""

    def app(seen: Seen) -> Reply:
        if seen.path == "/gzip":
            return gzip_reply(payload)
        if seen.path == "/pieces":
            return Reply(
                headers=[("X-Dup", "1"), ("Content-Type", "text/plain"), ("X-Dup", "2")],
                chunks=[b"a" * 10, b"b" * 10, b"c" * 10],
                delay=0.05,
            )
        if seen.path == "/missing":
            return json_reply({"error": "no such thing"}, status=404)
        if seen.path == "/moved":
            return Reply(status=302, headers=[("Location", "/gzip")])
        if seen.path == "/slow":
            return late_reply()
        return json_reply({"method": seen.method, "body": seen.body.decode()})

    return app


def failing_urls(url: str) -> list[tuple[str, float]]:
    """(URL, timeout) for the failures a client meets live: ``url``'s ``/slow`` read past a
    0.2 s timeout (see ``late_reply``), a refused port, a name that does not resolve."""
    return [
        (url + "/slow", 0.2),
        (f"http://127.0.0.1:{refused_port()}/refused", 5.0),
        ("http://nothing-here.invalid/name", 5.0),
    ]


HALF_JSON = b'{"error": {"message": "Rate limit reached for gpt-4o in organization org-'
RATE_LIMIT_HEADERS = [
    ("Content-Type", "application/json"),
    ("retry-after", "7"),
    ("x-ratelimit-remaining-requests", "0"),
]


def record_then_replay(
    path: Path, server: Server, run: Callable[[], Any], **options: Any
) -> tuple[Any, Any]:
    """Runs ``run`` live while recording, stops the server, runs it again from the cassette."""
    import agenttape

    with agenttape.use_cassette(path, mode="once", **options):
        live = run()
    server.stop()
    with agenttape.use_cassette(path, **options) as tape:
        replayed = run()
        assert tape.all_played
    return live, replayed


async def loaded(path: Path) -> Any:
    """``agenttape.load(path)`` from a coroutine: read in a worker thread, as a blocking read
    must be inside a running loop."""
    import asyncio

    import agenttape

    return await asyncio.to_thread(agenttape.load, path)


async def record_then_replay_async(
    path: Path, server: Server, run: Callable[[], Awaitable[Any]], **options: Any
) -> tuple[Any, Any]:
    """``record_then_replay`` for coroutines, under ``async with``."""
    import agenttape

    async with agenttape.use_cassette(path, mode="once", **options):
        live = await run()
    server.stop()
    async with agenttape.use_cassette(path, **options) as tape:
        replayed = await run()
        assert tape.all_played
    return live, replayed


def assert_a_miss_stays_off_the_network(
    path: Path, server: Server, get: Callable[[str], object]
) -> None:
    """Records ``get`` of ``/known``; then, in mode none, ``get`` of another path raises
    ``UnmatchedInteractionError`` and never reaches the server."""
    import pytest

    import agenttape

    with agenttape.use_cassette(path, mode="all"):
        get(server.url + "/known")
    with (
        agenttape.use_cassette(path, mode="none"),
        pytest.raises(agenttape.UnmatchedInteractionError),
    ):
        get(server.url + "/unknown")
    assert [seen.path for seen in server.seen] == ["/known"]


class WebSocketServer:
    """A real WebSocket server (the ``websockets`` library) on 127.0.0.1, in a thread.

    It speaks a small realtime protocol: ``session.created`` on connect; each JSON text
    message gets ``{"type": "ack", "of": TYPE, "session": ...}`` then ``{"type": "done"}``;
    a binary message comes back reversed; the text ``slow`` is answered after
    ``SLOW_DELAY`` seconds; ``bye`` makes the server close with 4000 ``bye``; ``big`` sends
    a binary frame of ``BIG`` bytes; ``drop`` writes half a frame and drops the connection; ``vanish`` drops it with no
    close frame.
    """

    SLOW_DELAY = 1.0
    BIG = 2 << 20

    def __init__(
        self, compression: str | None = "deflate", tls: ssl.SSLContext | None = None
    ) -> None:
        from websockets.sync.server import serve as ws_serve
        from websockets.version import version

        # websockets 12 names the TLS context ssl_context
        tls_option = {"ssl_context" if version.startswith("12.") else "ssl": tls}
        self._server = ws_serve(
            self._handle, "127.0.0.1", 0, compression=compression, max_size=None, **tls_option
        )
        self.port: int = self._server.socket.getsockname()[1]
        scheme = "wss" if tls is not None else "ws"
        self.url = f"{scheme}://127.0.0.1:{self.port}/v1/realtime?model=gpt-realtime&key=SECRET"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()

    def _handle(self, ws: Any) -> None:
        ws.send(json.dumps({"type": "session.created"}))
        for message in ws:
            if isinstance(message, bytes):
                ws.send(message[::-1])
            elif message == "slow":
                time.sleep(self.SLOW_DELAY)
                ws.send("late")
            elif message == "bye":
                ws.close(4000, "bye")
            elif message == "big":
                ws.send(b"\x07" * self.BIG)
            elif message == "vanish":
                ws.socket.shutdown(socket.SHUT_RDWR)
                ws.socket.close()
                return
            elif message == "drop":
                ws.socket.sendall(b"\x82\x7e\x00\x10partial")
                ws.socket.shutdown(socket.SHUT_RDWR)
                ws.socket.close()
                return
            else:
                document = json.loads(message)
                ack = {
                    "type": "ack",
                    "of": document.get("type"),
                    "session": document.get("session"),
                }
                ws.send(json.dumps(ack))
                ws.send(json.dumps({"type": "done"}))

    def stop(self) -> None:
        self._server.shutdown()
        self._thread.join(5)

    def __enter__(self) -> WebSocketServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


class S3StandIn:
    """moto's S3 server on 127.0.0.1, in a thread, with S3's one guarantee moto's threads
    lack: a conditional write is atomic. moto checks ``If-None-Match: *`` and then stores the
    object, and a request in another of its threads can pass the same check in between (two
    creates of one name both answered 200; S3 refuses the second). Requests that change
    objects take one lock, as S3 orders them."""

    def __init__(self, port: int) -> None:
        from moto.moto_server.werkzeug_app import DomainDispatcherApplication, create_backend_app
        from werkzeug.serving import make_server

        app = DomainDispatcherApplication(create_backend_app)
        writing = threading.Lock()

        def ordered(environ: dict[str, Any], start_response: Any) -> Any:
            if environ["REQUEST_METHOD"] in {"GET", "HEAD"}:
                return app(environ, start_response)
            with writing:
                return list(app(environ, start_response))

        self.server = make_server("127.0.0.1", port, ordered, threaded=True)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> S3StandIn:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.thread.join()
        self.server.server_close()
