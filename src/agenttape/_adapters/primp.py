"""primp, a Rust client (ddgs' web search sits on it): the request methods of ``Client`` and
``AsyncClient`` and the module's own ``get``/``post``/``request``… at their Python-visible
doors; its sockets live in Rust.

The request is rebuilt as primp sends it: the URL with the query (``params``, the client's
when the call gives none), the headers of the call and then the client's (which hold the
impersonated browser's ``user-agent`` and ``sec-ch-ua``), the body as ``content``, form
``data`` or compact ``json``. Recorded is the response as primp hands it: decompressed, its
headers as primp's dict has them (lowercase, repeated ones as separate lines).

primp's ``Response`` cannot be made from Python: a replayed one is a ``ReplayedResponse``
(``ReplayedAsyncResponse``) with the same attributes and methods, save ``text_markdown``,
``text_plain`` and ``text_rich`` (primp's HTML renderer is out of reach). While recording, a
non-streamed response is primp's own; a streamed one is primp's behind a wrapper that tees
what is read. A replayed failure is primp's own exception (``ConnectError``,
``TimeoutError``…) with the recorded message.
"""

from __future__ import annotations

import contextlib
import inspect
import json as _json
from collections.abc import AsyncIterator, Callable, Iterator, Mapping
from contextvars import ContextVar
from types import ModuleType
from typing import Any
from urllib.parse import urlencode

from .._core import runtime
from .._core.blame import passed_through
from .._core.exchange import Live, Replay, begin, serving
from .._core.models import Failure, FailureKind, Headers, Interaction, Request
from .._core.tape import Recording
from . import ledger

__tracebackhide__ = passed_through

_METHODS = ("get", "head", "options", "delete", "post", "put", "patch")
_KINDS: dict[str, FailureKind] = {
    "ConnectError": "connect_error",
    "DNSError": "connect_error",
    "DNSTimeoutError": "connect_timeout",
    "TimeoutError": "read_timeout",
    "BodyError": "read_error",
    "DecodeError": "read_error",
    "RedirectError": "protocol_error",
    "RequestError": "transport_error",
}

_module: ModuleType | None = None


def install(module: ModuleType) -> list[ledger.Patch]:
    global _module
    for name in ("Client", "AsyncClient"):
        getattr(module, name)
    _module = module
    # (where the wrapper is, its ``request`` wrapper, 1 when the client is the first argument)
    targets: list[tuple[Any, Callable[[Callable[..., Any]], Callable[..., Any]], int]] = [
        (module.Client, _make_request, 1)
    ]
    if not issubclass(module.AsyncClient, module.Client):
        targets.append((module.AsyncClient, _make_async_request, 1))
    # else primp before 1.0, whose AsyncClient runs Client.request in a worker thread.
    targets.append((module, _make_function_request, 0))
    patches: list[ledger.Patch] = []
    for target, make_request, lead in targets:
        patches.append(ledger.wrap(target, "request", make_request))
        patches += [
            ledger.wrap(target, name, _named(make_request, name, lead)) for name in _METHODS
        ]
    return patches


# -- the request ----------------------------------------------------------------------------


def request_of(method: str, url: str, arguments: Mapping[str, Any], client: Any = None) -> Request:
    """The request primp sends for ``client.request(method, url, **arguments)``."""
    base = getattr(client, "base_url", None) if client is not None else None
    if base and "://" not in url:
        url = base.rstrip("/") + "/" + url.lstrip("/")
    params = arguments.get("params")
    if params is None and client is not None:
        params = getattr(client, "params", None)
    if params:
        url += ("&" if "?" in url else "?") + urlencode(list(dict(params).items()))
    headers: list[tuple[str, str]] = [
        (str(k).lower(), str(v)) for k, v in (arguments.get("headers") or {}).items()
    ]
    given = {name for name, _value in headers}
    if client is not None:
        headers += [(k, v) for k, v in (client.headers or {}).items() if k not in given]
    elif arguments.get("impersonate"):
        headers.append(("primp-impersonate", str(arguments["impersonate"])))
    content = arguments.get("content")
    if content is not None:
        body = bytes(content)
    elif arguments.get("json") is not None:
        body = _json.dumps(
            arguments["json"], separators=(",", ":"), ensure_ascii=False, sort_keys=True
        ).encode()  # primp (serde_json) sends object keys sorted
    elif isinstance(arguments.get("data"), Mapping):
        body = urlencode(list(arguments["data"].items())).encode()
    else:
        body = b""
    return Request(method=method.upper(), url=url, headers=headers, body=body)


