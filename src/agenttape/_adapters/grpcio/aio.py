"""grpcio's ``grpc.aio`` channels: intercepted where a channel makes its multi-callables,
as the sync channels are.

The wrapper's call object is what the stub's caller awaits or iterates. It opens the call
the first time it is asked anything (``begin``): replayed from the cassette, or run
for real through a multi-callable of the same method that sends and receives bytes. A
``grpc.aio`` channel's own interceptors run inside its multi-callables, so they run while
recording and not on replay.
"""

from __future__ import annotations

import asyncio
import time
import weakref
from collections.abc import AsyncIterator, Callable, Generator
from dataclasses import dataclass
from types import ModuleType
from typing import Any, TypeVar

import grpc
from grpc import aio

from ..._core import runtime
from ..._core.blame import passed_through
from ..._core.exchange import Replay, begin, serving
from ..._core.models import Interaction
from ..._core.playback import Schedule
from ..._core.tape import Recording, Tape
from ..._core.wire import grpc as grpc_wire
from .. import ledger
from .common import (
    DeadlinePassed,
    Method,
    Outcome,
    as_metadata,
    bytes_twin,
    encoding,
    not_a_transport_failure,
    record_end,
    record_head,
    record_message,
    records_unmatched,
    walk,
)
from .matched import ITERATING_FAILED, Conversation, Failed

__tracebackhide__ = passed_through

_DONE = object()
"""What ``done_writing`` puts after the last message written."""

# grpc.aio's multi-callable class -> (whether requests stream, whether answers stream).
# Patched on the class, so a stub made before the cassette opened is served too.
_CLASSES = {
    "UnaryUnaryMultiCallable": (False, False),
    "UnaryStreamMultiCallable": (False, True),
    "StreamUnaryMultiCallable": (True, False),
    "StreamStreamMultiCallable": (True, True),
}
_methods: weakref.WeakKeyDictionary[Any, Method] = weakref.WeakKeyDictionary()


def install(channel_module: ModuleType) -> list[ledger.Patch]:
    """``__call__`` of each multi-callable class this grpc.aio has and defines it."""
    channel_module.Channel  # noqa: B018 - the module this adapter knows has one
    patches = []
    for name, (stream_request, stream_response) in _CLASSES.items():
        multi_callable = getattr(channel_module, name, None)
        if multi_callable is not None and "__call__" in vars(multi_callable):
            patches.append(
                ledger.wrap(multi_callable, "__call__", _maker(stream_request, stream_response))
            )
    return patches


def _maker(stream_request: bool, stream_response: bool) -> Callable[[Any], Any]:
    return lambda original: _entry(original, stream_request, stream_response)


def _entry(original: Any, stream_request: bool, stream_response: bool) -> Any:
    def call(self: Any, request: Any = None, **options: Any) -> Any:
        tape = runtime.active()
        if tape is None:
            return original(self, request, **options)
        method = _methods.get(self)
        if method is None:
            target = getattr(self._channel, "target", None) or b"localhost"
            method = _methods[self] = Method.of(
                target.decode("utf-8", "replace") if isinstance(target, bytes) else str(target),
                self._method,
                self._request_serializer,
                self._response_deserializer,
            )
        spec = _Spec(self, method, stream_request, stream_response)
        return TapedCall(spec, tape, request, options)

    call.__doc__ = original.__doc__
    return call


@dataclass(frozen=True, slots=True)
class _Spec:
    """One multi-callable's method, its shape, and its twin that sends bytes."""

    multi_callable: Any
    method: Method
    stream_request: bool
    stream_response: bool

    def live(self) -> Any:
        return bytes_twin(self.multi_callable)


