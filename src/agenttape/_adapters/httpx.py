"""httpx and httpx2 (same layout): intercepted where the client picks a transport.

Wrapping the transport ``Client._transport_for_url`` returns sees every wire exchange —
each redirect hop and auth challenge, custom transports, ``mounts=`` — and sees the raw,
still-encoded body stream, chunk by chunk.
"""

from __future__ import annotations

import sys
from types import ModuleType
from typing import Any

from .._core import runtime
from .._core.blame import passed_through
from .._core.exchange import Live, Replay, begin, serving, unplayable
from .._core.models import Failure, FailureKind, Headers, Interaction, Request
from .._core.tape import Recording
from .._core.wire.websocket import SessionRecording, SessionReplay, session_of
from . import instrumented, ledger, tls_contexts
from .forwarding import Forwarding
from .header_tables import (
    EMAIL_CHECKS_NAMES,
    Encoded,
    decode_header_set,
    decode_headers,
    decode_text,
    name_email_refuses,
)
from .httpx_streams import AsyncTeeStream, ReplayStream, TeeStream, exception_for
from .websocket import httpx_ws

__tracebackhide__ = passed_through

# httpx exception name -> library-neutral kind.
KIND_BY_EXCEPTION: dict[str, FailureKind] = {
    "ConnectError": "connect_error",
    "ConnectTimeout": "connect_timeout",
    "ReadTimeout": "read_timeout",
    "WriteTimeout": "write_timeout",
    "PoolTimeout": "pool_timeout",
    "ReadError": "read_error",
    "WriteError": "write_error",
    "CloseError": "read_error",
    "RemoteProtocolError": "protocol_error",
    "LocalProtocolError": "protocol_error",
    "ProxyError": "proxy_error",
    "UnsupportedProtocol": "unsupported_protocol",
}


class _Library:
    """One of httpx or httpx2, with stream classes deriving from its own base classes
    (the client asserts ``isinstance(response.stream, SyncByteStream)``)."""

    def __init__(self, hx: ModuleType) -> None:
        self.hx = hx
        self.tee = type("TeeStream", (TeeStream, hx.SyncByteStream), {})
        self.async_tee = type("AsyncTeeStream", (AsyncTeeStream, hx.AsyncByteStream), {})
        self.replay = type(
            "ReplayStream", (ReplayStream, hx.SyncByteStream, hx.AsyncByteStream), {}
        )

    def begin(
        self, tape: Any, model: Request, request: Any, core: ModuleType | None = None
    ) -> tuple[Replay | Live, Any]:
        """The tape's plan for ``request`` and, for a replayed body served at once
        (``Replay.body``), the answer built right away, its body the library's own in-memory
        stream; None for any other plan, served inside ``serving``."""
        plan = begin(tape, model)
        if isinstance(plan, Replay) and plan.body is not None:
            return plan, self.answer(plan, request, self.hx.ByteStream(plan.body), core)
        return plan, None

    def stream(self, plan: Replay, request: Any) -> Any:
        """The replayed body's stream, handed over by the replay walk; the caller waits for
        the head (``walk.arrives``) before it answers."""
        return self.replay(self.hx, plan.interaction, request, plan.playback)

    def answer(
        self, plan: Replay, request: Any, stream: Any, core: ModuleType | None = None
    ) -> Any:
        """The replayed response, its body ``stream``: httpx's, or, given httpcore's module
        (``core``), the one its connection pool gives the transport."""
        if core is None:
            return _replay_response(self.hx, plan.interaction, request, stream)
        return _replay_core_response(self.hx, core, plan.interaction, request, stream)

    def failure_of(self, exc: BaseException) -> Failure | None:
        """The failure an httpx transport error (or the httpcore error it maps, met at the
        innermost call) stands for; None for any other exception."""
        if not isinstance(exc, self.hx.TransportError) and not _from_core(exc):
            return None
        name = type(exc).__name__
        return Failure(KIND_BY_EXCEPTION.get(name, "transport_error"), name, str(exc))


