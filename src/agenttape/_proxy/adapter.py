"""The recording proxy as an adapter: a request a program sent through the proxy goes through
the shared exchange seam like a request of any patched library.

The proxy's engine (``proxy_server``) reads the client's request into the model and hands
``ProxyAdapter.handle`` a ``Client`` to answer through; the tape decides, as for every other
adapter, whether the answer is replayed or recorded from the real server. Replaying writes the
recorded head and body pieces to the client (at their offsets with ``realtime``) and re-enacts
a recorded failure at the socket: a reset, or, for a timeout, no answer until the client gives
up. A request nothing recorded serves is answered with status 599 and the miss explained in a
JSON body.
"""

from __future__ import annotations

import dataclasses
import json
import socket
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable
from urllib.parse import urlsplit

import h11

from .._adapters.header_tables import decode_headers, decode_text
from .._adapters.wire import header
from .._core.errors import UnmatchedInteractionError
from .._core.exchange import Replay, begin, serving
from .._core.models import Failure, Headers, Interaction, Request, Response
from .._core.playback import Schedule, Walk
from .._core.tape import Recording, Tape
from .._core.wire import grpc as grpc_wire
from .._core.wire.websocket import SessionReplay, session_of
from . import grpc_upstream
from .upstream import (
    ClientGone,
    Origin,
    UpstreamConnection,
    UpstreamError,
    UpstreamPool,
    Waiter,
    origin_of,
    request_head,
    reset,
)
from .websocket import MISS_CLOSE, head_bytes, record_session, replay_session

MISS_STATUS = 599
MISS_REASON = "No Recorded Interaction"


class Client(Protocol):
    """The program's side of one exchange, however it speaks (HTTP/1.1 or HTTP/2).

    ``data`` raises ClientGone once the client has gone away."""

    waiter: Waiter

    def head(self, response: Response) -> None:
        """May be held back to go out with the first body piece; ``flush`` sends it."""
        ...

    def data(self, chunk: bytes) -> None: ...

    def flush(self) -> None: ...

    def end(self) -> None: ...

    def reset(self) -> None:
        """The exchange failed at the socket: the client sees its connection (or stream) reset."""
        ...

    def close(self) -> None:
        """The server could not be reached, or closed its connection before the answer was
        complete: the proxy closes the client's, without a reset (HTTP/2: the stream is reset,
        its only way to say so)."""
        ...

    def hold(self) -> None:
        """Answers nothing until the client gives up and closes."""
        ...


@dataclass(slots=True)
class ProxyRequest:
    """A client's request: ``request`` as recorded and sent (URL as the client addressed it),
    the ``origin`` it is sent to, and the request ``target`` written on the request line."""

    request: Request
    origin: Origin
    target: str


def failure_of(exc: BaseException) -> Failure | None:
    if isinstance(exc, UpstreamError):
        return Failure(exc.kind, exc.type_name, str(exc))
    return None


