"""urllib3-future: the distribution niquests depends on, which installs itself as the
``urllib3`` package (its own ``urllib3.backend`` in place of ``http.client``), so requests and
botocore run on it too once it is installed.

It is served where a request enters a connection pool, ``HTTPConnectionPool.urlopen``, which
requests, niquests and botocore all call: recording calls it with the body left undecoded and
hands the caller a response of urllib3's own class reading through a tee that writes each
piece down as it comes (still gzip, framing removed); replay hands the same class the
recorded pieces. urllib3 then decodes, preloads or streams as the caller asked, and requests
and niquests build their responses from it as live. A recorded failure is raised as urlopen
raised it (a connection error inside ``MaxRetryError``, a ``ReadTimeoutError``), so each
client turns it into its own exception.

Not served here (they go through as live, the network guard standing in front of them):
niquests' multiplexed requests (``multiplexed=True``, lazy responses) and its async pools.
"""

from __future__ import annotations

import inspect
import io
import socket
from collections.abc import Callable, Iterator
from types import ModuleType
from typing import Any

from ..._core import runtime
from ..._core.blame import passed_through
from ..._core.exchange import Replay, begin, serving
from ..._core.models import Failure, Interaction, Request
from ..._core.playback import Schedule
from ..._core.tape import Recording
from .. import ledger
from .record import failure_of as urllib3_failure_of

__tracebackhide__ = passed_through


def is_future(urllib3: ModuleType) -> bool:
    """Whether the module named ``urllib3`` is urllib3-future's (its own HTTP backend, which
    urllib3 does not have, in ``urllib3.backend``)."""
    return "backend" in vars(urllib3)


def install(urllib3: ModuleType) -> list[ledger.Patch]:
    try:
        pool = urllib3.connectionpool.HTTPConnectionPool
        urllib3._collections.HTTPHeaderDict  # noqa: B018 - what the responses' headers are
    except AttributeError as exc:
        version = getattr(urllib3, "__version__", "(version unknown)")
        raise ledger.PatchError(
            f"urllib3-future {version} has taken the name urllib3, with internals its "
            f"adapter does not know ({exc}); requests, niquests and botocore go through it"
        ) from exc
    patches = [ledger.wrap(pool, "urlopen", lambda found: _make_urlopen(found, urllib3))]
    asynchronous = vars(urllib3).get("_async")  # its async pools (from 2.1, niquests 3.1)
    if asynchronous is not None:
        async_pool = asynchronous.connectionpool.AsyncHTTPConnectionPool
        patches.append(
            ledger.wrap(async_pool, "urlopen", lambda found: _make_async_urlopen(found, urllib3))
        )
    return patches


class _Call:
    """One urlopen call under a tape: its arguments bound, the request it makes, and how
    urllib3's response is made from a head and a body to read."""

    __slots__ = ("arguments", "errors", "extra", "headers_class", "pool", "request", "response")

    def __init__(
        self, original: Callable[..., Any], urllib3: ModuleType, response: type, *args: Any
    ) -> None:
        pool, rest, kwargs = args[0], args[1], args[2]
        bound = inspect.signature(original).bind(pool, *rest, **kwargs)
        bound.apply_defaults()
        self.arguments = arguments = bound.arguments
        self.extra = arguments.pop("response_kw", {})
        self.pool = pool
        self.errors = urllib3.exceptions
        self.headers_class = urllib3._collections.HTTPHeaderDict
        self.response = response
        body = _whole(arguments["body"])
        if body is not None:
            arguments["body"] = body
        headers = list(self.headers_class(arguments["headers"] or {}).items())
        url = _url_of(pool, arguments["url"])
        self.request = Request(arguments["method"], url, headers, _bytes(body))

    def live(self) -> dict[str, Any]:
        """The arguments of the live call: the body left as it came, undecoded."""
        return {**self.arguments, **self.extra, "preload_content": False, "decode_content": False}

    def respond(self, head: _Head, reader: io.RawIOBase) -> Any:
        arguments = self.arguments
        return self.response(
            body=reader,
            headers=self.headers_class(list(head.headers)),
            status=head.status,
            version=head.version,
            reason=head.reason,
            preload_content=arguments["preload_content"],
            decode_content=arguments["decode_content"],
            request_method=arguments["method"],
            request_url=arguments["url"],
            retries=arguments["retries"],
        )

    def replayed(self, interaction: Interaction, schedule: Schedule) -> Any:
        response = interaction.response
        if response is None:
            assert interaction.error is not None
            raise _exception_for(interaction.error, self.errors, self.pool, self.arguments["url"])
        return self.respond(_Head.of(response), _Replayed(interaction, schedule))