def _from_core(exc: BaseException) -> bool:
    """An httpcore (or httpcore2) error: named as the httpx error it becomes."""
    return type(exc).__module__.partition(".")[0] in ("httpcore", "httpcore2")


def install(hx: ModuleType) -> list[ledger.Patch]:
    library = _Library(hx)
    return [
        tls_contexts.patch(hx),
        ledger.wrap(
            hx.Client,
            "_transport_for_url",
            lambda original: _make_transport_for_url(original, _TapeTransport, library),
        ),
        ledger.wrap(
            hx.AsyncClient,
            "_transport_for_url",
            lambda original: _make_transport_for_url(original, _AsyncTapeTransport, library),
        ),
    ]


def _make_transport_for_url(original: Any, wrapper: type, library: _Library) -> Any:
    def _transport_for_url(self: Any, url: Any) -> Any:
        transport = original(self, url)
        if runtime.active() is None:
            return transport
        return wrapper(transport, library)

    return _transport_for_url


# A client sends the same headers and the same URLs again and again (an SDK posts every call
# to one endpoint): what they read as is kept, keyed by what the client sent, so nothing kept
# can be stale. Bounded: a full table starts again empty.
_SENT_HEADERS: dict[tuple[Encoded, ...], tuple[Headers, bool]] = {}
_URL_TEXTS: dict[Any, str] = {}
_LIMIT = 4096


def _to_model(request: Any) -> tuple[Request, bool]:
    """The request in the model, and whether it asks for a WebSocket (httpx-ws's upgrade).
    Its headers are decoded once per set sent (httpx's own list of them is the key), its URL
    made text once per URL (httpx builds ``str(url)`` anew from the parts each time)."""
    sent = tuple(request.headers._list)
    known = _SENT_HEADERS.get(sent)
    if known is None:
        headers = decode_header_set([(name, value) for name, _lowered, value in sent])
        if len(_SENT_HEADERS) >= _LIMIT:
            _SENT_HEADERS.clear()
        known = _SENT_HEADERS[sent] = (headers, httpx_ws.upgrades(headers))
    url = request.url
    parts = url._uri_reference
    text = _URL_TEXTS.get(parts)
    if text is None:
        if len(_URL_TEXTS) >= _LIMIT:
            _URL_TEXTS.clear()
        text = _URL_TEXTS[parts] = str(url)
    return Request(request.method, text, known[0], request.content), known[1]


def _respx_serves(hx: ModuleType, request: Any) -> bool:
    """A route mocked with respx answers for itself and is never taken for live traffic."""
    respx = sys.modules.get("respx")
    if respx is None or hx.__name__ != "httpx":
        return False
    from respx.mocks import Mocker

    for mocker in Mocker.registry.values():
        for router in mocker.routers:
            for route in router.routes:
                if route.is_pass_through:
                    continue
                pattern = route._pattern
                if pattern is None or pattern.match(request):
                    return True
    return False


def _replay_response(hx: ModuleType, interaction: Interaction, request: Any, stream: Any) -> Any:
    """The recorded response as httpx's (a recorded failure raised as its exception). Its
    headers are filled in one pass, each name and value encoded as Latin-1, the name also
    lowered, as ``Headers`` keeps them, in a ``Headers`` made without its constructor, which
    checks and encodes each item in two calls and asks whether nothing is a mapping: the
    response copies them as they are."""
    response = _recorded_response(hx, interaction, request)
    headers = hx.Headers.__new__(hx.Headers)
    headers._list = [
        (name := key.encode("latin-1"), name.lower(), value.encode("latin-1"))
        for key, value in response.headers
    ]
    headers._encoding = None
    made_as = _made_as(hx.Response) if stream is not None else None
    if made_as is None:  # no stream: the constructor makes the empty one, read
        return hx.Response(
            response.status, headers=headers, stream=stream, extensions=_extensions(response)
        )
    made = hx.Response.__new__(hx.Response)
    made.__dict__.update(made_as)
    made.status_code = response.status
    made.headers = headers
    made.extensions = _extensions(response)
    made.history = []
    made.stream = stream
    return made