@dataclass
class ProxyAdapter:
    """Serves each request a client sends through the proxy from ``tape``."""

    tape: Tape
    log: Callable[[str], None] = lambda line: None
    misses: list[UnmatchedInteractionError] = field(default_factory=list)

    def handle(self, incoming: ProxyRequest, client: Client, pool: UpstreamPool) -> None:
        request = incoming.request
        grpc = grpc_wire.is_grpc(request)
        if grpc:  # one form with in-process recordings: grpc://host:port/pkg.Service/Method
            path = urlsplit(request.url).path
            url = f"grpc://{grpc_upstream.authority(incoming.origin)}{path}"
            request = dataclasses.replace(request, url=url)

        try:
            plan = begin(self.tape, request)
            with serving(self.tape, plan, failure_of):
                if isinstance(plan, Replay):
                    _replay(plan.interaction, plan.playback, client)
                elif grpc:
                    _record_grpc(incoming, plan.recording, client)
                else:
                    _record(incoming, plan.recording, client, pool)
        except UnmatchedInteractionError as miss:
            self.misses.append(miss)
            self.log(
                f"no recorded interaction for {request.method} {request.url}: answered "
                f"{MISS_STATUS}"
            )
            _answer_miss(miss, client)
        except ClientGone:
            pass
        except UpstreamError as exc:
            self.log(f"{request.method} {request.url}: {exc.kind} ({exc.type_name}: {exc})")
            _fail(Failure(exc.kind, exc.type_name, str(exc)), client)

    def recorded_version(self, origin: Origin) -> str | None:
        """The HTTP version the server of ``origin`` answered with in the tape (the latest
        answer), or None when the tape holds no answer from it."""
        for interaction in reversed(self.tape.interactions):
            response = interaction.response
            if response is None or not interaction.request.url.startswith(origin.scheme + ":"):
                continue
            try:
                if origin_of(interaction.request.url) == origin:
                    return response.http_version
            except ValueError:
                continue
        return None

    def handle_websocket(
        self, incoming: ProxyRequest, sock: socket.socket, pool: UpstreamPool, pending: bytes
    ) -> None:
        """A WebSocket upgrade: the whole session, recorded or replayed, on ``sock``. Its URL
        is ``ws://`` or ``wss://``, as in-process recordings write it."""
        scheme, separator, rest = incoming.request.url.partition("://")
        url = {"http": "ws", "https": "wss"}.get(scheme, scheme) + separator + rest
        request = dataclasses.replace(incoming.request, url=url)
        key = header(request.headers, "sec-websocket-key")

        def missed(miss: UnmatchedInteractionError) -> None:
            self.misses.append(miss)
            self.log(f"{miss}".splitlines()[0] + f": closed the session with {MISS_CLOSE}")

        try:
            plan = begin(self.tape, request)
            with serving(self.tape, plan, failure_of):
                opened = session_of(self.tape, plan)
                if isinstance(opened, SessionReplay):
                    replay_session(opened, sock, pending, key, missed)
                else:
                    head = request_head(request.method, incoming.target, request.headers)
                    record_session(opened, sock, pending, pool, incoming.origin, head)
        except UnmatchedInteractionError as miss:
            self.misses.append(miss)
            self.log(f"no recorded WebSocket session for {request.url}: answered {MISS_STATUS}")
            answer = miss_response(miss)
            sock.sendall(head_bytes(answer.status, answer.reason, answer.headers) + answer.body)
        except (ClientGone, OSError):
            pass
        except UpstreamError as exc:
            self.log(f"WebSocket {request.url}: {exc.kind} ({exc.type_name}: {exc})")
            reset(sock)


def _replay(interaction: Interaction, schedule: Schedule, client: Client) -> None:
    response = interaction.response
    # What was sent before a step that waits for its turn goes out first: the client may need
    # it to make the request the step waits for.
    walk = Walk.of(interaction, schedule, hold=False, before_turn=client.flush)
    walk.arrives(schedule.head)
    if response is None:
        _fail(walk.failure, client)
        return
    client.head(response)
    if schedule.paced:
        client.flush()  # the head is due now, the first piece later
    for piece in walk:
        client.data(piece)
    if walk.ending == "failed":
        _fail(walk.failure, client)
    elif walk.ending == "held":
        client.hold()  # the client closed this body early when it was recorded
    elif response.trailers and isinstance(client, Trailing):
        client.trailers(response.trailers)  # gRPC's status and trailing metadata
    else:
        client.end()


@runtime_checkable
class Trailing(Protocol):
    """A client that can be sent trailers (HTTP/2): they end the response."""

    def trailers(self, headers: Headers) -> None: ...


def _record_grpc(incoming: ProxyRequest, recording: Recording, client: Client) -> None:
    """A gRPC call forwarded over HTTP/2 and recorded as it passes: the head, each DATA
    frame as a piece, the trailers."""
    origin = incoming.origin

    def head(status: int, headers: Headers) -> None:
        recording.respond(status, "", "HTTP/2", headers)
        client.head(Response(status, "", "HTTP/2", headers))

    def data(piece: bytes) -> None:
        recording.chunk(piece)
        client.data(piece)

    def trailers(headers: Headers) -> None:
        recording.trail(headers)
        state["trailers"] = headers

    state: dict[str, Headers] = {}
    try:
        answer = grpc_upstream.Answer(head, data, trailers)
        grpc_upstream.call(origin, incoming.request, incoming.target, answer)
    except ClientGone:
        recording.finish(truncated=True)
        raise
    except UpstreamError as exc:
        recording.fail(Failure(exc.kind, exc.type_name, str(exc)))
        raise
    recording.finish()
    sent = state.get("trailers")
    if sent and isinstance(client, Trailing):
        client.trailers(sent)
    else:
        client.end()