def _arguments(
    names: tuple[str, ...], args: tuple[Any, ...], kwargs: dict[str, Any]
) -> dict[str, Any]:
    return {**dict(zip(names, args, strict=False)), **kwargs}


_REQUEST_NAMES = (
    "params",
    "headers",
    "cookies",
    "content",
    "data",
    "json",
    "files",
)


# -- the response ---------------------------------------------------------------------------


def _header_dict(headers: Headers) -> dict[str, str]:
    """Headers as primp's dict has them: lowercase names, repeated values on lines."""
    out: dict[str, str] = {}
    for name, value in headers:
        key = name.lower()
        out[key] = f"{out[key]}\n{value}" if key in out else value
    return out


def _header_lines(headers: Mapping[str, str]) -> Headers:
    return [(name, line) for name, value in headers.items() for line in str(value).split("\n")]


class ReplayedResponse:
    """primp's ``Response`` for a replayed interaction: its attributes and methods."""

    def __init__(self, interaction: Interaction) -> None:
        response = interaction.response
        assert response is not None
        self.url = interaction.request.url
        self.status_code = response.status
        self.headers = _header_dict(response.headers)
        self._chunks = [piece for piece in response.iter_chunks() if piece]
        self._body = response.body
        self._position = 0
        # As measured: primp 1 and 2 say "UTF-8" (whatever the charset), 0.x "utf-8".
        self.encoding = "UTF-8" if hasattr(_module, "StatusError") else "utf-8"

    @property
    def content(self) -> bytes:
        return self._body

    @property
    def cookies(self) -> dict[str, str]:
        cookies: dict[str, str] = {}
        for line in self.headers.get("set-cookie", "").split("\n"):
            name, equals, value = line.partition(";")[0].partition("=")
            if equals:
                cookies[name.strip()] = value.strip()
        return cookies

    @property
    def text(self) -> str:
        return self._body.decode(self.encoding or "utf-8", errors="replace")

    def json(self) -> Any:
        try:
            return _json.loads(self._body)
        except ValueError as exc:
            own = getattr(_module, "JSONDecodeError", None)  # primp 2; before: json's own
            if own is None:
                raise
            raise own(str(exc)) from None

    def raise_for_status(self) -> None:
        assert _module is not None
        if 400 <= self.status_code < 600:
            from http import HTTPStatus

            try:
                phrase = HTTPStatus(self.status_code).phrase
            except ValueError:
                phrase = ""
            message = f"HTTP {self.status_code} {phrase} for URL: {self.url}".replace("  ", " ")
            raise getattr(_module, "StatusError", RuntimeError)(self.status_code, message, self.url)

    def _pieces(self, chunk_size: int | None) -> Iterator[bytes]:
        while self._position < len(self._chunks):
            piece = self._chunks[self._position]
            self._position += 1
            if chunk_size:
                for start in range(0, len(piece), chunk_size):
                    yield piece[start : start + chunk_size]
            else:
                yield piece

    def read(self) -> bytes:
        return b"".join(self._pieces(None))

    def stream(self) -> Iterator[bytes]:
        """primp before 1.0: the body piece by piece."""
        return self._pieces(None)

    def iter_bytes(self, chunk_size: int | None = None) -> Iterator[bytes]:
        return self._pieces(chunk_size)

    def iter_text(self, chunk_size: int | None = None) -> Iterator[str]:
        return (piece.decode("utf-8", errors="replace") for piece in self._pieces(chunk_size))

    def iter_lines(self) -> Iterator[str]:
        return iter(b"".join(self._pieces(None)).decode("utf-8", errors="replace").splitlines())

    def next(self) -> bytes | None:
        return next(self._pieces(None), None)

    def close(self) -> None:
        self._position = len(self._chunks)

    def __enter__(self) -> ReplayedResponse:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class ReplayedAsyncResponse(ReplayedResponse):
    """primp's ``AsyncResponse`` for a replayed interaction."""

    async def aread(self) -> bytes:
        return self.read()

    async def _apieces(self, chunk_size: int | None) -> AsyncIterator[bytes]:
        for piece in self._pieces(chunk_size):
            yield piece

    def aiter_bytes(self, chunk_size: int | None = None) -> AsyncIterator[bytes]:
        return self._apieces(chunk_size)

    async def _atext(self, chunk_size: int | None) -> AsyncIterator[str]:
        for piece in self._pieces(chunk_size):
            yield piece.decode("utf-8", errors="replace")

    def aiter_text(self, chunk_size: int | None = None) -> AsyncIterator[str]:
        return self._atext(chunk_size)

    async def _alines(self) -> AsyncIterator[str]:
        for line in self.iter_lines():
            yield line

    def aiter_lines(self) -> AsyncIterator[str]:
        return self._alines()

    async def anext(self) -> bytes | None:
        return self.next()

    async def aclose(self) -> None:
        self.close()

    async def __aenter__(self) -> ReplayedAsyncResponse:
        return self

    async def __aexit__(self, *exc: object) -> None:
        self.close()