# The fields httpx's Response constructor sets given a status, headers, a stream and
# extensions (and nothing else), as of httpx 0.28 and httpx2; the rest hold what it sets them
# to, the same in every response.
_GIVEN_FIELDS = frozenset(("status_code", "headers", "stream", "extensions", "history"))
_SET_FIELDS = frozenset(
    (
        "_request",
        "next_request",
        "is_closed",
        "is_stream_consumed",
        "default_encoding",
        "_num_bytes_downloaded",
    )
)
_MADE_AS: dict[type, dict[str, Any] | None] = {}


def _made_as(response_class: type) -> dict[str, Any] | None:
    """What ``response_class``'s constructor sets on a response besides what is given, when
    it sets just the fields known here, to the same immutable values every time: a replayed
    response is then made with those set directly (its constructor copies the headers and
    the extensions it is given, which are made for this response alone). Looked at once per
    class, on a response its constructor made; None (the constructor makes every one) for a
    class that does anything else."""
    if response_class in _MADE_AS:
        return _MADE_AS[response_class]
    made_as: dict[str, Any] | None = None
    try:
        stream = object()
        probe = response_class(200, headers=[("A", "b")], stream=stream, extensions={"x": b""})
        fields = dict(vars(probe))
    except Exception:
        fields = {}
    if (
        set(fields) == _GIVEN_FIELDS | _SET_FIELDS
        and fields["stream"] is stream
        and fields["history"] == []
        and fields["extensions"] == {"x": b""}
        and all(type(fields[name]) in (type(None), bool, int, str) for name in _SET_FIELDS)
    ):
        made_as = {name: fields[name] for name in _SET_FIELDS}
    _MADE_AS[response_class] = made_as
    return made_as


def _recorded_response(hx: ModuleType, interaction: Interaction, request: Any) -> Any:
    """The recorded response; a recorded failure raised as the library's exception."""
    response = interaction.response
    if response is None:
        raise exception_for(hx, interaction.error, request)
    if EMAIL_CHECKS_NAMES:
        problem = name_email_refuses(response.headers)
        tape = runtime.active()
        if problem is not None and tape is not None:
            raise unplayable(tape, interaction, "httpx", problem)
    return response


def _head(response: Any) -> tuple[list[tuple[bytes, bytes]], dict[str, bytes]]:
    """A recorded response's raw headers and the extensions that carry its version and
    reason phrase as sent."""
    headers = [(k.encode("latin-1"), v.encode("latin-1")) for k, v in response.headers]
    return headers, _extensions(response)


def _extensions(response: Any) -> dict[str, bytes]:
    """The extensions that carry a recorded response's version and reason phrase as sent
    (a new dict each time: httpcore's response keeps the one it is given)."""
    head = response.http_version, response.reason
    encoded = _HEADS.get(head)
    if encoded is None:
        if len(_HEADS) >= _LIMIT:
            _HEADS.clear()
        encoded = _HEADS[head] = (head[0].encode("ascii"), head[1].encode("latin-1"))
    return {"http_version": encoded[0], "reason_phrase": encoded[1]}


# A recorded version and reason phrase, encoded: few differ in a whole test suite.
_HEADS: dict[tuple[str, str], tuple[bytes, bytes]] = {}


def _replay_core_response(
    hx: ModuleType, core: ModuleType, interaction: Interaction, request: Any, stream: Any
) -> Any:
    """The recorded answer as httpcore's pool gives it to the transport (a recorded error
    raised as the httpx error, which the transport lets through as it is)."""
    response = _recorded_response(hx, interaction, request)
    headers, extensions = _head(response)
    return core.Response(response.status, headers=headers, content=stream, extensions=extensions)


def _record_core_head(library: _Library, recording: Recording, response: Any) -> None:
    """Records httpcore's response head as ``_record_head`` records httpx's."""
    extensions = response.extensions
    raw_reason = extensions.get("reason_phrase")
    raw_version = extensions.get("http_version", b"HTTP/1.1")
    reason = (
        decode_text(raw_reason)
        if isinstance(raw_reason, bytes)
        else library.hx.codes.get_reason_phrase(response.status)
    )
    version = decode_text(raw_version) if raw_version.isascii() else "HTTP/1.1"
    recording.respond(response.status, reason, version, decode_headers(response.headers))


