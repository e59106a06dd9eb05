"""grpcio's sync channels: intercepted where a channel makes its multi-callables.

``grpc._channel.Channel.unary_unary`` (and the three other shapes) hand back a wrapper around
grpcio's own multi-callable. With no cassette active it calls grpcio's as is. Otherwise a
call is one ``exchange``: replayed from the cassette through the stub's deserializer, or run
for real through a multi-callable of the same method that sends and receives bytes, so what
crosses the wire is exactly what is recorded. Interceptors of ``grpc.intercept_channel`` sit
above the channel and run in both cases.

A recording that matches nothing first (mode ``all``, ``once`` on a new cassette) sends each
message as the caller gives it and passes each answer on as it arrives; replay matches a call
whose requests and answers both stream message by message (``matched``), answering each
message as it comes. A streamed request is otherwise read to its end before the call is
matched (``new_episodes``, which may record it, and a call answered once).
"""

from __future__ import annotations

import weakref
from collections.abc import Callable, Iterator
from types import ModuleType
from typing import Any

import grpc

from ..._core import runtime
from ..._core.blame import passed_through
from ..._core.exchange import Replay, begin, serving
from ..._core.models import Interaction
from ..._core.playback import Schedule
from ..._core.tape import Recording, Tape
from .. import ledger
from .common import (
    Method,
    bytes_twin,
    not_a_transport_failure,
    record_call_end,
    record_head,
    record_message,
    records_unmatched,
)
from .matched import Conversation, MatchedStream
from .replayed import ReplayedCall, ReplayedRpcError, ReplayedStream, unary

__tracebackhide__ = passed_through

# grpcio's multi-callable class -> (whether requests stream, whether answers stream, the
# methods a call goes through). Patched on the class, so a stub made before the cassette
# opened is served too.
_CLASSES: dict[str, tuple[bool, bool, tuple[str, ...]]] = {
    "_UnaryUnaryMultiCallable": (False, False, ("__call__", "with_call", "future")),
    "_UnaryStreamMultiCallable": (False, True, ("__call__",)),
    "_SingleThreadedUnaryStreamMultiCallable": (False, True, ("__call__",)),
    "_StreamUnaryMultiCallable": (True, False, ("__call__", "with_call", "future")),
    "_StreamStreamMultiCallable": (True, True, ("__call__",)),
}
_taped: weakref.WeakKeyDictionary[Any, _Taped] = weakref.WeakKeyDictionary()


def install(channel_module: ModuleType) -> list[ledger.Patch]:
    """The call methods of each multi-callable class this grpcio has (a version without one
    of them has no patch for it), and the channel's ``subscribe``."""
    patches = [ledger.wrap(channel_module.Channel, "subscribe", _make_subscribe)]
    for name, (stream_request, stream_response, entries) in _CLASSES.items():
        multi_callable = getattr(channel_module, name, None)
        if multi_callable is None:
            continue
        patches += [
            ledger.wrap(multi_callable, entry, _maker(entry, stream_request, stream_response))
            for entry in entries
            if getattr(multi_callable, entry, None) is not None
        ]
    return patches


def _maker(entry: str, stream_request: bool, stream_response: bool) -> Callable[[Any], Any]:
    return lambda original: _entry(original, entry, stream_request, stream_response)


def _make_subscribe(subscribe: Callable[..., None]) -> Callable[..., None]:
    def guarded_subscribe(
        self: Any, callback: Callable[[Any], None], try_to_connect: bool | None = None
    ) -> None:
        # A replayed channel never connects: its calls are served from the cassette.
        tape = runtime.active()
        if try_to_connect and tape is not None and _replays_only(tape):
            callback(grpc.ChannelConnectivity.READY)
            return
        subscribe(self, callback, try_to_connect)

    return guarded_subscribe


def _replays_only(tape: Tape) -> bool:
    return tape.mode in ("none", "once") and tape.block_network and bool(tape.interactions)


def _entry(original: Any, entry: str, stream_request: bool, stream_response: bool) -> Any:
    def call(
        self: Any,
        request: Any,
        timeout: Any = None,
        metadata: Any = None,
        *extra: Any,
        **named: Any,
    ) -> Any:
        tape = runtime.active()
        if tape is None:
            return original(self, request, timeout, metadata, *extra, **named)
        taped = _taped.get(self)
        if taped is None:
            taped = _taped[self] = _Taped(self, stream_request)
        options = _extra(extra, named)
        if stream_response:
            return taped.stream(tape, request, timeout, metadata, options)
        if entry == "future":
            return taped.future(tape, request, timeout, metadata, options)
        response, call = taped.unary(tape, request, timeout, metadata, options)
        return (response, call) if entry == "with_call" else response

    call.__name__ = entry
    call.__doc__ = original.__doc__
    return call