def _passed_on(kwargs: dict[str, Any]) -> bool:
    """Whether a call goes through as live under a tape: a multiplexed request (a lazy
    response) or one through an extension (WebSocket and the like)."""
    return bool(kwargs.get("multiplexed")) or kwargs.get("extension") is not None


def _make_urlopen(original: Callable[..., Any], urllib3: ModuleType) -> Callable[..., Any]:
    response_class = urllib3.response.HTTPResponse

    def urlopen(self: Any, *args: Any, **kwargs: Any) -> Any:
        tape = runtime.active()
        if tape is None or _passed_on(kwargs):
            return original(self, *args, **kwargs)
        call = _Call(original, urllib3, response_class, self, args, kwargs)

        plan = begin(tape, call.request)
        with serving(tape, plan, failure_of):
            if isinstance(plan, Replay):
                return call.replayed(plan.interaction, plan.playback)
            live = original(**call.live())
            head = _Head.of_live(live)
            plan.recording.respond(
                head.status, head.reason, _version_text(head.version), head.headers
            )
            return call.respond(head, _Tee(live, plan.recording))

    return urlopen


def _make_async_urlopen(original: Callable[..., Any], urllib3: ModuleType) -> Callable[..., Any]:
    response_class = urllib3._async.response.AsyncHTTPResponse

    async def urlopen(self: Any, *args: Any, **kwargs: Any) -> Any:
        tape = runtime.active()
        if tape is None or _passed_on(kwargs):
            return await original(self, *args, **kwargs)
        call = _Call(original, urllib3, response_class, self, args, kwargs)

        plan = begin(tape, call.request)
        with serving(tape, plan, failure_of):
            if isinstance(plan, Replay):
                return call.replayed(plan.interaction, plan.playback)
            # The body is read to its end here, each piece written down as it arrives, before
            # the caller gets the response: urllib3-future's async response reads a body of
            # another kind than its own backend's without awaiting it.
            recording = plan.recording
            live = await original(**call.live())
            head = _Head.of_live(live)
            recording.respond(head.status, head.reason, _version_text(head.version), head.headers)
            try:
                async for piece in live.stream(-1, decode_content=False):
                    recording.chunk(piece)
            finally:
                released = live.release_conn()
                if inspect.isawaitable(released):
                    await released
            recording.finish()
            interaction = recording.interaction
            return call.respond(head, _Replayed(interaction, Schedule.of(interaction, False)))

    return urlopen


class _Head:
    __slots__ = ("headers", "reason", "status", "version")

    def __init__(self, status: int, reason: str, version: int, headers: list[tuple[str, str]]):
        self.status = status
        self.reason = reason
        self.version = version
        self.headers = headers

    @classmethod
    def of_live(cls, live: Any) -> _Head:
        return cls(live.status, live.reason or "", live.version, list(live.headers.items()))

    @classmethod
    def of(cls, response: Any) -> _Head:
        text = response.http_version.removeprefix("HTTP/")
        version = {"1.0": 10, "1.1": 11, "2": 20, "2.0": 20, "3": 30, "3.0": 30}.get(text, 11)
        return cls(response.status, response.reason, version, list(response.headers))


def _version_text(version: int) -> str:
    return {10: "HTTP/1.0", 11: "HTTP/1.1", 20: "HTTP/2", 30: "HTTP/3"}.get(version, "HTTP/1.1")


def _url_of(pool: Any, path: str) -> str:
    if path.startswith(("http://", "https://")):
        return path
    scheme = pool.scheme
    host = f"[{pool.host}]" if ":" in pool.host else pool.host
    port = pool.port
    netloc = host if port in (None, 443 if scheme == "https" else 80) else f"{host}:{port}"
    return f"{scheme}://{netloc}{path}"


def _whole(body: Any) -> bytes | str | None:
    """A body as bytes it can be sent as again: a file or an iterable (a streamed upload) is
    read here, once."""
    if body is None or isinstance(body, (bytes, str)):
        return body
    if hasattr(body, "read"):
        data = body.read()
        return data.encode() if isinstance(data, str) else bytes(data)
    return b"".join(piece.encode() if isinstance(piece, str) else bytes(piece) for piece in body)


def _bytes(body: bytes | str | None) -> bytes:
    if body is None:
        return b""
    return body.encode() if isinstance(body, str) else body