def _reason_and_version(response: Any) -> tuple[str, str]:
    """The reason phrase and HTTP version as sent: ``reason_phrase`` decodes as ASCII and
    drops other bytes; the extensions have them all."""
    extensions = response.extensions
    raw_reason = extensions.get("reason_phrase")
    raw_version = extensions.get("http_version")
    return (
        decode_text(raw_reason) if isinstance(raw_reason, bytes) else response.reason_phrase,
        decode_text(raw_version)
        if isinstance(raw_version, bytes) and raw_version.isascii()
        else response.http_version,
    )


def _record_head(recording: Recording, response: Any) -> None:
    reason, version = _reason_and_version(response)
    recording.respond(response.status_code, reason, version, decode_headers(response.headers.raw))


class _TapeTransport(Forwarding):
    """Stands in front of the transport the client chose, for one request."""

    def __init__(self, transport: Any, library: _Library) -> None:
        self._wrapped = transport  # as Forwarding's __init__ would, without its call per request
        self._library = library

    def handle_request(self, request: Any) -> Any:
        library = self._library
        tape = runtime.active()
        if tape is None or _respx_serves(library.hx, request):
            return self._wrapped.handle_request(request)
        request.read()
        model, upgrade = _to_model(request)
        if upgrade:
            return self._open_session(tape, request, model)

        if isinstance(self._wrapped, library.hx.HTTPTransport) and instrumented.wrapped(
            self._wrapped, "handle_request", library.hx.HTTPTransport
        ):
            return instrumented.through(
                self._wrapped.handle_request, request, self._innermost(tape, request, model)
            )

        plan, answer = library.begin(tape, model, request)
        if answer is not None:
            return answer
        with serving(tape, plan, library.failure_of):
            if isinstance(plan, Live):
                response = self._wrapped.handle_request(request)
                return _recorded(library, response, plan.recording, library.tee)
            stream = library.stream(plan, request)
            stream.walk.arrives(plan.playback.head)
            return library.answer(plan, request, stream)

    def _innermost(self, tape: Any, request: Any, model: Request) -> instrumented.Innermost:
        """The exchange made at the connection pool, below whatever wraps the transport:
        httpcore's response replayed or recorded."""
        library = self._library

        def innermost(core: ModuleType, live: Any) -> Any:
            plan, answer = library.begin(tape, model, request, core)
            if answer is not None:
                return answer
            with serving(tape, plan, library.failure_of):
                if isinstance(plan, Live):
                    return _recorded_core(library, live(), plan.recording, library.tee)
                stream = library.stream(plan, request)
                stream.walk.arrives(plan.playback.head)
                return library.answer(plan, request, stream, core)

        return innermost

    def _open_session(self, tape: Any, request: Any, model: Request) -> Any:
        """An upgrade to WebSocket (httpx-ws): a session, see ``httpx_ws``."""
        library = self._library

        plan = begin(tape, model)
        with serving(tape, plan, library.failure_of):
            opened = session_of(tape, plan)
            if isinstance(opened, SessionRecording):
                response = self._wrapped.handle_request(request)
                body = None
                if response.status_code != 101:
                    body = b"".join(response.stream)
                    response.stream.close()
                return _opened(library, opened, response, body, asynchronous=False)
            response = self._refused(opened, request)
            if response is None:
                response = _replay_response(library.hx, opened.interaction, request, None)
                httpx_ws.replay(opened, response, _request_head(request))
            return response

    def _refused(self, session: SessionReplay, request: Any) -> Any:
        """The replayed answer to an upgrade that was not a session (an error or a refusal),
        None for a session."""
        library = self._library
        interaction = session.interaction
        if session.is_session:
            return None
        stream = library.replay(library.hx, interaction, request, session.schedule)
        return _replay_response(library.hx, interaction, request, stream)