class _Taped:
    """What a grpcio multi-callable does while a cassette is active."""

    def __init__(self, multi_callable: Any, streaming_request: bool) -> None:
        self._multi_callable = multi_callable
        self._live: Any = None
        self.streaming_request = streaming_request
        target = getattr(multi_callable, "_target", None) or b"localhost"
        self._method = Method.of(
            target.decode("utf-8", "replace") if isinstance(target, bytes) else str(target),
            multi_callable._method,
            multi_callable._request_serializer,
            multi_callable._response_deserializer,
        )

    def live(self) -> Any:
        """grpcio's multi-callable of this method that sends and receives bytes."""
        if self._live is None:
            self._live = bytes_twin(self._multi_callable)
        return self._live

    def _messages(self, request: Any) -> list[Any]:
        return list(request) if self.streaming_request else [request]

    def _exchange(
        self,
        tape: Tape,
        request: Any,
        timeout: Any,
        metadata: Any,
        replayed: Callable[[Method, Interaction, Schedule, Any], Any],
        record: Callable[[Recording, Any], Any],
    ) -> Any:
        """One call through the tape: ``replayed`` answers from the recorded interaction,
        ``record`` sends the request's payloads as grpcio's bytes multi-callable takes them
        (an iterator when the request streams)."""
        method = self._method
        # Recorded without a match, a streamed request's messages are written down as they
        # are sent; otherwise they are all read first, to match the call.
        as_sent = self.streaming_request and records_unmatched(tape)
        payloads: list[bytes] = []
        if as_sent:
            model, _none = method.request((), metadata)
        else:
            model, payloads = method.request(self._messages(request), metadata)
        plan = begin(tape, model)
        with serving(tape, plan, not_a_transport_failure):
            if isinstance(plan, Replay):
                return replayed(method, plan.interaction, plan.playback, timeout)
            recording = plan.recording
            if as_sent:
                return record(recording, method.sent(tape, recording, request))
            return record(recording, iter(payloads) if self.streaming_request else payloads[0])

    def unary(
        self, tape: Tape, request: Any, timeout: Any, metadata: Any, extra: tuple[Any, ...]
    ) -> Any:
        """One unary answer: ``(response, call)``, raising the recorded error."""

        def record(recording: Recording, argument: Any) -> Any:
            try:
                raw, call = self.live().with_call(argument, timeout, metadata, *extra)
            except grpc.RpcError as error:
                record_call_end(recording, error)
                raise
            record_head(recording, call)
            record_message(recording, raw)
            record_call_end(recording, call)
            return self._method.deserialize(raw), call

        return self._exchange(tape, request, timeout, metadata, _unary_answer, record)

    def future(
        self, tape: Tape, request: Any, timeout: Any, metadata: Any, extra: tuple[Any, ...]
    ) -> Any:
        def record(recording: Recording, argument: Any) -> Any:
            future = self.live().future(argument, timeout, metadata, *extra)

            def done(call: Any) -> None:
                if call.exception() is None:
                    record_head(recording, call)
                    record_message(recording, call.result())
                record_call_end(recording, call)

            future.add_done_callback(done)
            return _DeserializingFuture(future, self._method)

        return self._exchange(tape, request, timeout, metadata, unary, record)

    def stream(
        self, tape: Tape, request: Any, timeout: Any, metadata: Any, extra: tuple[Any, ...]
    ) -> Any:
        if self.streaming_request:
            model, _none = self._method.request((), metadata)
            candidates = tape.candidates(model)
            if candidates is not None:
                conversation = Conversation(tape, self._method, model, candidates)
                return MatchedStream(conversation, iter(request), timeout)

        def record(recording: Recording, argument: Any) -> Any:
            rendezvous = self.live()(argument, timeout, metadata, *extra)
            return _RecordingStream(rendezvous, recording, self._method)

        return self._exchange(tape, request, timeout, metadata, ReplayedStream, record)


def _unary_answer(
    method: Method, interaction: Interaction, schedule: Schedule, timeout: Any
) -> tuple[Any, Any]:
    """A replayed unary call's ``(response, call)``, raising the recorded error."""
    call = unary(method, interaction, schedule, timeout)
    if isinstance(call, ReplayedRpcError):
        raise call
    return call.result(), call


_EXTRA = ("credentials", "wait_for_ready", "compression")


def _extra(extra: tuple[Any, ...], named: dict[str, Any]) -> tuple[Any, ...]:
    """credentials, wait_for_ready, compression, however they were passed."""
    values = list(extra) + [None] * (len(_EXTRA) - len(extra))
    for index, name in enumerate(_EXTRA):
        if name in named:
            values[index] = named[name]
    return tuple(values)


class _DeserializingFuture:
    """A live call's future whose result goes through the stub's deserializer."""

    def __init__(self, future: Any, method: Method) -> None:
        self._future = future
        self._method = method

    def result(self, timeout: float | None = None) -> Any:
        return self._method.deserialize(self._future.result(timeout))

    def add_done_callback(self, fn: Callable[[Any], None]) -> None:
        self._future.add_done_callback(lambda _future: fn(self))

    def __getattr__(self, name: str) -> Any:
        return getattr(self._future, name)


class _RecordingStream:
    """A live stream of responses, each recorded as it is read."""

    def __init__(self, rendezvous: Any, recording: Recording, method: Method) -> None:
        self._rendezvous = rendezvous
        self._recording = recording
        self._method = method

    def __iter__(self) -> Iterator[Any]:
        return self

    def __next__(self) -> Any:
        recording = self._recording
        try:
            raw = next(self._rendezvous)
        except (StopIteration, grpc.RpcError):
            record_call_end(recording, self._rendezvous)
            raise
        record_head(recording, self._rendezvous)
        record_message(recording, raw)
        return self._method.deserialize(raw)

    next = __next__

    def cancel(self) -> bool:
        cancelled = bool(self._rendezvous.cancel())
        record_call_end(self._recording, self._rendezvous)
        return cancelled

    def __getattr__(self, name: str) -> Any:
        return getattr(self._rendezvous, name)


__all__ = ["ReplayedCall", "ReplayedStream", "install"]