def _replayed(interaction: Interaction, response_class: type[ReplayedResponse]) -> Any:
    if interaction.response is None:
        raise _exception_for(interaction.error)
    return response_class(interaction)


def _exception_for(failure: Failure | None) -> BaseException:
    """primp's own exception of the recorded class (before 1.0 primp raised RuntimeError)."""
    assert failure is not None
    own: Any = getattr(_module, failure.type, None)
    if not (isinstance(own, type) and issubclass(own, Exception)):
        own = getattr(_module, "RequestError", RuntimeError)
    exception: BaseException = own(failure.message)
    return exception


def failure_of(exc: BaseException) -> Failure | None:
    own = getattr(_module, "PrimpError", RuntimeError)
    if not isinstance(exc, own) or type(exc).__name__ == "StatusError":
        return None
    name = type(exc).__name__
    message = str(exc)
    kind: FailureKind | None = _KINDS.get(name)
    if kind is None:  # primp before 1.0: a RuntimeError saying what failed
        first = message.partition("\n")[0]
        kind = "connect_error" if "(Connect)" in first else "transport_error"
        if "timed out" in first.lower():
            kind = "read_timeout"
    return Failure(kind, name, message)


def _respond(recording: Recording, response: Any) -> None:
    recording.respond(response.status_code, "", "HTTP/1.1", _header_lines(response.headers))


class _Teed:
    """A streamed response while it is recorded: primp's own, whose reads pass through."""

    def __init__(self, response: Any, recording: Recording) -> None:
        self._response = response
        self._recording = recording

    def __getattr__(self, name: str) -> Any:
        return getattr(self._response, name)

    def _piece(self, piece: bytes | None) -> bytes | None:
        if piece:
            self._recording.chunk(piece)
        elif piece is None:
            self._recording.finish()
        return piece

    @property
    def content(self) -> bytes:
        body: bytes = self._response.content
        if not self._recording.finished:
            self._recording.chunk(body)
            self._recording.finish()
        return body

    @property
    def text(self) -> str:
        self.content  # noqa: B018 - recorded as it is read
        text: str = self._response.text
        return text

    def json(self) -> Any:
        self.content  # noqa: B018
        return self._response.json()

    def stream(self) -> Iterator[bytes]:
        """primp before 1.0: the body piece by piece."""
        for piece in self._response.stream():
            self._recording.chunk(piece)
            yield piece
        self._recording.finish()

    def read(self) -> bytes:
        body: bytes = self._response.read()
        self._recording.chunk(body)
        self._recording.finish()
        return body

    def next(self) -> bytes | None:
        return self._piece(self._response.next())

    def iter_bytes(self, chunk_size: int | None = None) -> Iterator[bytes]:
        for piece in self._response.iter_bytes(chunk_size):
            self._recording.chunk(piece)
            yield piece
        self._recording.finish()

    def close(self) -> None:
        self._recording.finish(truncated=True)
        self._response.close()

    def __enter__(self) -> _Teed:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    async def aread(self) -> bytes:
        body: bytes = await self._response.aread()
        self._recording.chunk(body)
        self._recording.finish()
        return body

    async def anext(self) -> bytes | None:
        return self._piece(await self._response.anext())

    async def aiter_bytes(self, chunk_size: int | None = None) -> AsyncIterator[bytes]:
        async for piece in self._response.aiter_bytes(chunk_size):
            self._recording.chunk(piece)
            yield piece
        self._recording.finish()

    async def aclose(self) -> None:
        self._recording.finish(truncated=True)
        await self._response.aclose()

    async def __aenter__(self) -> _Teed:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()


