"""httpx and httpx2 (same layout): intercepted where the client picks a transport.

Wrapping the transport ``Client._transport_for_url`` returns sees every wire exchange —
each redirect hop and auth challenge, custom transports, ``mounts=`` — and sees the raw,
still-encoded body stream, chunk by chunk.
"""

from __future__ import annotations

import asyncio
import sys
import time
from collections.abc import AsyncIterator, Iterator
from types import ModuleType
from typing import Any

from .. import _runtime
from .._cassette import Recording
from .._models import Interaction, Request
from ._headers import decode_header_set, decode_headers, decode_text

_PATCHED = "__agenttape_original_transport_for_url__"
# Response extension marking a response served from a cassette (read by fast_retries).
REPLAYED = "agenttape_replayed"

# httpx exception name -> library-neutral kind (see Failure).
KIND_BY_EXCEPTION = {
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
EXCEPTION_BY_KIND = {
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


class _Library:
    """One of httpx or httpx2, with stream classes deriving from its own base classes
    (the client asserts ``isinstance(response.stream, SyncByteStream)``)."""

    def __init__(self, hx: ModuleType) -> None:
        self.hx = hx
        self.tee = type("TeeStream", (_TeeStream, hx.SyncByteStream), {})
        self.async_tee = type("AsyncTeeStream", (_AsyncTeeStream, hx.AsyncByteStream), {})
        self.replay = type(
            "ReplayStream", (_ReplayStream, hx.SyncByteStream, hx.AsyncByteStream), {}
        )


def install(hx: ModuleType) -> None:
    library = _Library(hx)
    for client_class in (hx.Client, hx.AsyncClient):
        if _PATCHED in vars(client_class):
            continue  # httpx2.alias_httpx() makes both names one module
        original = client_class._transport_for_url
        wrapper = _AsyncTapeTransport if client_class is hx.AsyncClient else _TapeTransport
        setattr(client_class, _PATCHED, original)
        client_class._transport_for_url = _make_transport_for_url(original, wrapper, library)


def _make_transport_for_url(original: Any, wrapper: type, library: _Library) -> Any:
    def _transport_for_url(self: Any, url: Any) -> Any:
        transport = original(self, url)
        if _runtime.active() is None:
            return transport
        return wrapper(transport, library)

    return _transport_for_url


def _to_model(request: Any) -> Request:
    return Request(
        request.method,
        str(request.url),
        decode_header_set(request.headers.raw),
        request.content,
    )


def is_replayed(response: Any) -> bool:
    """True when ``response`` was served from a cassette rather than the network."""
    extensions = getattr(response, "extensions", None)
    return isinstance(extensions, dict) and extensions.get(REPLAYED) is True


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


def _failure_of(exc: Exception) -> tuple[str, str, str]:
    name = type(exc).__name__
    return KIND_BY_EXCEPTION.get(name, "transport_error"), name, str(exc)


def _exception_for(hx: ModuleType, interaction: Interaction, request: Any) -> Exception:
    error = interaction.error
    assert error is not None
    exception_class = getattr(hx, error.type, None)
    if not (isinstance(exception_class, type) and issubclass(exception_class, hx.TransportError)):
        exception_class = getattr(hx, EXCEPTION_BY_KIND.get(error.kind, "TransportError"))
    exception: Exception = exception_class(error.message, request=request)
    return exception


def _head_delay(interaction: Interaction) -> float:
    """With ``realtime``, seconds until the recorded head arrived (or the error without one)."""
    if interaction.response is None:
        return interaction.duration or 0.0
    return interaction.ttfb or 0.0


def _replay_response(hx: ModuleType, interaction: Interaction, request: Any, stream: Any) -> Any:
    response = interaction.response
    if response is None:
        raise _exception_for(hx, interaction, request)
    return hx.Response(
        response.status,
        headers=[(k.encode("latin-1"), v.encode("latin-1")) for k, v in response.headers],
        stream=stream,
        extensions={
            "http_version": response.http_version.encode("ascii"),
            "reason_phrase": response.reason.encode("latin-1"),
            REPLAYED: True,
        },
    )


def _record_head(recording: Recording, response: Any) -> None:
    # ``reason_phrase`` decodes as ASCII and drops other bytes; the extension has them all.
    extensions = response.extensions
    raw_reason = extensions.get("reason_phrase")
    raw_version = extensions.get("http_version")
    recording.respond(
        response.status_code,
        decode_text(raw_reason) if isinstance(raw_reason, bytes) else response.reason_phrase,
        decode_text(raw_version)
        if isinstance(raw_version, bytes) and raw_version.isascii()
        else response.http_version,
        decode_headers(response.headers.raw),
    )


class _TapeTransport:
    """Stands in front of the transport the client chose, for one request."""

    def __init__(self, transport: Any, library: _Library) -> None:
        self._transport = transport
        self._library = library

    def __getattr__(self, name: str) -> Any:
        return getattr(self._transport, name)

    def handle_request(self, request: Any) -> Any:
        library = self._library
        hx = library.hx
        cassette = _runtime.active()
        if cassette is None or _respx_serves(hx, request):
            return self._transport.handle_request(request)
        request.read()
        plan = cassette.begin(_to_model(request))
        if isinstance(plan, Interaction):
            stream = library.replay(hx, plan, request, cassette.realtime)
            if cassette.realtime and _head_delay(plan) > 0:
                time.sleep(_head_delay(plan))
            return _replay_response(hx, plan, request, stream)
        token = _runtime.enter_adapter()
        try:
            response = self._transport.handle_request(request)
        except hx.TransportError as exc:
            plan.fail(*_failure_of(exc))
            raise
        finally:
            _runtime.exit_adapter(token)
        _record_head(plan, response)
        if hasattr(response, "_content"):
            plan.chunk(response.content)
            plan.finish()
            return response
        response.stream = library.tee(hx, response.stream, plan)
        return response


class _AsyncTapeTransport(_TapeTransport):
    async def handle_async_request(self, request: Any) -> Any:
        library = self._library
        hx = library.hx
        cassette = _runtime.active()
        if cassette is None or _respx_serves(hx, request):
            return await self._transport.handle_async_request(request)
        await request.aread()
        plan = cassette.begin(_to_model(request))
        if isinstance(plan, Interaction):
            stream = library.replay(hx, plan, request, cassette.realtime)
            if cassette.realtime and _head_delay(plan) > 0:
                await asyncio.sleep(_head_delay(plan))
            return _replay_response(hx, plan, request, stream)
        token = _runtime.enter_adapter()
        try:
            response = await self._transport.handle_async_request(request)
        except hx.TransportError as exc:
            plan.fail(*_failure_of(exc))
            raise
        finally:
            _runtime.exit_adapter(token)
        _record_head(plan, response)
        if hasattr(response, "_content"):
            plan.chunk(response.content)
            plan.finish()
            return response
        response.stream = library.async_tee(hx, response.stream, plan)
        return response


class _TeeStream:
    """Hands each raw chunk to the caller the moment it arrives, and to the recording."""

    def __init__(self, hx: ModuleType, stream: Any, recording: Recording) -> None:
        self._hx = hx
        self._stream = stream
        # Let go of once finished: httpx keeps a read response in a reference cycle until the
        # garbage collector runs, which would keep the recorded exchange alive as long.
        self._recording: Recording | None = recording

    def __iter__(self) -> Iterator[bytes]:
        recording = self._recording
        assert recording is not None
        try:
            for chunk in self._stream:
                recording.chunk(chunk)
                yield chunk
        except self._hx.TransportError as exc:
            recording.fail(*_failure_of(exc))
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


class _AsyncTeeStream(_TeeStream):
    async def __aiter__(self) -> AsyncIterator[bytes]:
        recording = self._recording
        assert recording is not None
        try:
            async for chunk in self._stream:
                recording.chunk(chunk)
                yield chunk
        except self._hx.TransportError as exc:
            recording.fail(*_failure_of(exc))
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


class _ReplayStream:
    """Serves the recorded chunks; with ``realtime`` at their recorded offsets."""

    def __init__(
        self, hx: ModuleType, interaction: Interaction, request: Any, realtime: bool
    ) -> None:
        self._hx = hx
        self._interaction = interaction
        self._request = request
        self._realtime = realtime
        self._t0 = time.perf_counter()

    def _delays(self) -> Iterator[tuple[bytes, float]]:
        response = self._interaction.response
        assert response is not None
        offsets = [offset for _size, offset in response.chunks]
        for index, chunk in enumerate(response.iter_chunks()):
            due = offsets[index] if self._realtime and index < len(offsets) else 0.0
            yield chunk, due - (time.perf_counter() - self._t0)

    def _tail_delay(self) -> float:
        """With ``realtime``, what ended the recorded body ends the replay at the same moment.

        A recorded error (a read timeout) fires when it did. A body the reader cut short
        (truncated) sends nothing more for as long as it did live and as long again before it
        ends, so a reader's own timeout fires as it did instead of meeting an early end.
        """
        interaction = self._interaction
        response = interaction.response
        if not self._realtime or interaction.duration is None or response is None:
            return 0.0
        if interaction.error is not None:
            due = interaction.duration
        elif response.truncated:
            due = 2 * interaction.duration
        else:
            return 0.0
        return due - (time.perf_counter() - self._t0)

    def _end(self) -> None:
        if self._interaction.error is not None:
            raise _exception_for(self._hx, self._interaction, self._request)

    def _chunks(self) -> Iterator[bytes]:
        response = self._interaction.response
        assert response is not None
        return response.iter_chunks()

    def __iter__(self) -> Iterator[bytes]:
        if self._realtime:
            for chunk, delay in self._delays():
                if delay > 0:
                    time.sleep(delay)
                yield chunk
            delay = self._tail_delay()
            if delay > 0:
                time.sleep(delay)
        else:
            yield from self._chunks()
        self._end()

    async def __aiter__(self) -> AsyncIterator[bytes]:
        if self._realtime:
            for chunk, delay in self._delays():
                if delay > 0:
                    await asyncio.sleep(delay)
                yield chunk
            delay = self._tail_delay()
            if delay > 0:
                await asyncio.sleep(delay)
        else:
            for chunk in self._chunks():
                yield chunk
        self._end()

    def close(self) -> None:
        pass

    async def aclose(self) -> None:
        pass