class TapedCall:
    """One call on a ``grpc.aio`` channel while a cassette is active: awaitable (unary
    answers), async-iterable and ``read()`` (streamed answers), ``write()`` and
    ``done_writing()`` (streamed requests without an iterator), and the call's metadata
    and status."""

    def __init__(self, callable_: _Spec, tape: Tape, request: Any, options: dict[str, Any]) -> None:
        self._callable = callable_
        self._tape = tape
        self._request = request
        self._options = options
        self._writes: list[Any] = []
        self._queue: asyncio.Queue[Any] | None = None
        self._writing_done: asyncio.Event | None = None
        self._opening: asyncio.Future[_Source] | None = None
        self._opened: _Source | None = None
        self._callbacks: list[Callable[[Any], None]] = []
        self._finished = False
        self._cancelled = False

    # -- opening the call --------------------------------------------------------------

    async def _messages(self) -> list[Any]:
        if not self._callable.stream_request:
            return [self._request]
        request = self._request
        if request is None:
            await self._written().wait()
            return list(self._writes)
        if hasattr(request, "__aiter__"):
            return [message async for message in request]
        return list(request)

    async def _given(self) -> AsyncIterator[Any]:
        """The request's messages as the caller gives them: an iterator, or ``write`` until
        ``done_writing``."""
        request = self._request
        if request is None:
            queue = self._queue = asyncio.Queue()
            for message in [*self._writes, *([_DONE] if self._written().is_set() else [])]:
                queue.put_nowait(message)
            while (message := await queue.get()) is not _DONE:
                yield message
        elif hasattr(request, "__aiter__"):
            async for message in request:
                yield message
        else:
            for message in request:
                yield message

    async def _sent(self, recording: Recording) -> AsyncIterator[bytes]:
        """The request's messages as the caller gives them, each recorded as it is sent
        (``Method.written``)."""
        method, tape = self._callable.method, self._tape
        async for message in self._given():
            yield method.written(tape, recording, message)

    async def _open(self) -> _Source:
        method = self._callable.method
        metadata = self._options.get("metadata")
        timeout = self._options.get("timeout")

        if self._callable.stream_request and self._callable.stream_response:
            head, _none = method.request((), metadata)
            candidates = self._tape.candidates(head)
            if candidates is not None:
                conversation = Conversation(self._tape, method, head, candidates)
                return _Matched(conversation, self._given(), timeout)

        # Recorded without a match, a streamed request's messages are written down as they
        # are sent; otherwise they are all read first, to match the call.
        as_sent = self._callable.stream_request and records_unmatched(self._tape)
        payloads: list[bytes] = []
        if as_sent:
            model, _none = method.request((), metadata)
        else:
            model, payloads = method.request(await self._messages(), metadata)
        plan = begin(self._tape, model)
        with serving(self._tape, plan, not_a_transport_failure):
            if isinstance(plan, Replay):
                return _Replayed(plan.interaction, plan.playback, timeout)
            recording = plan.recording
            if as_sent:
                argument: Any = self._sent(recording)
            else:
                argument = iter(payloads) if self._callable.stream_request else payloads[0]
            return _Live(self._callable.live()(argument, **self._options), recording)

    async def _source(self) -> _Source:
        """The call, opened the first time anything is asked of it; callers asking while it
        opens wait for the same opening."""
        opened = self._opened
        if opened is not None:
            return opened
        opening = self._opening
        if opening is not None:
            return await asyncio.shield(opening)
        opening = self._opening = asyncio.get_running_loop().create_future()
        try:
            opened = await self._open()
        except BaseException as exc:
            opening.set_exception(exc)
            opening.exception()  # whoever waits gets it; nobody waiting is no error
            raise
        self._opened = opened
        opening.set_result(opened)
        return opened

    def _end(self) -> None:
        if not self._finished:
            self._finished = True
            callbacks, self._callbacks = self._callbacks, []
            for callback in callbacks:
                callback(self)

    async def _next(self) -> Any:
        """The next response (deserialized), or ``aio.EOF`` after the last one; raises the
        recorded status when it is not OK."""
        source = await self._source()
        raw = await source.next()
        if raw is None:
            self._end()
            outcome = source.outcome
            assert outcome is not None
            if outcome.code is not grpc.StatusCode.OK:
                raise source.noted(_error(outcome))
            return aio.EOF
        return self._callable.method.deserialize(raw)

    # -- the answer ----------------------------------------------------------------------

    def __await__(self) -> Generator[Any, None, Any]:
        return self._unary().__await__()

    async def _unary(self) -> Any:
        response = await self._next()
        if response is aio.EOF:
            raise _error(Outcome((), (), grpc.StatusCode.INTERNAL, "no response message"))
        while await self._next() is not aio.EOF:
            pass
        return response

    def __aiter__(self) -> AsyncIterator[Any]:
        return self._iterate()

    async def _iterate(self) -> AsyncIterator[Any]:
        while (response := await self._next()) is not aio.EOF:
            yield response

    async def read(self) -> Any:
        return await self._next()

    async def write(self, request: Any) -> None:
        if self._queue is not None:  # the call is sending them as they come
            self._queue.put_nowait(request)
        else:
            self._writes.append(request)

    async def done_writing(self) -> None:
        self._written().set()
        if self._queue is not None:
            self._queue.put_nowait(_DONE)

    def _written(self) -> asyncio.Event:
        if self._writing_done is None:
            self._writing_done = asyncio.Event()
        return self._writing_done

    # -- grpc.aio.Call -------------------------------------------------------------------

    async def initial_metadata(self) -> aio.Metadata:
        source = await self._source()
        return aio.Metadata(*await source.initial_metadata())

    async def _outcome(self) -> Outcome:
        source = await self._source()
        await source.drain()
        self._end()
        assert source.outcome is not None
        return source.outcome

    async def trailing_metadata(self) -> aio.Metadata:
        return aio.Metadata(*(await self._outcome()).trailing)

    async def code(self) -> grpc.StatusCode:
        return (await self._outcome()).code

    async def details(self) -> str:
        return (await self._outcome()).details

    async def debug_error_string(self) -> str:
        outcome = await self._outcome()
        return f"replayed or recorded by agenttape: {outcome.code} {outcome.details!r}"

    async def wait_for_connection(self) -> None:
        await self._source()

    def cancelled(self) -> bool:
        return self._cancelled

    def done(self) -> bool:
        return self._finished

    def time_remaining(self) -> float | None:
        return None

    def cancel(self) -> bool:
        """Ends the call: a live one is cancelled (and recorded so), a replayed one sends
        nothing more."""
        if self._finished:
            return False
        if self._opened is not None:
            self._opened.cancel()
        self._cancelled = True
        self._end()
        return True

    def add_done_callback(self, callback: Callable[[Any], None]) -> None:
        if self._finished:
            callback(self)
        else:
            self._callbacks.append(callback)