def failure_of(exc: BaseException) -> Failure | None:
    """What urlopen's exception stands for: the cause a ``MaxRetryError`` carries."""
    reason = getattr(exc, "reason", None)
    if type(exc).__name__ == "MaxRetryError" and isinstance(reason, Exception):
        exc = reason
    failure = urllib3_failure_of(exc)
    if failure is not None and type(exc).__name__ == "NameResolutionError":
        message = str(exc)
        start = message.find("Failed to resolve")
        return Failure(failure.kind, failure.type, message[start:] if start >= 0 else message)
    if failure is not None and ": " in failure.message and failure.message.startswith("<"):
        # "<urllib3.connection.HTTPConnection object at 0x...>: Failed to establish ..."
        return Failure(failure.kind, failure.type, failure.message.split(": ", 1)[1])
    return failure


def _exception_for(error: Failure, errors: Any, pool: Any, url: str) -> Exception:
    """urlopen's exception for ``error``, as it raised it live."""
    kind = error.type
    message = error.message
    if kind == "ReadTimeoutError":
        exception: Exception = errors.ReadTimeoutError(pool, url, message)
        return exception
    if kind == "NameResolutionError":
        host = message.split("'")[1] if message.count("'") >= 2 else pool.host
        detail = message.rpartition("(")[2].rstrip(")")
        reason = errors.NameResolutionError(host, pool, socket.gaierror(detail))
    elif kind in ("NewConnectionError", "ConnectTimeoutError"):
        reason = getattr(errors, kind)(pool, message)
    else:
        reason = errors.ProtocolError(message)
    result: Exception = errors.MaxRetryError(pool, url, reason)
    return result


class _Pieces(io.RawIOBase):
    """A body urllib3-future reads as it reads its own backend's: ``read(-1)`` (what its
    ``read1`` and ``stream(-1)`` ask for) is the next piece as it arrived, ``read()`` all.
    A subclass says what the next piece is (``piece``; empty at the end)."""

    def __init__(self) -> None:
        super().__init__()
        self._left = b""
        self._ended = False

    def readable(self) -> bool:
        return True

    def isclosed(self) -> bool:
        """True once the body was read to its end, as ``http.client``'s response says: what
        urllib3's ``stream()`` stops at."""
        return self._ended or self.closed

    def piece(self) -> bytes:
        raise NotImplementedError

    def read(self, size: int | None = None) -> bytes:
        if size is None:
            return self.readall()
        if size < 0:
            size = _PIECE
        return super().read(size) or b""

    def readinto(self, buffer: Any) -> int:
        if not self._left:
            self._left = self.piece()
            self._ended = not self._left
        size = min(len(buffer), len(self._left))
        buffer[:size] = self._left[:size]
        self._left = self._left[size:]
        return size


_PIECE = 1 << 20
_OLD_PIECE = 1 << 16


class _Replayed(_Pieces):
    """The recorded body, a piece per read, each when it is due."""

    def __init__(self, interaction: Interaction, schedule: Schedule) -> None:
        super().__init__()
        response = interaction.response
        assert response is not None
        self._pieces: Iterator[bytes] = iter(list(response.iter_chunks()))
        self._schedule = schedule
        self._error = interaction.error
        self._index = 0

    def piece(self) -> bytes:
        piece = next(self._pieces, None)
        if piece is None:
            if self._error is not None:
                raise ConnectionResetError(self._error.message)
            return b""
        self._schedule.wait(self._schedule.chunk(self._index))
        self._index += 1
        return piece


class _Tee(_Pieces):
    """The live response's body, undecoded, written down piece by piece as the caller reads:
    each piece as it arrives (``read1``; before urllib3-future had it, pieces of up to
    ``_OLD_PIECE`` bytes)."""

    def __init__(self, live: Any, recording: Recording) -> None:
        super().__init__()
        self._live = live
        self._recording = recording

    def piece(self) -> bytes:
        live = self._live
        token = runtime.enter_adapter()
        try:
            if hasattr(live, "read1"):
                data: bytes = live.read1(-1, decode_content=False)
            else:  # a read that may wait for the whole piece asked for, or the end
                data = live.read(_OLD_PIECE, decode_content=False)
        except Exception as exc:
            failure = failure_of(exc)
            if failure is not None:
                self._recording.fail(failure)
            raise
        finally:
            runtime.exit_adapter(token)
        if not data:
            self._recording.finish()
            live.release_conn()
            return b""
        self._recording.chunk(data)
        return data

    def close(self) -> None:
        if not self.closed:
            self._recording.finish(truncated=True)
            self._live.release_conn()
        super().close()