def _opened(
    library: _Library,
    session: SessionRecording,
    response: Any,
    body: bytes | None,
    asynchronous: bool,
) -> Any:
    """The live answer to an upgrade, recorded: a refusal whole (``body``, already read off
    the wire, given back to the client in memory), or a session's opening, its frames
    recorded from here on (``body`` None)."""
    if body is not None:
        response.stream = library.hx.ByteStream(body)
        _open(session, response, body)
        session.finish()
    else:
        _open(session, response)
        httpx_ws.record(response, session, asynchronous=asynchronous)
    return response


def _open(session: SessionRecording, response: Any, body: bytes = b"") -> None:
    reason, version = _reason_and_version(response)
    session.opened(
        response.status_code, reason, decode_headers(response.headers.raw), body, version
    )


def _request_head(request: Any) -> bytes:
    """The upgrade request's head as the client would write it."""
    lines = [b"%s %s HTTP/1.1" % (request.method.encode("ascii"), request.url.raw_path)]
    lines += [name + b": " + value for name, value in request.headers.raw]
    return b"\r\n".join(lines) + b"\r\n\r\n"


class _AsyncTapeTransport(_TapeTransport):
    async def handle_async_request(self, request: Any) -> Any:
        library = self._library
        tape = runtime.active()
        if tape is None or _respx_serves(library.hx, request):
            return await self._wrapped.handle_async_request(request)
        await request.aread()
        model, upgrade = _to_model(request)
        if upgrade:
            return await self._open_session_async(tape, request, model)

        if isinstance(self._wrapped, library.hx.AsyncHTTPTransport) and instrumented.wrapped(
            self._wrapped, "handle_async_request", library.hx.AsyncHTTPTransport
        ):
            return await instrumented.through_async(
                self._wrapped.handle_async_request,
                request,
                self._innermost_async(tape, request, model),
            )

        plan, answer = library.begin(tape, model, request)
        if answer is not None:
            return answer
        with serving(tape, plan, library.failure_of):
            if isinstance(plan, Live):
                response = await self._wrapped.handle_async_request(request)
                return _recorded(library, response, plan.recording, library.async_tee)
            stream = library.stream(plan, request)
            await stream.walk.arrives_async(plan.playback.head)
            return library.answer(plan, request, stream)

    def _innermost_async(self, tape: Any, request: Any, model: Request) -> instrumented.Innermost:
        library = self._library

        async def innermost(core: ModuleType, live: Any) -> Any:
            plan, answer = library.begin(tape, model, request, core)
            if answer is not None:
                return answer
            with serving(tape, plan, library.failure_of):
                if isinstance(plan, Live):
                    return _recorded_core(library, await live(), plan.recording, library.async_tee)
                stream = library.stream(plan, request)
                await stream.walk.arrives_async(plan.playback.head)
                return library.answer(plan, request, stream, core)

        return innermost

    async def _open_session_async(self, tape: Any, request: Any, model: Request) -> Any:
        library = self._library

        plan = begin(tape, model)
        with serving(tape, plan, library.failure_of):
            opened = session_of(tape, plan)
            if isinstance(opened, SessionRecording):
                response = await self._wrapped.handle_async_request(request)
                body = None
                if response.status_code != 101:
                    body = b"".join([chunk async for chunk in response.stream])
                    await response.stream.aclose()
                return _opened(library, opened, response, body, asynchronous=True)
            response = self._refused(opened, request)
            if response is None:
                response = _replay_response(library.hx, opened.interaction, request, None)
                await httpx_ws.replay_async(opened, response, _request_head(request))
            return response


def _recorded_core(library: _Library, response: Any, recording: Recording, tee: type) -> Any:
    """httpcore's live response, its head recorded and its body teed into ``recording``."""
    _record_core_head(library, recording, response)
    response.stream = tee(library.failure_of, response.stream, recording)
    return response


def _recorded(library: _Library, response: Any, recording: Recording, tee: type) -> Any:
    """The live response, its head recorded and its body teed into ``recording``."""
    _record_head(recording, response)
    if hasattr(response, "_content"):
        # Already read (MockTransport and other in-memory transports).
        recording.chunk(response.content)
        recording.finish()
        return response
    response.stream = tee(library.failure_of, response.stream, recording)
    return response