def _error(outcome: Outcome) -> aio.AioRpcError:
    return aio.AioRpcError(
        outcome.code,
        aio.Metadata(*outcome.initial),
        aio.Metadata(*outcome.trailing),
        outcome.details,
        f"replayed by agenttape: {outcome.code}",
    )


E = TypeVar("E", bound=BaseException)


class _Source:
    """Where a call's answer comes from: message bytes, then its ``outcome``."""

    outcome: Outcome | None = None

    def noted(self, error: E) -> E:
        """``error``, raised for the outcome; replayed from a recorded failure, it says so."""
        return error

    async def next(self) -> bytes | None:
        raise NotImplementedError

    async def initial_metadata(self) -> tuple[tuple[str, Any], ...]:
        raise NotImplementedError

    def cancel(self) -> None:
        """The caller cancelled the call."""
        self.outcome = self.outcome or Outcome((), (), grpc.StatusCode.CANCELLED, "Cancelled")

    async def drain(self) -> None:
        """Reads to the end, so the status is known."""
        while await self.next() is not None:
            pass


class _Replayed(_Source):
    def __init__(self, interaction: Interaction, schedule: Schedule, timeout: Any) -> None:
        self._interaction = interaction
        self._schedule = schedule
        self._timeout = timeout
        self._recorded = Outcome.of(interaction)
        self._walk = walk(interaction, schedule, timeout)
        self._pieces = self._walk.__aiter__()
        self._reader = grpc_wire.MessageReader(encoding(interaction))
        self._ready: list[bytes] = []

    async def initial_metadata(self) -> tuple[tuple[str, Any], ...]:
        return self._recorded.initial

    def noted(self, error: E) -> E:
        if self.outcome is self._recorded and self._walk.ending == "failed":
            self._walk.noted(error)
        return error

    async def next(self) -> bytes | None:
        while not self._ready:
            if self.outcome is not None:
                return None
            try:
                piece = await self._pieces.__anext__()
            except StopAsyncIteration:
                schedule = self._schedule
                on_time = not schedule.paced or await schedule.wait_async(
                    self._interaction.duration, self._timeout
                )
                self.outcome = self._recorded if on_time else Outcome.deadline()
                return None
            except DeadlinePassed:
                self.outcome = Outcome.deadline()
                return None
            self._ready.extend(self._reader.feed(piece))
        return self._ready.pop(0)