def _fail(error: Failure | None, client: Client) -> None:
    """The client meets the failure the server caused, the same while recording and on replay:
    no answer until it gives up (a timeout); its connection closed (a server that could not be
    reached, or that closed before its answer was complete); else a reset. A reset of a
    refused connection reached Node's fetch as ``ECONNRESET`` or ``UND_ERR_SOCKET`` depending
    on timing; a close is the same every time."""
    assert error is not None
    if error.is_timeout:
        client.hold()
    elif error.kind in ("protocol_error", "connect_error"):
        client.close()
    else:
        client.reset()


def _record(
    incoming: ProxyRequest, recording: Recording, client: Client, pool: UpstreamPool
) -> None:
    connection, event = _send(incoming, client, pool)
    status, reason = event.status_code, decode_text(event.reason)
    version, headers = (
        decode_text(b"HTTP/" + event.http_version),
        decode_headers(event.headers.raw_items()),
    )
    recording.respond(status, reason, version, headers)
    try:
        # The client gets the headers as the server sent them; the recording keeps them
        # redacted.
        client.head(Response(status, reason, version, headers))
        while True:
            event = connection.next_event(client.waiter)
            if isinstance(event, h11.Data):
                recording.chunk(event.data)
                client.data(event.data)
            elif isinstance(event, (h11.EndOfMessage, h11.ConnectionClosed)):
                break
    except ClientGone:
        connection.close()
        recording.finish(truncated=True)
        raise
    except UpstreamError as exc:
        connection.close()
        recording.fail(Failure(exc.kind, exc.type_name, str(exc)))
        raise
    recording.finish()
    pool.release(connection)
    client.end()


def _send(
    incoming: ProxyRequest, client: Client, pool: UpstreamPool
) -> tuple[UpstreamConnection, h11.Response]:
    """Sends the request and waits for the response head. A kept-alive connection the server
    closed meanwhile is replaced once, as a client's own pool does."""
    connection = pool.acquire(incoming.origin)
    while True:
        try:
            connection.send(incoming.request, incoming.target)
            event = connection.next_event(client.waiter)
            while isinstance(event, h11.InformationalResponse):
                event = connection.next_event(client.waiter)
            if isinstance(event, h11.ConnectionClosed):
                raise UpstreamError(
                    "protocol_error",
                    "RemoteProtocolError",
                    "Server disconnected without sending a response.",
                )
            assert isinstance(event, h11.Response)
            return connection, event
        except ClientGone:
            connection.close()
            raise UpstreamError(
                "read_timeout",
                "ReadTimeout",
                "the client gave up before the server answered",
            ) from None
        except UpstreamError:
            connection.close()
            if not connection.reused:
                raise
            connection = pool.connect(incoming.origin)


def miss_response(miss: UnmatchedInteractionError) -> Response:
    """Status 599 with the miss explained in a JSON body, as the client sees a miss."""
    request = miss.request
    body = json.dumps(
        {
            "error": {
                "message": str(miss),
                "type": "agenttape_unmatched_interaction",
                "code": "unmatched_interaction",
                "request": f"{request.method} {request.url}",
                "cassette": miss.cassette_path,
                "mode": miss.mode,
            }
        },
        indent=2,
    ).encode()
    headers = [
        ("Content-Type", "application/json"),
        ("Content-Length", str(len(body))),
        # Stainless SDKs (openai, anthropic) would otherwise retry a 5xx, missing again.
        ("x-should-retry", "false"),
        ("X-Agenttape-Miss", "1"),
    ]
    return Response(MISS_STATUS, MISS_REASON, "HTTP/1.1", headers, body)


def _answer_miss(miss: UnmatchedInteractionError, client: Client) -> None:
    response = miss_response(miss)
    client.head(Response(response.status, response.reason, "HTTP/1.1", response.headers))
    client.data(response.body)
    client.end()