def _recorded(response: Any, recording: Recording, stream: bool) -> Any:
    _respond(recording, response)
    if stream or not hasattr(_module, "StatusError"):
        # Streamed; or primp before 1.0, whose ``stream()`` yields nothing once ``content``
        # was read: the body is recorded as the caller reads it.
        return _Teed(response, recording)
    recording.chunk(response.content)
    recording.finish()
    return response


# -- the doors ------------------------------------------------------------------------------


_inside: ContextVar[bool] = ContextVar("agenttape_primp_inside", default=False)
"""Set while a request is served: primp before 2 makes ``get`` call ``request``, both
patched; the inner call is the outer one's own."""


@contextlib.contextmanager
def _exchange(request: Request) -> Iterator[Replay | Live | None]:
    """The tape's plan for ``request``, served inside ``serving``; None with no tape active,
    or for a call the outer one makes (``_inside``), which goes through as it is."""
    tape = runtime.active()
    if tape is None or _inside.get():
        yield None
        return
    token = _inside.set(True)
    try:
        plan = begin(tape, request)
        with serving(tape, plan, failure_of):
            yield plan
    finally:
        _inside.reset(token)


def _serve(request: Request, call: Callable[[], Any], stream: bool) -> Any:
    with _exchange(request) as plan:
        if plan is None:
            return call()
        if isinstance(plan, Replay):
            return _replayed(plan.interaction, ReplayedResponse)
        return _recorded(call(), plan.recording, stream)


async def _serve_async(request: Request, call: Callable[[], Any], stream: bool) -> Any:
    with _exchange(request) as plan:
        if plan is None:
            return await call()
        if isinstance(plan, Replay):
            return _replayed(plan.interaction, ReplayedAsyncResponse)
        return _recorded(await call(), plan.recording, stream)


def _make_request(original: Callable[..., Any]) -> Callable[..., Any]:
    def request(self: Any, method: str, url: str, *args: Any, **kwargs: Any) -> Any:
        if runtime.active() is None:
            return original(self, method, url, *args, **kwargs)
        arguments = _arguments(_REQUEST_NAMES, args, kwargs)
        return _serve(
            request_of(method, url, arguments, self),
            lambda: original(self, method, url, *args, **kwargs),
            bool(arguments.get("stream")),
        )

    return request


def _make_async_request(original: Callable[..., Any]) -> Callable[..., Any]:
    async def request(self: Any, method: str, url: str, *args: Any, **kwargs: Any) -> Any:
        if runtime.active() is None:
            return await original(self, method, url, *args, **kwargs)
        arguments = _arguments(_REQUEST_NAMES, args, kwargs)
        return await _serve_async(
            request_of(method, url, arguments, self),
            lambda: original(self, method, url, *args, **kwargs),
            bool(arguments.get("stream")),
        )

    return request


def _make_function_request(original: Callable[..., Any]) -> Callable[..., Any]:
    def request(method: str, url: str, *args: Any, **kwargs: Any) -> Any:
        if runtime.active() is None:
            return original(method, url, *args, **kwargs)
        arguments = _arguments(_REQUEST_NAMES, args, kwargs)
        return _serve(
            request_of(method, url, arguments),
            lambda: original(method, url, *args, **kwargs),
            False,
        )

    return request


def _named(
    make_request: Callable[[Callable[..., Any]], Callable[..., Any]], name: str, lead: int
) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """``get``, ``post``, ...: the ``request`` wrapper with the method fixed to ``name``
    (``lead`` is 1 when the first argument is the client, 0 for the module's functions)."""

    def make(original: Callable[..., Any]) -> Callable[..., Any]:
        def without_method(*args: Any, **kwargs: Any) -> Any:
            return original(*args[:lead], *args[lead + 1 :], **kwargs)

        request = make_request(without_method)

        def with_method(args: tuple[Any, ...]) -> tuple[Any, ...]:
            return (*args[:lead], name, *args[lead:])

        if inspect.iscoroutinefunction(request):

            async def method_async(*args: Any, **kwargs: Any) -> Any:
                return await request(*with_method(args), **kwargs)

            return method_async

        def method(*args: Any, **kwargs: Any) -> Any:
            return request(*with_method(args), **kwargs)

        return method

    return make