class _Matched(_Source):
    """A replayed call whose requests and answers stream, matched message by message
    (``Conversation``); the caller's requests are read by a task of their own."""

    def __init__(
        self, conversation: Conversation, requests: AsyncIterator[Any], timeout: Any
    ) -> None:
        self._conversation = conversation
        self._changed = asyncio.Event()
        self._deadline = None if timeout is None else time.monotonic() + timeout
        self._reader = asyncio.ensure_future(self._read(requests))

    async def _read(self, requests: AsyncIterator[Any]) -> None:
        conversation = self._conversation
        try:
            async for message in requests:
                if self.outcome is not None or conversation.decided:
                    return
                conversation.heard(message)
                self._changed.set()
            if self.outcome is None and not conversation.decided:
                conversation.end()
        except Exception:
            if not conversation.decided:
                conversation.stopped(ITERATING_FAILED)
        finally:
            self._changed.set()

    async def _wait(self, ready: Callable[[], bool]) -> None:
        """Returns once ``ready()`` or the call ended; at its deadline, the call ends with
        DEADLINE_EXCEEDED."""
        while self.outcome is None and not ready():
            self._changed.clear()
            left = None if self._deadline is None else self._deadline - time.monotonic()
            try:
                await asyncio.wait_for(self._changed.wait(), left)
            except TimeoutError:
                self.outcome = Outcome.deadline()

    async def initial_metadata(self) -> tuple[tuple[str, Any], ...]:
        conversation = self._conversation
        await self._wait(lambda: conversation.due() or conversation.decided)
        return conversation.initial

    def noted(self, error: E) -> E:
        served = self._conversation.served
        if served is not None and self.outcome == Outcome.of(served.interaction):
            self._conversation.noted(error)
        return error

    async def next(self) -> bytes | None:
        conversation = self._conversation
        await self._wait(lambda: conversation.due() or conversation.over or conversation.decided)
        if self.outcome is not None:
            return None
        if conversation.due():
            return conversation.take()
        error = conversation.error
        if isinstance(error, Failed):
            self.outcome = error.outcome
        elif error is not None:
            raise error
        else:
            assert conversation.served is not None
            self.outcome = Outcome.of(conversation.served.interaction)
        return None

    def cancel(self) -> None:
        super().cancel()
        self._reader.cancel()
        self._changed.set()


class _Live(_Source):
    """A live call sending and receiving bytes, recorded as it is read."""

    def __init__(self, call: Any, recording: Recording) -> None:
        self._call = call
        self._recording = recording
        self._unary = not hasattr(call, "read")
        self._answered = False

    async def initial_metadata(self) -> tuple[tuple[str, Any], ...]:
        try:
            return tuple(await self._call.initial_metadata())
        except aio.AioRpcError as error:
            return tuple(error.initial_metadata() or ())

    async def next(self) -> bytes | None:
        if self.outcome is not None:
            return None
        recording = self._recording
        try:
            if self._unary:
                if self._answered:
                    raw: Any = aio.EOF
                else:
                    self._answered = True
                    raw = await self._call
            else:
                raw = await self._call.read()
        except aio.AioRpcError as error:
            self._finish(error.code(), error.details(), error.initial_metadata(), error)
            raise
        if raw is aio.EOF:
            initial = await self._call.initial_metadata()
            code, details = await self._call.code(), await self._call.details()
            self._finish(code, details, initial, await self._call.trailing_metadata())
            return None
        if recording.interaction.response is None:
            metadata = await self._call.initial_metadata()
            record_head(recording, _Initial(metadata))
        record_message(recording, raw)
        return bytes(raw)

    def cancel(self) -> None:
        if self.outcome is None:
            self._call.cancel()
            self._finish(grpc.StatusCode.CANCELLED, "Cancelled", (), ())

    def _finish(self, code: Any, details: Any, initial: Any, trailing: Any) -> None:
        if isinstance(trailing, aio.AioRpcError):
            trailing = trailing.trailing_metadata()
        self.outcome = Outcome(
            as_metadata(tuple(initial or ())),
            as_metadata(tuple(trailing or ())),
            code,
            details or "",
        )
        record_head(self._recording, _Initial(initial))
        record_end(self._recording, code, details, trailing)


class _Initial:
    """Initial metadata already read, in the shape ``record_head`` asks it of a call."""

    def __init__(self, metadata: Any) -> None:
        self._metadata = tuple(metadata or ())

    def initial_metadata(self) -> Any:
        return self._metadata
