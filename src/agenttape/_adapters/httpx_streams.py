"""The streams the httpx adapter hands httpx and httpx2: a live body teed into its recording
as each chunk arrives, and a replayed body handed over as the replay walk delivers it. The
adapter derives each from the library's own stream base classes."""

from __future__ import annotations

import functools
from collections.abc import AsyncIterator, Callable, Iterator
from types import ModuleType
from typing import Any

from .._core.models import Failure, Interaction
from .._core.playback import Schedule, Walk
from .._core.tape import Recording

EXCEPTION_BY_KIND: dict[str, str] = {
    "connect_error": "ConnectError",
    "connect_timeout": "ConnectTimeout",
    "read_timeout": "ReadTimeout",
    "write_timeout": "WriteTimeout",
    "pool_timeout": "PoolTimeout",
    "read_error": "ReadError",
    "write_error": "WriteError",
    "protocol_error": "RemoteProtocolError",
    "proxy_error": "ProxyError",
    "unsupported_protocol": "UnsupportedProtocol",
}


def exception_for(hx: ModuleType, error: Failure | None, request: Any) -> Exception:
    """The library's own exception for a recorded failure."""
    assert error is not None
    exception_class = getattr(hx, error.type, None)
    if not (isinstance(exception_class, type) and issubclass(exception_class, hx.TransportError)):
        exception_class = getattr(hx, EXCEPTION_BY_KIND.get(error.kind, "TransportError"))
    exception: Exception = exception_class(error.message, request=request)
    return exception


class TeeStream:
    """Hands each raw chunk to the caller the moment it arrives, and to the recording."""

    def __init__(
        self,
        failure_of: Callable[[BaseException], Failure | None],
        stream: Any,
        recording: Recording,
    ) -> None:
        self._failure_of = failure_of
        self._stream = stream
        # Let go of once finished: httpx keeps a read response in a reference cycle until the
        # garbage collector runs, which would keep the recorded exchange alive as long.
        self._recording: Recording | None = recording

    def _failed(self, exc: Exception) -> None:
        """Marks the recording failed (as the library names the error) when reading the
        live stream raised ``exc``."""
        failure = self._failure_of(exc)
        if failure is not None and self._recording is not None:
            self._recording.fail(failure)

    def __iter__(self) -> Iterator[bytes]:
        recording = self._recording
        assert recording is not None
        # try/except in place, not a context manager: this runs once per live response.
        try:
            for chunk in self._stream:
                recording.chunk(chunk)
                yield chunk
        except Exception as exc:
            self._failed(exc)
            raise
        recording.finish()
        self._recording = None

    def close(self) -> None:
        try:
            self._stream.close()
        finally:
            if self._recording is not None:
                self._recording.finish(truncated=True)
                self._recording = None


class AsyncTeeStream(TeeStream):
    async def __aiter__(self) -> AsyncIterator[bytes]:
        recording = self._recording
        assert recording is not None
        try:
            async for chunk in self._stream:
                recording.chunk(chunk)
                yield chunk
        except Exception as exc:
            self._failed(exc)
            raise
        recording.finish()
        self._recording = None

    async def aclose(self) -> None:
        try:
            await self._stream.aclose()
        finally:
            if self._recording is not None:
                self._recording.finish(truncated=True)
                self._recording = None


def _read_timeout(request: Any) -> float | None:
    """The seconds the client waits for data (its read timeout), None for no limit."""
    timeout = request.extensions.get("timeout")
    read = timeout.get("read") if isinstance(timeout, dict) else None
    return read if isinstance(read, (int, float)) else None


def _read_timed_out(hx: ModuleType, request: Any) -> Exception:
    exception: Exception = hx.ReadTimeout("timed out", request=request)
    return exception


class ReplayStream:
    """Hands the client the recorded chunks as the replay walk delivers them, then the
    recorded ending; closing the stream releases a body held open."""

    def __init__(
        self, hx: ModuleType, interaction: Interaction, request: Any, schedule: Schedule
    ) -> None:
        self._hx = hx
        self._error = interaction.error
        self._request = request
        self._schedule = schedule
        # The exception made without the stream: a walk that refers back to its stream would
        # leave both (and the request) to the garbage collector after every replay.
        self.walk = Walk.of(
            interaction,
            schedule,
            timeout=_read_timeout(request),
            timed_out=functools.partial(_read_timed_out, hx, request),
        )

    def __iter__(self) -> Iterator[bytes]:
        walk = self.walk
        yield from walk
        if walk.ending == "failed":
            raise walk.noted(exception_for(self._hx, self._error, self._request))

    async def __aiter__(self) -> AsyncIterator[bytes]:
        walk = self.walk
        async for piece in walk:
            yield piece
        if walk.ending == "failed":
            raise walk.noted(exception_for(self._hx, self._error, self._request))

    def close(self) -> None:
        self._schedule.release()
        self._let_go()

    async def aclose(self) -> None:
        self._schedule.release()
        self._let_go()

    def _let_go(self) -> None:
        """A closed stream lets go of the recorded answer: httpx's response and its stream
        refer to each other, so they wait for the garbage collector, and with them the body
        of an interaction the cassette decoded for this play alone (``StoredInteractions``)."""
        self.walk.pieces = ()
        self._schedule.origin = None
