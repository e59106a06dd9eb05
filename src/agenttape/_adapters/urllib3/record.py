"""Recording: the live response's body teed, chunk by chunk, from the socket file urllib3
reads."""

from __future__ import annotations

import http.client
from collections.abc import Callable
from typing import Any

from ..._core.models import Failure, FailureKind
from ..._core.tape import Recording
from .. import wire

# urllib3 / http.client / builtin exception name -> library-neutral kind.
KIND_BY_EXCEPTION: dict[str, FailureKind] = {
    "NewConnectionError": "connect_error",
    "NameResolutionError": "connect_error",
    "gaierror": "connect_error",
    "ConnectionRefusedError": "connect_error",
    "SSLError": "connect_error",
    "ConnectTimeoutError": "connect_timeout",
    "ReadTimeoutError": "read_timeout",
    "TimeoutError": "write_timeout",
    "ProxyError": "proxy_error",
    "ProtocolError": "protocol_error",
    "RemoteDisconnected": "protocol_error",
    "BadStatusLine": "protocol_error",
    "LineTooLong": "protocol_error",
    "IncompleteRead": "protocol_error",
    "ConnectionResetError": "read_error",
    "ConnectionAbortedError": "read_error",
    "BrokenPipeError": "write_error",
    "LocationParseError": "unsupported_protocol",
    "URLSchemeUnknown": "unsupported_protocol",
}


def failure_of(exc: BaseException) -> Failure | None:
    """The failure one of urllib3's (or the standard library's) exceptions stands for;
    None for an exception that is not about the exchange (an interrupt)."""
    if not isinstance(exc, Exception):
        return None
    name = type(exc).__name__
    kind = KIND_BY_EXCEPTION.get(name)
    if kind is None:
        kind = "read_error" if isinstance(exc, OSError) else "transport_error"
    message = getattr(exc, "message_of", None)
    return Failure(kind, name, message if isinstance(message, str) else str(exc))


def hook_response(conn: Any, recording: Recording, method: str) -> Callable[[], None]:
    """Taps the response ``conn.getresponse()`` builds, right after its head is parsed and
    before urllib3 reads (or preloads) the body; returns the undo."""
    had_own = "getresponse" in vars(conn)

    def getresponse(*args: Any, **kwargs: Any) -> Any:
        inner = conn.response_class
        conn.response_class = _tapping_factory(inner, recording, method)
        try:
            return type(conn).getresponse(conn, *args, **kwargs)
        finally:
            conn.response_class = inner

    conn.getresponse = getresponse

    def undo() -> None:
        if not had_own:
            vars(conn).pop("getresponse", None)

    return undo


def _tapping_factory(inner: Any, recording: Recording, method: str) -> Callable[..., Any]:
    def build(*args: Any, **kwargs: Any) -> Any:
        response = inner(*args, **kwargs)
        begin = response.begin

        def tapped_begin() -> None:
            begin()
            _tap(response, recording, method)

        response.begin = tapped_begin
        return response

    return build


def _tap(response: http.client.HTTPResponse, recording: Recording, method: str) -> None:
    version = {9: "HTTP/0.9", 10: "HTTP/1.0"}.get(response.version, "HTTP/1.1")
    message = response.msg
    raw_headers = getattr(message, "_headers", None) or message.items()
    headers = [(str(name), str(value)) for name, value in raw_headers]
    recording.respond(response.status, response.reason, version, headers)
    length = response.length
    decoder = wire.BodyDecoder(chunked=bool(response.chunked), length=length)
    if decoder.done or method == "HEAD":
        recording.finish()
        return
    response.fp = _TeeFile(response.fp, recording, decoder)  # type: ignore[assignment]


class _TeeFile:
    """The socket file under ``http.client``: every body byte read through it reaches the
    caller at once and the recording too, framing removed, one piece per read."""

    def __init__(self, fp: Any, recording: Recording, decoder: wire.BodyDecoder) -> None:
        self._fp = fp
        self._recording = recording
        self._decoder = decoder

    def __getattr__(self, name: str) -> Any:
        return getattr(self._fp, name)

    def _saw(self, data: bytes, asked: bool) -> None:
        recording = self._recording
        if recording.finished:
            return
        decoder = self._decoder
        if data:
            recording.chunk(decoder.feed(data))
            if decoder.done:
                recording.finish()
        elif asked:
            if decoder.runs_to_eof:
                recording.finish()
            else:
                recording.fail_as(
                    "protocol_error",
                    "IncompleteRead",
                    "connection closed before the whole response body arrived",
                )

    def _call(self, name: str, *args: Any) -> Any:
        try:
            return getattr(self._fp, name)(*args)
        except Exception as exc:
            failure = failure_of(exc)
            if failure is not None and not self._recording.finished:
                if isinstance(exc, TimeoutError):
                    failure = Failure("read_timeout", "ReadTimeoutError", failure.message)
                self._recording.fail(failure)
            raise

    def read(self, size: int | None = -1) -> bytes:
        data: bytes = self._call("read", size)
        self._saw(data, size != 0)
        if size is None or size < 0 or len(data) < size:
            self._saw(b"", True)  # a buffered read comes back short only at the end
        return data

    def read1(self, size: int = -1) -> bytes:
        data: bytes = self._call("read1", size)
        self._saw(data, size != 0)
        return data

    def readline(self, size: int | None = -1) -> bytes:
        data: bytes = self._call("readline", size)
        self._saw(data, size != 0)
        return data

    def readinto(self, buffer: Any) -> int:
        count: int = self._call("readinto", buffer)
        self._saw(bytes(memoryview(buffer)[:count]), len(buffer) > 0)
        return count

    def readinto1(self, buffer: Any) -> int:
        count: int = self._call("readinto1", buffer)
        self._saw(bytes(memoryview(buffer)[:count]), len(buffer) > 0)
        return count

    def flush(self) -> None:
        """Nothing to flush in a file that is only read: ``http.client`` flushes its file
        when the response is collected, and by then the connection may have closed it."""

    def close(self) -> None:
        try:
            self._fp.close()
        finally:
            self._recording.finish(truncated=True)
